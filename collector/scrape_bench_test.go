package collector_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// benchNode is what a scrape reads: a registry, the sources' versions, a
// way to take new snapshots of every source, and one to publish them.
type benchNode struct {
	reg      *scrape.Registry
	versions []scrape.Versioned
	sample   func()
	texts    []scrape.TextCollector
	hooks    *hooks
}

// hooks stands between the samplers and the collectors: the samplers'
// own OnPublish would run the collectors' encoding inside sample, which
// the benchmark leaves out of its time.
type hooks struct {
	on bool // false: the collectors are not told of publishes
	fs []func()
}

func (h *hooks) publish() {
	for _, f := range h.fs {
		f()
	}
}

// source is a sampler as the collectors see it, with or without word of
// its publishes.
func source[T any](h *hooks, s *sampler.Sampler[T]) interface {
	Latest() *sampler.Snapshot[T]
} {
	if h.on {
		return publishing[T]{lazy[T]{s}, h}
	}
	return lazy[T]{s}
}

type lazy[T any] struct{ s *sampler.Sampler[T] }

func (l lazy[T]) Latest() *sampler.Snapshot[T] { return l.s.Latest() }

type publishing[T any] struct {
	lazy[T]
	h *hooks
}

func (p publishing[T]) OnPublish(f func()) { p.h.fs = append(p.h.fs, f) }

// handlerSources are the node's versions as the handler sees them: with
// the hooks on, the first says when the node publishes through them (after
// the collectors, as in the daemon, and once: hooks.publish is every
// source's publish at once); off, none does, and the handler checks every
// version at each scrape and builds there.
func (n benchNode) handlerSources() []scrape.Versioned {
	vs := make([]scrape.Versioned, len(n.versions))
	for i, v := range n.versions {
		vs[i] = quiet{v}
		if n.hooks.on && i == 0 {
			vs[i] = publishingVersion{quiet{v}, n.hooks}
		}
	}
	return vs
}

// quiet is a source's version alone, without its OnPublish.
type quiet struct{ v scrape.Versioned }

func (q quiet) Version() uint64 { return q.v.Version() }

type publishingVersion struct {
	quiet
	h *hooks
}

func (p publishingVersion) OnPublish(f func()) { p.h.fs = append(p.h.fs, f) }

// nvmlNode is the NVML and XID sources of a fake machine.
func nvmlNode(tb testing.TB, m *nvmlmodel.Library, h *hooks) benchNode {
	n := newNode(&testing.T{}, m)
	tb.Cleanup(n.cancel)
	nv := collector.NewNVMLCollector(source(h, n.nvml))
	reg := scrape.NewRegistry()
	reg.MustRegister(nv, collector.NewXIDCollector(n.xid, n.reader), collector.NewExporterCollector(n.nvml, n.xid))
	return benchNode{reg: reg, versions: []scrape.Versioned{n.nvml, n.xid},
		sample: func() { n.nvml.SampleOnce(context.Background()) }, texts: []scrape.TextCollector{nv}, hooks: h}
}

// simNode is the daemon's wiring (main.go) with every default source over
// the simulated DGX H100, probe results and the go_* and process_*
// metrics included: the node the series budget is about.
func simNode(tb testing.TB, h *hooks) benchNode {
	node, err := sim.Start(sim.Config{Profile: "dgx-h100", Seed: 3})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { node.Close() })
	fsys := node.FS()
	reader := nvml.NewReader(node.NVML(), fsys.Sys, nil)
	if err := reader.Init(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(reader.Shutdown)
	opts := sampler.Options{Interval: time.Hour, Timeout: 10 * time.Second}
	nv := sampler.New[*nvml.Snapshot]("nvml", reader, opts)
	topo := sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fsys}, opts)
	place := sampler.New[*process.Snapshot]("process", &process.Reader{
		FS: fsys, Processes: reader.ComputeProcesses, Topology: topo.LatestData, GPUs: reader.Identities}, opts)
	nic := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fsys}, opts)
	xid := nvml.NewXIDWatcher(reader, nil)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go xid.Run(ctx, time.Second)
	sched, err := schedule.NewScheduler(schedule.SchedulerConfig{
		Policy: schedule.PolicyAlways, Runner: node.Runner(), GPUs: nv.LatestData, Processes: reader.ComputeProcesses,
		Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
		Options:   probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples},
		HostNodes: func(addr string) []int { return topo.LatestData().HostNodes(addr) },
		Annotate:  probes.Expectations{GPUs: nv.LatestData, Topology: topo.LatestData}.Annotate,
	})
	if err != nil {
		tb.Fatal(err)
	}
	texts := []scrape.TextCollector{collector.NewNVMLCollector(source(h, nv)),
		collector.NewTopologyCollector(source(h, topo), reader), collector.NewNICCollector(source(h, nic)),
		collector.NewProcessCollector(source(h, place), true), collector.NewProbeCollector(sched)}
	reg := scrape.NewRegistry()
	// As main.go: the exporter's own metrics sampled apart.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		s := scrape.NewSampled(c, time.Hour, nil)
		go s.Run(ctx)
		reg.MustRegister(s)
	}
	reg.MustRegister(collector.NewXIDCollector(xid, reader), collector.NewExporterCollector(nv, xid, topo, place, nic, sched, node))
	for _, c := range texts {
		reg.MustRegister(c)
	}
	samplers := []interface{ SampleOnce(context.Context) }{nv, topo, place, nic}
	sample := func() {
		for _, s := range samplers {
			s.SampleOnce(context.Background())
		}
	}
	sample()
	sched.RunRound(context.Background())
	return benchNode{reg: reg, versions: []scrape.Versioned{nv, xid, topo, place, nic, sched, node},
		sample: sample, texts: texts, hooks: h}
}

