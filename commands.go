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

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/probe"
	"github.com/gpulink/gpulink_exporter/probes/nccl/collectives"
)

// oneNVMLSample is one NVML sample outside the daemon, for the topology
// and probe commands. A nil snapshot comes with the reason; initErr says
// NVML could not be initialised at all (no driver).
func oneNVMLSample(lib gonvml.Interface, sysfs string, logger *slog.Logger) (snap *nvml.Snapshot, initErr, err error) {
	reader := nvml.NewReader(lib, sysfs, logger)
	defer reader.Shutdown()
	if err := reader.Init(); err != nil {
		return nil, err, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err = reader.Sample(ctx)
	return snap, nil, err
}

// printTopology is the topology command: one NVML sample for the NVLink
// counts (none without a driver), the PCIe tree from sysfs.
func printTopology(fsys numa.FS, lib gonvml.Interface, logger *slog.Logger) error {
	topo, err := fsys.Topology()
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
	fmt.Print(topo.Matrix(gpus))
	return nil
}

// runProbe is the probe command. For a person's table it adds what each
// path should give: one NVML sample and the PCIe tree, as the daemon uses
// them (without NVML only the PCIe part is known).
func runProbe(p *probe.Command, c *config, fsys numa.FS, logger *slog.Logger) int {
	p.Library, p.FS = c.cudaLib, fsys
	if p.Output == "table" {
		// One read of the tree serves the expectations and the host nodes.
		topo, _ := fsys.Topology()
		snap, _, _ := oneNVMLSample(gonvml.New(gonvml.WithLibraryPath(c.nvmlLib)), fsys.Sys, logger)
		p.Topology = topo
		p.Annotate = func(g *probes.GPURound) { probes.PathFor(snap, topo, g.PCIBusID).Annotate(g) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx, os.Stdout, os.Stderr)
}

// runCollectives is the collectives command, over the exporter's CUDA
// driver library.
func runCollectives(cc *collectives.CollectiveCommand, c *config) int {
	cc.CUDALibrary = c.cudaLib
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cc.Run(ctx, os.Stdout, os.Stderr)
}
