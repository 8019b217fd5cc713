package dcgm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"

	"github.com/gpulink/gpulink_exporter/internal/dcgm/dcgmtest"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Every test here goes through go-dcgm's real cgo calls into a fake
// libdcgm.so.4 built from C. go-dcgm's connection is process state and the
// library, once loaded, stays: tests run one after another and each closes
// its reader.
var (
	fakeLib string
	engine  *dcgmtest.Engine
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpulink-dcgm-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if fakeLib, err = dcgmtest.BuildIn(dir, "libdcgm.so.4"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if engine, err = dcgmtest.NewEngine(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// newReader resets the fake engine to kv and returns a reader of it that
// the test closes when it ends.
func newReader(t *testing.T, cfg Config, kv ...string) *Reader {
	t.Helper()
	if err := engine.Reset(kv...); err != nil {
		t.Fatal(err)
	}
	if cfg.Library == "" {
		cfg.Library = fakeLib
	}
	r := NewReader(cfg)
	t.Cleanup(r.Close)
	return r
}

func set(t *testing.T, kv ...string) {
	t.Helper()
	if err := engine.Set(kv...); err != nil {
		t.Fatal(err)
	}
}

// calls returns the fake's call log since the last look, and starts a new one.
func calls(t *testing.T) []string {
	t.Helper()
	c := engine.Calls()
	if err := os.WriteFile(os.Getenv(dcgmtest.EnvLog), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(c) == 1 && c[0] == "" {
		return nil
	}
	return c
}

func names(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, _, _ := strings.Cut(l, " ")
		out = append(out, name)
	}
	return out
}

func sample(t *testing.T, r *Reader) (*Snapshot, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Sample(ctx)
}

const (
	uuid0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	uuid1 = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
)

// h200Pair is two GPUs with profiling values and health incidents: GPU 0
// a PCIe warning, GPU 1 a thermal failure and an InfoROM incident, which is
// not a system the reader watches and must not show.
var h200Pair = []string{
	"gpus", "2",
	"uuid.0", uuid0, "busid.0", "00000000:06:00.0",
	"uuid.1", uuid1, "busid.1", "00000000:07:00.0",
	"version", "4.2.3", "library_version", "4.1.1",
	"value.1001.0", "0.75", "value.1002.0", "0.5", "value.1003.0", "0.25", "value.1004.0", "0.125",
	"value.1005.0", "0.0625", "value.1009.0", "1000000", "value.1010.0", "2000000",
	"value.1011.0", "3000000000", "value.1012.0", "4000000000",
	// GPU 1: occupancy blank, tensor with no sample yet, the rest set.
	"value.1001.1", "1", "value.1002.1", "0.9", "value.1003.1", "blank",
	"value.1005.1", "0.5", "value.1009.1", "10", "value.1010.1", "20", "value.1011.1", "0", "value.1012.1", "0",
	"health.0.1", "10:PCIe replay rate high",
	"health.1.128", "20:GPU temperature 95 C",
	"health.1.64", "20:InfoROM corrupted",
}

// nvmlSwapped is NVML's view of the pair with the indices the other way
// round from DCGM's ids: labels must follow the UUID.
func nvmlSwapped() []nvml.Identity {
	return []nvml.Identity{
		{Index: 0, UUID: uuid1, PCIBusID: "0000:07:00.0"},
		{Index: 1, UUID: uuid0, PCIBusID: "0000:06:00.0"},
	}
}

// pass is every watched system passing.
func pass() []SystemHealth {
	var out []SystemHealth
	for _, s := range HealthSystems() {
		out = append(out, SystemHealth{System: s, Result: HealthPass})
	}
	return out
}

func some(v float64) sampler.Opt[float64] { return sampler.Some(v) }

func wantPair() *Snapshot {
	h0 := pass()
	h0[0] = SystemHealth{System: "pcie", Result: HealthWarn, Incidents: 1, Message: "PCIe replay rate high"}
	h1 := pass()
	h1[3] = SystemHealth{System: "thermal", Result: HealthFail, Incidents: 1, Message: "GPU temperature 95 C"}
	return &Snapshot{
		Mode: "standalone", Version: "4.2.3", LibraryVersion: "4.1.1", Profiling: true,
		GPUs: []GPU{
			{ID: 1, Index: 0, UUID: uuid1, PCIBusID: "0000:07:00.0", Health: h1, Profiling: Profiling{
				GraphicsEngineActive: some(1), SMActive: some(0.9), DRAMActive: some(0.5),
				PCIeTransmit: some(10), PCIeReceive: some(20), NVLinkTransmit: some(0), NVLinkReceive: some(0)}},
			{ID: 0, Index: 1, UUID: uuid0, PCIBusID: "0000:06:00.0", Health: h0, Profiling: Profiling{
				GraphicsEngineActive: some(0.75), SMActive: some(0.5), SMOccupancy: some(0.25), TensorActive: some(0.125),
				DRAMActive: some(0.0625), PCIeTransmit: some(1e6), PCIeReceive: some(2e6),
				NVLinkTransmit: some(3e9), NVLinkReceive: some(4e9)}},
		},
	}
}

func TestSampleThroughGoDCGM(t *testing.T) {
	r := newReader(t, Config{Interval: 5 * time.Second, GPUs: nvmlSwapped}, h200Pair...)
	snap, err := sample(t, r)
	if err != nil {
		t.Fatalf("sample: %v", err)
	}
	if want := wantPair(); !reflect.DeepEqual(snap, want) {
		t.Errorf("snapshot:\n got %+v\nwant %+v", snap, want)
	}
	// The connection and its watches, in go-dcgm's order of calls: the
	// profiling fields every 5 s, the identity fields every minute, the
	// five health systems (PCIe|NVLink|memory|thermal|power = 0x193).
	want := []string{
		"dcgmInit 0",
		"dcgmConnect_v2 0 address=localhost:5555 unix=0",
		"dcgmVersionInfo 0",
		"dcgmHostengineVersionInfo 0",
		"dcgmGetAllSupportedDevices 0",
		"dcgmGroupCreate 0",
		"dcgmGroupAddDevice 0",
		"dcgmGroupAddDevice 0",
		"dcgmFieldGroupCreate 0",
		"dcgmWatchFields 0 freq_us=60000000 fields=2 gpus=2",
		"dcgmUpdateAllFields 0",
		"dcgmFieldGroupCreate 0",
		"dcgmWatchFields 0 freq_us=5000000 fields=9 gpus=2",
		"dcgmUpdateAllFields 0",
		"dcgmHealthSet 0 systems=0x193",
		"dcgmEntitiesGetLatestValues 0 entities=2 fields=11",
		"dcgmHealthCheck 0",
	}
	if got := calls(t); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %q\nwant %q", got, want)
	}
	// Later samples reuse the connection: two calls each.
	set(t, "value.1002.0", "0.0")
	snap, err = sample(t, r)
	if err != nil {
		t.Fatalf("second sample: %v", err)
	}
	if got := snap.GPUs[1].Profiling.SMActive; got != some(0) {
		t.Errorf("second sample SM active = %+v, want 0", got)
	}
	if got, want := names(calls(t)), []string{"dcgmEntitiesGetLatestValues", "dcgmHealthCheck"}; !slices.Equal(got, want) {
		t.Errorf("second sample calls %q, want %q", got, want)
	}
	r.Close()
	if got, want := names(calls(t)), []string{"dcgmDisconnect", "dcgmShutdown"}; !slices.Equal(got, want) {
		t.Errorf("close calls %q, want %q", got, want)
	}
}

func TestWithoutNVMLLabelsAreDCGMs(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "2", "busid.0", "00000000:1A:00.0")
	snap, err := sample(t, r)
	if err != nil {
		t.Fatal(err)
	}
	got := [][3]any{}
	for _, g := range snap.GPUs {
		got = append(got, [3]any{g.Index, g.UUID, g.PCIBusID})
	}
	want := [][3]any{
		{0, "GPU-00000000-0000-0000-0000-000000000000", "0000:1a:00.0"},
		{1, "GPU-00000000-0000-0000-0000-000000000001", "0000:19:00.0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
}

func TestFieldErrorsArePartial(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "1", "value.1002.0", "status:-3", "value.1001.0", "0.5")
	snap, err := sample(t, r)
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 || !strings.Contains(err.Error(), "field 1002 of GPU 0: status -3") {
		t.Fatalf("err = %v, want one dropped value naming field 1002", err)
	}
	p := snap.GPUs[0].Profiling
	if p.SMActive.Valid || p.GraphicsEngineActive != some(0.5) {
		t.Errorf("profiling %+v: want SM active absent, engine active 0.5", p)
	}
}

func TestNoLibrary(t *testing.T) {
	r := newReader(t, Config{Library: filepath.Join(t.TempDir(), "libdcgm.so.4")})
	s := sampler.New[*Snapshot]("dcgm", r, sampler.Options{Interval: time.Hour})
	s.SampleOnce(context.Background())
	if st := s.Status(); st.Up || st.Errors != 1 || s.Latest() != nil {
		t.Errorf("status %+v, latest %v: want down, one error, no snapshot", st, s.Latest())
	}
	_, err := sample(t, r)
	if !errors.Is(err, ErrNoLibrary) {
		t.Errorf("err = %v, want ErrNoLibrary", err)
	}
	if c := calls(t); len(c) != 0 {
		t.Errorf("DCGM was called without its library: %q", c)
	}
}

func TestLibraryWithAnotherSONAMEIsRefused(t *testing.T) {
	lib, err := dcgmtest.BuildIn(t.TempDir(), "libnotdcgm.so.1")
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, Config{Library: lib})
	_, err = sample(t, r)
	// Before any libdcgm.so.4 is loaded the SONAME is what is wrong; after
	// (the other tests, -count), that go-dcgm would reach another library.
	if err == nil || !strings.Contains(err.Error(), "does not have the SONAME libdcgm.so.4") &&
		!strings.Contains(err.Error(), "another libdcgm.so.4 is already loaded") {
		t.Errorf("err = %v, want a SONAME refusal", err)
	}
	if c := calls(t); len(c) != 0 {
		t.Errorf("DCGM was called through a refused library: %q", c)
	}
}

func TestSecondLibraryIsRefused(t *testing.T) {
	first := newReader(t, Config{}, "gpus", "1")
	if _, err := sample(t, first); err != nil {
		t.Fatal(err)
	}
	first.Close()
	// A process keeps the libdcgm.so.4 it loaded first: go-dcgm's
	// dlopen by name finds that one, so another file is refused.
	other, err := dcgmtest.BuildIn(t.TempDir(), "libdcgm.so.4")
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, Config{Library: other})
	if _, err := sample(t, r); err == nil || !strings.Contains(err.Error(), "another libdcgm.so.4 is already loaded in this process") {
		t.Errorf("second library: err = %v", err)
	}
	// The one loaded is reached by name.
	r = newReader(t, Config{Library: DefaultLibrary}, "gpus", "1")
	if _, err := sample(t, r); err != nil {
		t.Errorf("by name: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		address, listen, want string
		ok                    bool
	}{
		{"/run/nvidia/dcgm.sock", "/run/nvidia/dcgm.sock", "address=/run/nvidia/dcgm.sock unix=1", true},
		{"10.0.0.7:5555", "10.0.0.7:5555", "address=10.0.0.7:5555 unix=0", true},
		{"localhost:5555", "localhost:6666", "address=localhost:5555 unix=0", false},
	} {
		t.Run(tc.address, func(t *testing.T) {
			r := newReader(t, Config{Address: tc.address}, "listen", tc.listen)
			_, err := sample(t, r)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if !tc.ok && !strings.Contains(err.Error(), "no DCGM host engine at "+tc.address) {
				t.Errorf("err = %v, want it to name the address", err)
			}
			var connect string
			for _, c := range calls(t) {
				if strings.HasPrefix(c, "dcgmConnect_v2 ") {
					connect = c
				}
			}
			if !strings.HasSuffix(connect, tc.want) {
				t.Errorf("connect %q, want %q", connect, tc.want)
			}
		})
	}
	// A connection string needs dcgmConnect_v3 (DCGM 4.5): go-dcgm looks
	// for it and says so rather than calling a missing symbol.
	r := newReader(t, Config{Address: "unix:///run/nvidia/dcgm.sock"})
	if _, err := sample(t, r); err == nil || !strings.Contains(err.Error(), "4.5.0") {
		t.Errorf("connection string on a library without dcgmConnect_v3: err = %v", err)
	}
}

func TestEngineLostAndBack(t *testing.T) {
	r := newReader(t, Config{GPUs: nvmlSwapped}, h200Pair...)
	s := sampler.New[*Snapshot]("dcgm", r, sampler.Options{Interval: time.Hour})
	s.SampleOnce(context.Background())
	if !s.Status().Up {
		t.Fatalf("first sample: %+v", s.Status())
	}
	first := s.Latest()
	calls(t)

	// The engine goes away: the sample fails, the connection is dropped,
	// the last snapshot stays and the source is down.
	set(t, "engine", "down")
	s.SampleOnce(context.Background())
	if st := s.Status(); st.Up || s.Latest() != first {
		t.Errorf("engine down: status %+v; snapshot kept: %v", st, s.Latest() == first)
	}
	if got, want := names(calls(t)), []string{"dcgmEntitiesGetLatestValues", "dcgmDisconnect", "dcgmShutdown"}; !slices.Equal(got, want) {
		t.Errorf("engine lost: calls %q, want %q", got, want)
	}
	// While it is away every sample tries to connect, and fails.
	s.SampleOnce(context.Background())
	if got, want := names(calls(t)), []string{"dcgmInit", "dcgmConnect_v2"}; !slices.Equal(got, want) || s.Status().Up {
		t.Errorf("engine away: calls %q (want %q), status %+v", got, want, s.Status())
	}

	// A new engine (restarted: old connections unknown to it) comes back
	// with other values: the next sample connects, watches again and reads.
	set(t, "engine", "up", "generation", "2", "value.1002.0", "0.01")
	s.SampleOnce(context.Background())
	if st := s.Status(); !st.Up {
		t.Fatalf("engine back: status %+v", st)
	}
	if got := s.Latest().Data.GPUs[1].Profiling.SMActive; got != some(0.01) {
		t.Errorf("engine back: SM active %+v, want 0.01", got)
	}
	got := names(calls(t))
	if slices.Index(got, "dcgmConnect_v2") < 0 || slices.Index(got, "dcgmHealthSet") < 0 ||
		len(slices.DeleteFunc(slices.Clone(got), func(n string) bool { return n != "dcgmWatchFields" })) != 2 {
		t.Errorf("engine back: calls %q, want a connect and both watches set again", got)
	}

	// A restart between two samples, never seen down: the old connection's
	// first call fails, and the sample after reconnects.
	set(t, "generation", "3")
	s.SampleOnce(context.Background())
	if s.Status().Up {
		t.Errorf("engine restarted unseen: source still up")
	}
	s.SampleOnce(context.Background())
	if st := s.Status(); !st.Up {
		t.Errorf("after the restart: status %+v", st)
	}
}

func TestHungEngineStallsOnlyItsSampler(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "1", "value.1002.0", "0.5")
	s := sampler.New[*Snapshot]("dcgm", r, sampler.Options{Interval: time.Hour, Timeout: 100 * time.Millisecond})
	s.SampleOnce(context.Background())
	set(t, "engine", "hang")
	start := time.Now()
	s.SampleOnce(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a hung engine held SampleOnce for %v", took)
	}
	if st := s.Status(); st.Up || !st.Stalled {
		t.Errorf("hung engine: status %+v, want down and stalled", st)
	}
	set(t, "engine", "up")
	deadline := time.Now().Add(5 * time.Second)
	for s.Status().Stalled && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.SampleOnce(context.Background())
	if st := s.Status(); !st.Up {
		t.Errorf("engine answering again: status %+v", st)
	}
}