// BenchmarkScrape measures one /metrics request as Prometheus makes it
// (gzip, OpenMetrics offered), client in the same process:
//   - cached: a scrape that finds the response the one before it left;
//   - fresh: a scrape that meets new snapshots of every source (taken
//     outside the timer), every scrape of a Prometheus that scrapes no
//     faster than the sources sample, with no source saying when it
//     publishes: the collectors render and encode them for the scrape,
//     and the scrape builds the body;
//   - published: the same, the collectors and then the handler told of
//     each publish, encoding the new snapshots and building the body
//     then (inside the timer, as publish-cpu-ns/op), so that the scrape
//     (scrape-cpu-ns/op) only sends it: what the daemon does.
//
// cpu-ns/op is the process's CPU time, client included: on a machine
// shared with other work it says more than the wall time.
// "sim-dgx-h100" is the simulated DGX H100 with every default source
// (about 3000 series); the other two are the NVML and XID sources alone
// over a fake machine.
func BenchmarkScrape(b *testing.B) {
	for _, tc := range []struct {
		name string
		node func(*testing.B, *hooks) benchNode
	}{
		{"h200-pair", func(b *testing.B, h *hooks) benchNode { return nvmlNode(b, nvmlmodel.NewH200Pair(), h) }},
		{"dgx-h100", func(b *testing.B, h *hooks) benchNode { return nvmlNode(b, nvmlmodel.NewDGXH100(), h) }},
		{"sim-dgx-h100", func(b *testing.B, h *hooks) benchNode { return simNode(b, h) }},
	} {
		for _, mode := range []string{"cached", "fresh", "published"} {
			b.Run(tc.name+"/"+mode, func(b *testing.B) {
				n := tc.node(b, &hooks{on: mode == "published"})
				srv := httptest.NewServer(scrape.NewHandler(n.reg, n.handlerSources(), 0, nil))
				defer srv.Close()
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("Accept-Encoding", "gzip")
				req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
				var wire int64
				get := func() {
					resp, err := http.DefaultTransport.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					wire, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				// Scraped before as in the loop: the collectors know the
				// format is wanted.
				for range 3 {
					n.sample()
					n.hooks.publish()
					get()
				}
				var publishCPU, scrapeCPU time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if mode != "cached" {
						b.StopTimer()
						n.sample()
						b.StartTimer()
					}
					c0 := processCPU()
					if mode == "published" {
						n.hooks.publish()
					}
					c1 := processCPU()
					get()
					c2 := processCPU()
					publishCPU += c1 - c0
					scrapeCPU += c2 - c1
				}
				b.ReportMetric(float64(wire), "wire-bytes/op")
				b.ReportMetric(float64((publishCPU+scrapeCPU).Nanoseconds())/float64(b.N), "cpu-ns/op")
				if mode == "published" {
					b.ReportMetric(float64(publishCPU.Nanoseconds())/float64(b.N), "publish-cpu-ns/op")
					b.ReportMetric(float64(scrapeCPU.Nanoseconds())/float64(b.N), "scrape-cpu-ns/op")
				}
			})
		}
	}
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // RUSAGE_SELF cannot fail
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestEncodeTextSimulatedNode checks every snapshot collector of the
// simulated DGX H100, probe results included, encodes what Gather makes
// of it.
func TestEncodeTextSimulatedNode(t *testing.T) {
	n := simNode(t, &hooks{})
	for _, c := range n.texts {
		scrapetest.CheckText(t, c)
	}
}
