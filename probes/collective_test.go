package probes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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

	failed := MeasureCollectiveRound(context.Background(), &recordingMeasurer{openErr: errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")}, o, nil)
	if !strings.Contains(failed.Error, "libnccl.so.2") || len(failed.Results) != 0 {
		t.Errorf("round without a communicator: %+v", failed)
	}
}

// Two processes of one communicator make the same send/recv calls, but
// only the sender's reports the pair.
func TestMeasureCollectiveRoundSendRecvAcrossProcesses(t *testing.T) {
	o := CollectiveOptions{Ranks: 3, Collectives: []Collective{SendRecv}, SizeBytes: 1 << 20, SmallBytes: 8 << 10}
	reported := map[string]bool{}
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
			if *res.FromRank < part.first || *res.FromRank >= part.first+len(part.gpus) {
				t.Errorf("ranks from %d reported %d->%d, whose sender is elsewhere", part.first, *res.FromRank, *res.ToRank)
			}
			k := fmt.Sprintf("%d->%d/%d", *res.FromRank, *res.ToRank, res.SizeBytes)
			if reported[k] {
				t.Errorf("%s reported twice", k)
			}
			reported[k] = true
		}
	}
	if len(reported) != 6 {
		t.Errorf("reported %v, want each of the 3 pairs at 2 sizes once", reported)
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