// A sample hung in the engine does not hold Close (the exporter's exit)
// past its bound; the disconnect follows when the call returns.
func TestCloseDoesNotWaitForAHungEngine(t *testing.T) {
	var log strings.Builder
	r := newReader(t, Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}, "gpus", "1", "value.1002.0", "0.5")
	r.closeWait = 100 * time.Millisecond
	if _, err := sample(t, r); err != nil {
		t.Fatal(err)
	}
	set(t, "engine", "hang")
	hung := make(chan struct{})
	go func() {
		_, _ = r.Sample(context.Background())
		close(hung)
	}()
	// The sample is in the engine once it holds the reader's lock.
	for r.mu.TryLock() {
		r.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close waited %v for a hung engine", took)
	}
	if !strings.Contains(log.String(), "still running at shutdown") {
		t.Errorf("log does not say Close gave up waiting:\n%s", log.String())
	}
	// The engine answers again: the sample ends, and the disconnect
	// follows, so that the next test finds go-dcgm free.
	set(t, "engine", "up")
	<-hung
	for deadline := time.Now().Add(5 * time.Second); owner.Load() != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no disconnect after the hung call returned")
		}
	}
}

func TestProfilingRefusedLeavesHealth(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "1", "profiling", "0", "value.1002.0", "0.5", "health.0.2", "20:NVLink down")
	snap, err := sample(t, r)
	if err != nil {
		t.Fatalf("sample: %v", err)
	}
	if snap.Profiling || snap.GPUs[0].Profiling != (Profiling{}) {
		t.Errorf("profiling refused, yet snapshot says %v with %+v", snap.Profiling, snap.GPUs[0].Profiling)
	}
	if h := snap.GPUs[0].Health[1]; h.System != "nvlink" || h.Result != HealthFail {
		t.Errorf("nvlink health %+v, want fail", h)
	}
	var watch string
	for _, c := range calls(t) {
		if strings.HasPrefix(c, "dcgmWatchFields") && strings.Contains(c, "fields=9") {
			watch = c
		}
	}
	if !strings.HasPrefix(watch, "dcgmWatchFields -36 ") {
		t.Errorf("profiling watch %q, want refused with -36", watch)
	}
}

