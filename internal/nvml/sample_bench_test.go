package nvml_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// BenchmarkSample times Reader.Sample on the fake DGX H100 (8 GPUs, 18
// NVLinks each) and reports the NVML calls a sample makes: fast only (most
// samples), fast and slow (one sample per slow interval), and fast only
// with NVLink states read as fields. The fake answers a call in about the
// same time whatever it is, unlike NVML (bench/RESULTS.md): the calls per
// sample carry over to hardware, the times do not.
func BenchmarkSample(b *testing.B) {
	b.Run("fast", func(b *testing.B) { benchSample(b, false, nvml.WithSlowInterval(time.Hour)) })
	b.Run("fast+slow", func(b *testing.B) { benchSample(b, false, nvml.WithSlowInterval(0)) })
	b.Run("fast,state-fields", func(b *testing.B) { benchSample(b, true, nvml.WithSlowInterval(time.Hour)) })
}

// benchSample times samples after two that discover the GPUs, read the
// statics and learn what is unsupported.
func benchSample(b *testing.B, stateFields bool, opts ...nvml.Option) {
	m := nvmlmodel.NewDGXH100()
	r := nvml.NewReader(m, "", nil, opts...)
	nvml.SetLinkStateFields(r, stateFields)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := r.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	before := countCalls(m)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(countCalls(m).sub(before).total())/float64(b.N), "nvml-calls/op")
}
