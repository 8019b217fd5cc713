package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
)

// The factors nccl-tests' PERFORMANCE.md gives, at 2 and 8 ranks.
func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		c    Collective
		n    int
		want float64
	}{
		{AllReduce, 2, 1}, {AllReduce, 8, 1.75},
		{AllGather, 2, 0.5}, {AllGather, 8, 0.875},
		{ReduceScatter, 8, 0.875}, {AllToAll, 8, 0.875},
		{SendRecv, 2, 1}, {SendRecv, 8, 1},
		{AllReduce, 1, 0}, {AllReduce, 0, 0}, {Collective("broadcast"), 8, 0},
	} {
		if got := BusFactor(tc.c, tc.n); got != tc.want {
			t.Errorf("BusFactor(%s, %d) = %g, want %g", tc.c, tc.n, got, tc.want)
		}
	}
}

// recordingComm times every operation at 1 ms and records the calls.
type recordingComm struct {
	calls  []string
	failOn string
	closed bool
}

func (c *recordingComm) Collective(op Collective, size int64) (Measured, error) {
	c.calls = append(c.calls, fmt.Sprintf("%s/%d", op, size))
	if string(op) == c.failOn {
		return Measured{}, errors.New("ncclAllGather: unhandled system error")
	}
	return Measured{Median: 1e-3, Min: 0.9e-3, Max: 1.2e-3}, nil
}

func (c *recordingComm) SendRecv(from, to int, size int64) (Measured, error) {
	c.calls = append(c.calls, fmt.Sprintf("send_recv/%d->%d/%d", from, to, size))
	return Measured{Median: 2e-3, Min: 2e-3, Max: 2e-3}, nil
}

func (c *recordingComm) Transports() []Transport {
	return []Transport{{Channel: 0, FromRank: 0, ToRank: 1, Kind: TransportP2P, Detail: "P2P/CUMEM/read"}}
}
func (c *recordingComm) Cost() Cost     { return Cost{BusySeconds: 0.5, DeviceMemoryBytes: 1 << 30} }
func (c *recordingComm) Close() float64 { c.closed = true; return 2 }

type recordingMeasurer struct {
	comm    *recordingComm
	openErr error
}

func (m *recordingMeasurer) NCCLVersion() int { return 22703 }
func (m *recordingMeasurer) OpenComm(context.Context, CollectiveOptions, chan<- string) (Communicator, error) {
	if m.openErr != nil {
		return nil, m.openErr
	}
	return m.comm, nil
}

func TestMeasureCollectiveRound(t *testing.T) {
	comm := &recordingComm{failOn: string(AllGather)}
	o := CollectiveOptions{GPUs: []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"}, Ranks: 3,
		Collectives: []Collective{SendRecv, AllGather, AllReduce}, SizeBytes: 1 << 30, SmallBytes: 8 << 10}
	r := MeasureCollectiveRound(context.Background(), &recordingMeasurer{comm: comm}, o, nil)
	want := []string{
		"all_reduce/1073741824", "all_reduce/8192", "all_gather/1073741824", "all_gather/8192",
		"send_recv/0->1/1073741824", "send_recv/0->2/1073741824", "send_recv/1->2/1073741824",
		"send_recv/0->1/8192", "send_recv/0->2/8192", "send_recv/1->2/8192",
	}
	if !slices.Equal(comm.calls, want) {
		t.Errorf("calls\n got %q\nwant %q", comm.calls, want)
	}
	if !comm.closed || r.ContextSeconds != 2 || r.BusySeconds != 0.5 || r.DeviceMemoryBytes != 1<<30 || len(r.Transports) != 1 {
		t.Errorf("cost and transports not taken at close: %+v", r)
	}
	if r.Version != CollectiveContractVersion || r.NCCLVersion != 22703 || r.Ranks != 3 || len(r.Results) != len(want) {
		t.Fatalf("round header or result count wrong: %+v", r)
	}
	ar := r.Results[0]
	// 1 GiB in 1 ms over 3 ranks: algbw 1.07e12, busbw 4/3 of it.
	if ar.AlgBytesPerSecond != float64(1<<30)/1e-3 || math.Abs(ar.BusBytesPerSecond-ar.AlgBytesPerSecond*4/3) > 1 || ar.SampleMax != 1.2e-3 {
		t.Errorf("all_reduce result %+v", ar)
	}
	if ag := r.Results[2]; ag.Error == "" || ag.BusBytesPerSecond != 0 {
		t.Errorf("failed all_gather kept no error or a value: %+v", ag)
	}
	sr := r.Results[5]
	if *sr.FromRank != 0 || *sr.ToRank != 2 || sr.Ranks != 2 || sr.BusBytesPerSecond != sr.AlgBytesPerSecond {
		t.Errorf("send_recv result %+v", sr)
	}

	loadErr := errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")
	failed := MeasureCollectiveRound(context.Background(), &recordingMeasurer{openErr: loadErr}, o, nil)
	if failed.Error != loadErr.Error() || failed.NoLibrary || len(failed.Results) != 0 {
		t.Errorf("round without a communicator: %+v", failed)
	}
	if err := failed.Err(); err == nil || errors.Is(err, ErrNoLibrary) {
		t.Errorf("Err() of a round that failed for another cause = %v, want an error that is not ErrNoLibrary", err)
	}
}

