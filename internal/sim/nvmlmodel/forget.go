package nvmlmodel

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// ForgetCalls empties the record go-nvml's mocks keep of every call they
// answer. The mocks are made by moq for tests, which read the record
// (XxxCalls); it is never emptied and grows with every call: the simulated
// node, which runs for as long as an exporter does, grew by about 5 MB an
// hour with it (bench/RESULTS.md, the fourth session's soak). Tests that
// count calls do so across calls to the library, not across ForgetCalls.
func (m *Library) ForgetCalls() {
	forgetCalls(&m.Server.Interface)
	for _, g := range m.GPUs {
		forgetCalls(&g.Device.Device)
	}
	m.mu.Lock()
	sets := m.eventSets
	m.mu.Unlock()
	for _, es := range sets {
		forgetCalls(es)
	}
}

// A moq mock keeps the record of method X in the field X of its
// unexported struct calls, appended under its unexported lock lockX.
// recordFields are the pairs of field indexes for each mock type, found
// once.
var recordFields sync.Map // reflect.Type -> []recordField

type recordField struct{ calls, lock int }

func recordFieldsOf(t reflect.Type) []recordField {
	if fs, ok := recordFields.Load(t); ok {
		return fs.([]recordField)
	}
	calls, ok := t.FieldByName("calls")
	if !ok || calls.Type.Kind() != reflect.Struct {
		panic(fmt.Sprintf("nvmlmodel: %v has no calls record: not a moq mock of the expected shape", t))
	}
	var fs []recordField
	for i := 0; i < calls.Type.NumField(); i++ {
		name := calls.Type.Field(i).Name
		lock, ok := t.FieldByName("lock" + name)
		if !ok || lock.Type != reflect.TypeFor[sync.RWMutex]() {
			panic(fmt.Sprintf("nvmlmodel: %v records %s without its lock%s", t, name, name))
		}
		fs = append(fs, recordField{calls: i, lock: lock.Index[0]})
	}
	recordFields.Store(t, fs)
	return fs
}

// forgetCalls empties every record of the moq mock ptr points to, each
// under the lock its method appends under.
func forgetCalls[T mock.Device | mock.Interface | mock.EventSet](ptr *T) {
	v := reflect.ValueOf(ptr).Elem()
	calls := v.FieldByName("calls")
	for _, f := range recordFieldsOf(v.Type()) {
		mu := (*sync.RWMutex)(unsafe.Pointer(v.Field(f.lock).UnsafeAddr()))
		rec := calls.Field(f.calls)
		mu.Lock()
		reflect.NewAt(rec.Type(), unsafe.Pointer(rec.UnsafeAddr())).Elem().SetZero()
		mu.Unlock()
	}
}
