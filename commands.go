package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/probe"
	"github.com/gpulink/gpulink_exporter/probes/nccl/collectives"
)

// oneNVMLSample is one NVML sample outside the daemon, for the topology
// command. A nil snapshot comes with the reason; initErr says NVML could
// not be initialised at all (no driver).
func oneNVMLSample(lib gonvml.Interface, sysfs string, logger *slog.Logger) (snap *nvml.Snapshot, initErr, err error) {
	reader, snap, initErr, err := openNVML(lib, sysfs, logger)
	if reader != nil {
		reader.Shutdown()
	}
	return snap, initErr, err
}

// openNVML initialises NVML and takes one sample, for the commands; the
// caller shuts the reader down (nil when NVML could not be initialised,
// initErr saying why).
func openNVML(lib gonvml.Interface, sysfs string, logger *slog.Logger) (reader *nvml.Reader, snap *nvml.Snapshot, initErr, err error) {
	reader = nvml.NewReader(lib, sysfs, logger)
	if err := reader.Init(); err != nil {
		reader.Shutdown()
		return nil, nil, err, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err = reader.Sample(ctx)
	return reader, snap, nil, err
}

// commandNVML is NVML for the probe and collectives commands: the sample
// that says what each path should give, and the check of what shares the
// GPUs (the daemon's signals: other compute processes, utilisation). It
// opens NVML only where one of them is wanted; the daemon's children want
// neither. done shuts NVML down; unavailable says why there is no check
// where one was wanted.
func commandNVML(c *config, fsys hostfs.Root, logger *slog.Logger, sample, sharing bool) (snap *nvml.Snapshot, check *probes.SharingCheck, done func(), unavailable error) {
	done = func() {}
	if !sample && !sharing {
		return nil, nil, done, nil
	}
	reader, snap, initErr, err := openNVML(gonvml.New(gonvml.WithLibraryPath(c.nvmlLib)), fsys.Sys, logger)
	if reader == nil {
		return nil, nil, done, fmt.Errorf("NVML: %w", initErr)
	}
	done = reader.Shutdown
	if !sharing {
		return snap, nil, done, nil
	}
	if snap == nil {
		// The processes can still be listed; the utilisation is unknown.
		logger.Warn("no NVML sample: sharing is judged from the processes alone", "err", err)
	}
	check = &probes.SharingCheck{Snapshot: snap, Processes: reader.ComputeProcesses, Threshold: c.probe.UtilizationThreshold,
		Comm: func(pid int) string { return process.Comm(fsys.Proc, pid) }}
	return snap, check, done, nil
}

// printTopology is the topology command: one NVML sample for the NVLink
// counts (none without a driver), the PCIe tree from sysfs.
func printTopology(fsys hostfs.Root, cufileConfig string, lib gonvml.Interface, logger *slog.Logger) error {
	topo, err := (&numa.TopologyReader{FS: fsys, CuFileConfig: cufileConfig}).Sample(context.Background())
	if topo == nil {
		return err
	}
	if err != nil {
		logger.Warn("some topology values could not be read", "err", err)
	}
	var gpus []numa.MatrixGPU
	snap, initErr, err := oneNVMLSample(lib, fsys.Sys, logger)
	switch {
	case initErr != nil:
		logger.Warn("NVML unavailable; GPUs in PCI address order, no NVLinks", "err", initErr)
		for _, g := range topo.GPUs {
			gpus = append(gpus, numa.MatrixGPU{Address: g.Address, NVLinks: make([]int, len(topo.GPUs))})
		}
	case snap == nil:
		return fmt.Errorf("NVML sample: %w", err)
	default:
		links := snap.NVLinkCounts()
		for i, g := range snap.GPUs {
			gpus = append(gpus, numa.MatrixGPU{Address: g.PCIBusID, NVLinks: links[i]})
		}
	}
	if len(gpus) == 0 {
		// An empty matrix would read as an answer; a person (or a
		// script's exit status) should learn there was nothing to show.
		return fmt.Errorf("no GPU on this machine: no NVIDIA GPU under %s/bus/pci/devices%s", fsys.Sys, nvmlSays(initErr))
	}
	fmt.Print(topo.Matrix(gpus))
	fmt.Print(topo.StorageSummary(gpus))
	return nil
}

// nvmlSays is what NVML adds to "no GPU": nothing where it answered (with
// no GPU), why it could not where it did not.
func nvmlSays(initErr error) string {
	if initErr == nil {
		return ", and NVML lists none"
	}
	return ", and NVML unavailable (" + initErr.Error() + ")"
}

// runProbe is the probe command. For a person's table it adds what each
// path should give: one NVML sample and the PCIe tree, as the daemon uses
// them (without NVML only the PCIe part is known).
func runProbe(p *probe.Command, c *config, fsys hostfs.Root, logger *slog.Logger) int {
	p.Library, p.CuFileLibrary, p.FS = c.cudaLib, c.cufileLib, fsys
	snap, check, done, unavailable := commandNVML(c, fsys, logger, p.Output == "table", !p.NoSharingCheck)
	defer done()
	p.Sharing, p.SharingUnavailable = check, unavailable
	if p.Output == "table" {
		// One read of the tree serves the expectations and the host nodes.
		topo, _ := numa.ReadTopology(fsys)
		p.Topology = topo
		p.Annotate = func(g *probes.GPURound) { probes.PathFor(snap, topo, g.PCIBusID).Annotate(g) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx, os.Stdout, os.Stderr)
}

// runCollectives is the collectives command, over the exporter's CUDA
// driver library.
func runCollectives(cc *collectives.CollectiveCommand, c *config, fsys hostfs.Root, logger *slog.Logger) int {
	cc.CUDALibrary = c.cudaLib
	_, check, done, unavailable := commandNVML(c, fsys, logger, false, !cc.NoSharingCheck)
	defer done()
	cc.Sharing, cc.SharingUnavailable = check, unavailable
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cc.Run(ctx, os.Stdout, os.Stderr)
}
