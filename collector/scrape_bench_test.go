package collector_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

type bump struct{ v atomic.Uint64 }

func (b *bump) Version() uint64 { return b.v.Load() }

// BenchmarkScrape measures one /metrics request as Prometheus makes it
// (gzip, OpenMetrics offered) from snapshots already taken: "cached" is any
// scrape after the first since the last sample, "fresh" the first one,
// which gathers and encodes.
func BenchmarkScrape(b *testing.B) {
	for _, tc := range []struct {
		name string
		m    func() *nvmlmodel.Library
	}{{"h200-pair", nvmlmodel.NewH200Pair}, {"dgx-h100", nvmlmodel.NewDGXH100}} {
		for _, fresh := range []bool{false, true} {
			name := tc.name + "/cached"
			if fresh {
				name = tc.name + "/fresh"
			}
			b.Run(name, func(b *testing.B) {
				n := newNode(&testing.T{}, tc.m())
				defer n.cancel()
				v := &bump{}
				srv := httptest.NewServer(scrape.NewHandler(n.reg, []scrape.Versioned{n.nvml, n.xid, v}, 0, nil))
				defer srv.Close()
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("Accept-Encoding", "gzip")
				req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if fresh {
						v.v.Add(1)
					}
					resp, err := http.DefaultTransport.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
