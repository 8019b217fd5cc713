// Package slurm reads which Slurm job holds each GPU: from the job-mapping
// files a site's prolog writes for dcgm-exporter (mapping.go), and,
// joined with them, from the cgroups of the processes on each GPU, which
// package process reads (jobs.go). It knows nothing of Prometheus.
//
// The mapping files are dcgm-exporter's HPC job mapping
// (--hpc-job-mapping-dir, NVIDIA/dcgm-exporter
// internal/pkg/transformation/hpc.go): one file per GPU in one
// directory, named after the GPU's index ("0") or, for a MIG instance,
// the GPU's index and the GPU instance ID ("0.1"), holding one job ID a
// line. A prolog writes a job's GPUs' files when it starts and an epilog
// removes them, so a site's scripts serve both exporters.
package slurm

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

const (
	// maxMappingFile bounds what is read of one mapping file.
	maxMappingFile = 64 << 10
	// maxJobsPerGPU bounds the jobs one file may name, and so the job
	// series of one GPU: a GPU shared by more jobs than this is a
	// mapping file nobody cleans up.
	maxJobsPerGPU = 64
	// maxJobID bounds one job ID, in bytes. Slurm's are 10 digits, or
	// 14 characters as a SLUID; an array task written as <job>_<task>
	// fits too.
	maxJobID = 128
	// maxMappingFiles bounds the files read from the directory.
	maxMappingFiles = 4096
)

// MappingReader reads a job-mapping directory; it implements
// sampler.Source.
type MappingReader struct {
	// Dir is the directory. One that does not exist (yet: /run is empty
	// after a boot until the first prolog runs) holds no mappings.
	Dir string
	// GPUs, when set, lists NVML's GPUs (nvml.Reader's Identities): it
	// gives each mapping its GPU's UUID and PCI address, and a file naming
	// a GPU NVML does not list is reported as an error.
	GPUs func() []nvml.Identity
}

// Mappings is every GPU's jobs, as the mapping files say.
type Mappings struct {
	// Files are sorted by GPU, then GPU instance.
	Files []Mapping
}

// Mapping is one file: the jobs on one GPU or MIG instance.
type Mapping struct {
	GPU int
	// GPUInstance is the MIG GPU instance ID a file named <gpu>.<instance>
	// names; -1 for a file naming the whole GPU.
	GPUInstance int
	// UUID and PCIBusID are NVML's for the GPU; "" where NVML does not
	// know it.
	UUID, PCIBusID string
	// Jobs are the file's job IDs, in file order, each once.
	Jobs []string
}

// Sample reads every mapping file. A file that cannot be read or does not
// hold job IDs is left out and counted in a *sampler.PartialError; a
// directory that cannot be listed fails the sample.
func (r *MappingReader) Sample(ctx context.Context) (*Mappings, error) {
	snap := &Mappings{}
	d, err := os.Open(r.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return snap, nil
	}
	if err != nil {
		return nil, err
	}
	entries, err := d.ReadDir(maxMappingFiles)
	d.Close()
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("job-mapping directory: %w", err)
	}
	var ids map[int]nvml.Identity
	if r.GPUs != nil {
		if list := r.GPUs(); len(list) > 0 {
			ids = make(map[int]nvml.Identity, len(list))
			for _, id := range list {
				ids[id.Index] = id
			}
		}
	}
	var t sampler.Tally
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		gpu, instance, ok := parseMappingName(e.Name())
		if !ok || e.IsDir() {
			continue // not a mapping file, as dcgm-exporter skips it
		}
		path := filepath.Join(r.Dir, e.Name())
		m := Mapping{GPU: gpu, GPUInstance: instance}
		if ids != nil {
			id, known := ids[gpu]
			if !known {
				t.Add(fmt.Errorf("%s: names GPU %d, which NVML does not list", path, gpu))
				continue
			}
			m.UUID, m.PCIBusID = id.UUID, id.PCIBusID
		}
		m.Jobs, err = readMappingFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // an epilog removed it since the listing
		case err != nil:
			t.Add(err)
			continue
		case len(m.Jobs) > 0:
			snap.Files = append(snap.Files, m)
		}
	}
	slices.SortFunc(snap.Files, func(a, b Mapping) int {
		return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.GPUInstance, b.GPUInstance))
	})
	return snap, t.Err()
}

// parseMappingName reads a mapping file's name: a GPU index, or a GPU
// index and a GPU instance ID joined by a dot (dcgm-exporter takes names
// matching ^\d+(\.\d+)?$). instance is -1 without the dot.
func parseMappingName(name string) (gpu, instance int, ok bool) {
	g, i, hasInstance := strings.Cut(name, ".")
	gpu, ok = smallDecimal(g)
	if !ok {
		return 0, 0, false
	}
	if !hasInstance {
		return gpu, -1, true
	}
	instance, ok = smallDecimal(i)
	return gpu, instance, ok
}

// smallDecimal parses 1 to 6 ASCII digits: GPU indices and instance IDs
// are small, and strconv.Atoi would also take a sign.
func smallDecimal(s string) (int, bool) {
	if len(s) == 0 || len(s) > 6 || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil
}

func readMappingFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	jobs, err := parseMappingJobs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

// parseMappingJobs reads a mapping file's job IDs, one a line. Blank
// lines and the spaces around an ID are dropped (dcgm-exporter keeps them,
// making a series with an empty or padded hpc_job; prologs writing with
// printf leave no final newline, with echo a final one), an ID given twice
// counts once. A line holding spaces or control characters inside, not
// UTF-8 or longer than maxJobID, a file over maxMappingFile or with more
// than maxJobsPerGPU IDs, is an error: the file is not a job list. No more
// than maxMappingFile+1 bytes are read.
func parseMappingJobs(r io.Reader) ([]string, error) {
	over := fmt.Errorf("over %d bytes", maxMappingFile)
	// lr.N reaches 0 when the byte past the bound has been read.
	lr := &io.LimitedReader{R: r, N: maxMappingFile + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 512), maxMappingFile+1)
	var jobs []string
	line := 0
	for sc.Scan() {
		line++
		if lr.N == 0 {
			return nil, over
		}
		job := strings.TrimSpace(sc.Text())
		switch {
		case job == "":
			continue
		case len(job) > maxJobID:
			return nil, fmt.Errorf("line %d: a job ID of %d bytes, over %d", line, len(job), maxJobID)
		case !utf8.ValidString(job) || strings.IndexFunc(job, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return nil, fmt.Errorf("line %d: %q is not a job ID", line, job)
		case slices.Contains(jobs, job):
			continue
		}
		if len(jobs) == maxJobsPerGPU {
			return nil, fmt.Errorf("more than %d job IDs", maxJobsPerGPU)
		}
		jobs = append(jobs, job)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, over
		}
		return nil, err
	}
	if lr.N == 0 {
		return nil, over
	}
	return jobs, nil
}