func TestHealthCheckFailureIsPartial(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "1", "value.1002.0", "0.5", "fail.dcgmHealthCheck", "-3")
	snap, err := sample(t, r)
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 {
		t.Fatalf("err = %v, want one dropped value", err)
	}
	if g := snap.GPUs[0]; g.Health != nil || g.Profiling.SMActive != some(0.5) {
		t.Errorf("GPU %+v: want profiling values and no health", g)
	}
	calls(t)
	set(t, "fail.dcgmHealthCheck", "")
	if _, err := sample(t, r); err != nil {
		t.Fatal(err)
	}
	if got := names(calls(t)); slices.Contains(got, "dcgmConnect_v2") {
		t.Errorf("a failed health check dropped the connection: %q", got)
	}
}

func TestEmbeddedOnlyWhenAsked(t *testing.T) {
	r := newReader(t, Config{}, "engine", "down", "gpus", "1", "value.1002.0", "0.5")
	if _, err := sample(t, r); err == nil {
		t.Fatal("no engine and not embedded: sample succeeded")
	}
	if got := names(calls(t)); slices.Contains(got, "dcgmStartEmbedded") {
		t.Errorf("embedded an engine unasked: %q", got)
	}
	r.Close()

	r = newReader(t, Config{Embedded: true}, "engine", "down", "gpus", "1", "value.1002.0", "0.5")
	snap, err := sample(t, r)
	if err != nil {
		t.Fatalf("embedded: %v", err)
	}
	if snap.Mode != "embedded" || snap.GPUs[0].Profiling.SMActive != some(0.5) {
		t.Errorf("embedded snapshot %+v", snap)
	}
	r.Close()
	if got := names(calls(t)); !slices.Contains(got, "dcgmStartEmbedded") || !slices.Contains(got, "dcgmStopEmbedded") {
		t.Errorf("embedded calls %q: want the engine started and stopped", got)
	}
}

