package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// The two-process tests run the test binary itself as the other rank:
// with helperEnv set, TestMain plays that rank instead of running tests.
const (
	helperEnv = "GPULINK_NCCL_HELPER"
	// What the other rank is given: the fakes' files, the unique id (hex),
	// its rank, the communicator's size and its GPU.
	helperCUDAEnv   = "GPULINK_NCCL_HELPER_CUDA"
	helperNCCLEnv   = "GPULINK_NCCL_HELPER_NCCL"
	helperIDEnv     = "GPULINK_NCCL_HELPER_ID"
	helperRankEnv   = "GPULINK_NCCL_HELPER_RANK"
	helperRanksEnv  = "GPULINK_NCCL_HELPER_RANKS"
	helperDeviceEnv = "GPULINK_NCCL_HELPER_DEVICE"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "rank" {
		ns, err := otherRank()
		if err != nil {
			fmt.Fprintln(os.Stderr, "nccl rank helper:", err)
			os.Exit(1)
		}
		fmt.Println(ns)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// otherRank joins the communicator as one rank on one GPU, runs one timed
// all-reduce of the test size and returns its GPU time in nanoseconds.
func otherRank() (int64, error) {
	runtime.LockOSThread()
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	rank, ranks, device := atoi(helperRankEnv), atoi(helperRanksEnv), atoi(helperDeviceEnv)
	drv, err := cuda.Open(os.Getenv(helperCUDAEnv))
	if err != nil {
		return 0, err
	}
	dev, err := drv.Device(device)
	if err != nil {
		return 0, err
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return 0, err
	}
	if err := ctx.SetCurrent(); err != nil {
		return 0, err
	}
	stream, err := ctx.NewStream()
	if err != nil {
		return 0, err
	}
	lib, err := Open(os.Getenv(helperNCCLEnv))
	if err != nil {
		return 0, err
	}
	id, err := probes.ParseUniqueID(os.Getenv(helperIDEnv))
	if err != nil {
		return 0, err
	}
	deadline, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := lib.InitRanks(deadline, UniqueID(id), ranks, rank, 1, func(int) error { return ctx.SetCurrent() })
	if err != nil {
		return 0, err
	}
	buf, err := ctx.Alloc(testBytes)
	if err != nil {
		return 0, err
	}
	start, err := ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	end, err := ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	if err := start.Record(stream); err != nil {
		return 0, err
	}
	err = comms[0].AllReduce(buf, buf, testElems, stream)
	if errors.Is(err, ErrInProgress) {
		err = WaitReady(deadline, comms...)
	}
	if err != nil {
		return 0, err
	}
	if err := end.Record(stream); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	d, err := end.Since(start)
	if err != nil {
		return 0, err
	}
	return d.Nanoseconds(), comms[0].Destroy()
}
