package nvml_test

import (
	"reflect"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// callCounts is how often each NVML method was called, by method name,
// from go-nvml's mock call records: the library's calls and every GPU's
// together.
type callCounts map[string]int

// countCalls reads the call records of the machine's library and of the
// GPUs with the given indexes (all GPUs when none are given).
func countCalls(m *nvmlmodel.Library, gpus ...int) callCounts {
	out := callCounts{}
	if len(gpus) == 0 {
		addCalls(out, &m.Server.Interface)
		for i := range m.GPUs {
			gpus = append(gpus, i)
		}
	}
	for _, i := range gpus {
		addCalls(out, &m.GPUs[i].Device.Device)
	}
	return out
}

// addCalls adds the length of every XxxCalls() record of a moq mock.
func addCalls(out callCounts, mock any) {
	v := reflect.ValueOf(mock)
	t := v.Type()
	for i := 0; i < t.NumMethod(); i++ {
		meth := t.Method(i)
		if !strings.HasSuffix(meth.Name, "Calls") || meth.Type.NumIn() != 1 || meth.Type.NumOut() != 1 {
			continue
		}
		if n := v.Method(i).Call(nil)[0].Len(); n > 0 {
			out[strings.TrimSuffix(meth.Name, "Calls")] += n
		}
	}
}

// sub is what was called between before and c.
func (c callCounts) sub(before callCounts) callCounts {
	out := callCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (c callCounts) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}