// A child that could not load its library says so by type, not by text:
// the round carries the mark through its JSON, and Err gives back an
// error the daemon tests with errors.Is.
func TestCollectiveRoundNoLibrary(t *testing.T) {
	o := CollectiveOptions{GPUs: []string{"0000:18:00.0", "0000:2a:00.0"}, Ranks: 2, Collectives: []Collective{AllReduce}, SizeBytes: 1 << 20, SmallBytes: 8}
	loadErr := errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")
	r := MeasureCollectiveRound(context.Background(), &recordingMeasurer{openErr: NoLibrary(loadErr)}, o, nil)
	if r.Error != loadErr.Error() || !r.NoLibrary {
		t.Fatalf("round = %+v, want the load error's text and NoLibrary", r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back CollectiveRound
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Err(); !errors.Is(err, ErrNoLibrary) || err.Error() != loadErr.Error() {
		t.Errorf("Err() after JSON = %v, want ErrNoLibrary with the load error's text", err)
	}
	if err := (&CollectiveRound{}).Err(); err != nil {
		t.Errorf("Err() of a round with a communicator = %v, want nil", err)
	}
}

// Two processes of one communicator make the same send/recv calls, and
// each reports the pairs it holds a side of: the pair within the first
// once, the pairs between them in both.
func TestMeasureCollectiveRoundSendRecvAcrossProcesses(t *testing.T) {
	o := CollectiveOptions{Ranks: 3, Collectives: []Collective{SendRecv}, SizeBytes: 1 << 20, SmallBytes: 8 << 10}
	reported := map[string]map[int]bool{}
	for _, part := range []struct {
		gpus  []string
		first int
	}{{[]string{"0000:18:00.0", "0000:2a:00.0"}, 0}, {[]string{"0000:18:00.0"}, 2}} {
		comm := &recordingComm{}
		o.GPUs, o.FirstRank = part.gpus, part.first
		r := MeasureCollectiveRound(context.Background(), &recordingMeasurer{comm: comm}, o, nil)
		if len(comm.calls) != 6 {
			t.Errorf("ranks from %d: %d calls, want every pair at both sizes: %q", part.first, len(comm.calls), comm.calls)
		}
		for _, res := range r.Results {
			k := fmt.Sprintf("%d->%d/%d", *res.FromRank, *res.ToRank, res.SizeBytes)
			if reported[k][part.first] {
				t.Errorf("ranks from %d reported %s twice", part.first, k)
			}
			if reported[k] == nil {
				reported[k] = map[int]bool{}
			}
			reported[k][part.first] = true
		}
	}
	want := map[string]map[int]bool{}
	for _, size := range []int64{1 << 20, 8 << 10} {
		want[fmt.Sprintf("0->1/%d", size)] = map[int]bool{0: true}
		want[fmt.Sprintf("0->2/%d", size)] = map[int]bool{0: true, 2: true}
		want[fmt.Sprintf("1->2/%d", size)] = map[int]bool{0: true, 2: true}
	}
	if !reflect.DeepEqual(reported, want) {
		t.Errorf("reported by (pair: processes by first rank) %v, want %v", reported, want)
	}
}

// The slower side of an operation timed by two processes is its result;
// a side that failed fails it; a side not reported leaves the other.
func TestSlowerSide(t *testing.T) {
	fast := &CollectiveResult{Seconds: 1e-3, BusBytesPerSecond: 2e9}
	slow := &CollectiveResult{Seconds: 2e-3, BusBytesPerSecond: 1e9}
	failed := &CollectiveResult{Error: "ncclRemoteError"}
	for _, tc := range []struct {
		name       string
		a, b, want *CollectiveResult
	}{
		{"second slower", fast, slow, slow},
		{"first slower", slow, fast, slow},
		{"first failed", failed, fast, failed},
		{"second failed", slow, failed, failed},
		{"second not reported", fast, nil, fast},
		{"first not reported", nil, slow, slow},
		{"neither", nil, nil, nil},
	} {
		if got := SlowerSide(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Between two nodes of two GPUs each (SendRecvOffset 2), send/recv runs
// only from each GPU to its counterpart: 0->2 and 1->3, not the pairs
// inside a node nor across.
func TestMeasureCollectiveRoundSendRecvOffset(t *testing.T) {
	o := CollectiveOptions{Ranks: 4, Collectives: []Collective{SendRecv}, SizeBytes: 1 << 20, SmallBytes: 8 << 10, SendRecvOffset: 2,
		GPUs: []string{"0000:18:00.0", "0000:2a:00.0"}}
	comm := &recordingComm{}
	r := MeasureCollectiveRound(context.Background(), &recordingMeasurer{comm: comm}, o, nil)
	var got []string
	for _, res := range r.Results {
		got = append(got, fmt.Sprintf("%d->%d/%d", *res.FromRank, *res.ToRank, res.SizeBytes))
	}
	want := []string{"0->2/1048576", "1->3/1048576", "0->2/8192", "1->3/8192"}
	if !slices.Equal(got, want) || len(comm.calls) != 4 {
		t.Errorf("reported %v after %d calls, want %v in 4", got, len(comm.calls), want)
	}
}