func TestNoGPUs(t *testing.T) {
	r := newReader(t, Config{}, "gpus", "0")
	snap, err := sample(t, r)
	if err != nil || len(snap.GPUs) != 0 || snap.Version != "4.2.3" {
		t.Fatalf("snapshot %+v, err %v", snap, err)
	}
	if got := names(calls(t)); slices.Contains(got, "dcgmGroupCreate") || slices.Contains(got, "dcgmEntitiesGetLatestValues") {
		t.Errorf("calls %q: nothing to watch or read without GPUs", got)
	}
}

func TestOneReaderPerProcess(t *testing.T) {
	a := newReader(t, Config{}, "gpus", "1")
	if _, err := sample(t, a); err != nil {
		t.Fatal(err)
	}
	b := NewReader(Config{Library: fakeLib})
	defer b.Close()
	if _, err := sample(t, b); !errors.Is(err, ErrInUse) {
		t.Errorf("second reader: err = %v, want ErrInUse", err)
	}
	a.Close()
	if _, err := sample(t, b); err != nil {
		t.Errorf("second reader after the first closed: %v", err)
	}
}

func TestEngineListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sock := filepath.Join(t.TempDir(), "he.sock")
	u, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	for addr, want := range map[string]bool{
		l.Addr().String():            true,
		"tcp://" + l.Addr().String(): true,
		sock:                         true,
		"unix://" + sock:             true,
		closedAddr:                   false,
		sock + ".missing":            false,
		"vsock://3:5555":             false,
	} {
		if got := EngineListening(addr, time.Second); got != want {
			t.Errorf("EngineListening(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestBuildVersion(t *testing.T) {
	for raw, want := range map[string]string{
		"version:4.2.3;arch:x86_64;buildtype:Release": "4.2.3",
		"arch:x86_64; version: 3.3.9 ;":               "3.3.9",
		"":                                            "",
		"garbage":                                     "",
		"version:4.\xff":                              "4.\uFFFD",
	} {
		if got := buildVersion(raw); got != want {
			t.Errorf("buildVersion(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestFieldStringIsValidUTF8(t *testing.T) {
	v := godcgm.FieldValue_v2{FieldType: godcgm.DCGM_FT_STRING}
	copy(v.Value[:], " GPU-\xffab \x00")
	if got := fieldString(v); got != "GPU-\uFFFDab" {
		t.Errorf("fieldString = %q", got)
	}
	copy(v.Value[:], "<<<NULL>>>\x00")
	if got := fieldString(v); got != "" {
		t.Errorf("blank string = %q, want empty", got)
	}
}
