package nvmlmodel

import (
	"sync"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestForgetCallsEmptiesEveryRecord(t *testing.T) {
	m := NewH200Pair()
	lib := gonvml.Interface(m.Server)
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	es, _ := lib.EventSetCreate()
	use := func() {
		_, _ = dev.GetNvLinkState(3)
		_ = dev.GetFieldValues([]gonvml.FieldValue{{FieldId: gonvml.FI_DEV_MEMORY_TEMP}})
		_, _ = es.Wait(0)
	}
	use()
	g, set := &m.GPUs[0].Device.Device, m.eventSets[0]
	if len(g.GetNvLinkStateCalls()) != 1 || len(g.GetFieldValuesCalls()) != 1 || len(set.WaitCalls()) != 1 || len(m.Server.InitCalls()) != 1 {
		t.Fatalf("the mocks recorded %d, %d, %d, %d calls; want one each", len(g.GetNvLinkStateCalls()),
			len(g.GetFieldValuesCalls()), len(set.WaitCalls()), len(m.Server.InitCalls()))
	}

	// Calls go on while the records are emptied (the race detector
	// checks the locking).
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			_, _ = dev.GetNvLinkState(1)
		}
	})
	for range 10 {
		m.ForgetCalls()
	}
	wg.Wait()
	m.ForgetCalls()
	if n := len(g.GetNvLinkStateCalls()) + len(g.GetFieldValuesCalls()) + len(set.WaitCalls()) + len(m.Server.InitCalls()) +
		len(m.Server.DeviceGetHandleByIndexCalls()); n != 0 {
		t.Errorf("%d calls still recorded after ForgetCalls", n)
	}

	// The mocks still answer, and record again.
	use()
	if v, ret := dev.GetNvLinkState(3); ret != gonvml.SUCCESS || v != gonvml.FEATURE_ENABLED {
		t.Errorf("GetNvLinkState after ForgetCalls: %v %v", v, ret)
	}
	if len(g.GetNvLinkStateCalls()) != 2 {
		t.Errorf("%d GetNvLinkState calls recorded, want 2", len(g.GetNvLinkStateCalls()))
	}

	es.Free()
	if len(m.eventSets) != 0 {
		t.Errorf("a freed event set is still kept: %d", len(m.eventSets))
	}
}
