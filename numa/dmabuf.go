package numa

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// dma-buf is the other way GPUDirect RDMA reaches GPU memory: the NIC's
// driver imports the GPU memory as a dma-buf instead of asking
// nvidia_peermem for it. NVIDIA's GPU Operator documentation ("GPUDirect
// RDMA and GPUDirect Storage") names the two ways, "DMA-BUF from the Linux
// kernel or the legacy nvidia-peermem kernel module", and recommends
// dma-buf. It needs three things, which the exporter reads without CUDA
// and without changing anything:
//
//   - The open flavour of NVIDIA's kernel driver: only it exports GPU
//     memory as a dma-buf (under the proprietary one CUDA's
//     CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0). The first line of
//     /proc/driver/nvidia/version says "Open Kernel Module", which is how
//     NVIDIA's GPUDirect Storage documentation tells the two apart.
//   - A driver of CUDA 11.7 or later, branch R515: NCCL (src/init.cc,
//     dmaBufSupported) registers through dma-buf only where the CUDA driver
//     version is 11070 or more and that device attribute is set;
//     NCCL_DMABUF_ENABLE, on by default, can only turn it off.
//   - Linux 5.12 or later, /proc/sys/kernel/osrelease: the RDMA core's
//     dma-buf memory registration (ib_umem_dmabuf, behind rdma-core's
//     ibv_reg_dmabuf_mr, rdma-core 34) and mlx5's support for it came in
//     5.12, the release the dma-buf RDMA guides (Intel's oneCCL "Enabling
//     OFI/verbs/dmabuf Support") ask for.
//
// Limits: a distribution kernel older than 5.12 with dma-buf registration
// backported reads as unsupported, and MLNX_OFED's RDMA stack is judged by
// the running kernel's release like the kernel's own. The authoritative
// answer is CUDA's device attribute, which needs a CUDA context the daemon
// does not make.

// Where dma-buf for GPU memory starts: driver branch and kernel release.
const (
	dmaBufDriverBranch              = 515
	dmaBufKernelMajor, dmaBufKernel = 5, 12
)

// readDMABuf says whether the kernel and the NVIDIA driver offer dma-buf
// for GPU memory: true where all three conditions hold, false where one is
// known not to, absent where no NVIDIA driver is loaded (no
// /proc/driver/nvidia/version), there is no procfs root, or a file does not
// parse (counted).
func (f reader) readDMABuf(t *sampler.Tally) sampler.Opt[bool] {
	if f.Proc == "" {
		return sampler.Opt[bool]{}
	}
	read := func(parts ...string) (string, bool) {
		b, err := os.ReadFile(f.proc(parts...))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Add(err)
			}
			return "", false
		}
		return string(b), true
	}
	text, ok := read("driver", "nvidia", "version")
	if !ok {
		return sampler.Opt[bool]{}
	}
	open, branch, err := parseNVIDIAVersion(text)
	if err != nil {
		t.Add(fmt.Errorf("%s: %w", f.proc("driver", "nvidia", "version"), err))
		return sampler.Opt[bool]{}
	}
	if !open || branch < dmaBufDriverBranch {
		return sampler.Some(false)
	}
	release, ok := read("sys", "kernel", "osrelease")
	if !ok {
		return sampler.Opt[bool]{}
	}
	major, minor, err := parseKernelRelease(release)
	if err != nil {
		t.Add(fmt.Errorf("%s: %w", f.proc("sys", "kernel", "osrelease"), err))
		return sampler.Opt[bool]{}
	}
	return sampler.Some(major > dmaBufKernelMajor || major == dmaBufKernelMajor && minor >= dmaBufKernel)
}

// parseNVIDIAVersion reads the first line of /proc/driver/nvidia/version:
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  <date>" or
// "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07
// Release Build ...". It returns whether the driver is the open flavour and
// its branch, the version's first number.
func parseNVIDIAVersion(text string) (open bool, branch int, err error) {
	line, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(line, "NVRM version: NVIDIA UNIX ") {
		return false, 0, fmt.Errorf("first line %.80q: want \"NVRM version: NVIDIA UNIX ...\"", line)
	}
	for _, field := range strings.Fields(line) {
		first, rest, dotted := strings.Cut(field, ".")
		if !dotted || !isDigits(first) || !isDigits(strings.ReplaceAll(rest, ".", "")) || len(first) > 6 {
			continue
		}
		branch, _ = strconv.Atoi(first)
		return strings.Contains(line, " Open Kernel Module "), branch, nil
	}
	return false, 0, fmt.Errorf("first line %.80q: no driver version", line)
}

// parseKernelRelease reads the major and minor number of a kernel release,
// "5.15.0-1042-nvidia" or "6.8.0".
func parseKernelRelease(s string) (major, minor int, err error) {
	s = strings.TrimSpace(s)
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("kernel release %.40q: want <major>.<minor>[.<patch>][-<extra>]", s)
	}
	minorText := parts[1]
	if i := strings.IndexFunc(minorText, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorText = minorText[:i]
	}
	if !isDigits(parts[0]) || !isDigits(minorText) || len(parts[0]) > 4 || len(minorText) > 4 {
		return 0, 0, fmt.Errorf("kernel release %.40q: want <major>.<minor>[.<patch>][-<extra>]", s)
	}
	major, _ = strconv.Atoi(parts[0])
	minor, _ = strconv.Atoi(minorText)
	return major, minor, nil
}

// isDigits says whether s is one or more ASCII digits.
func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
