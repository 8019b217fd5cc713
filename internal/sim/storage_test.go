package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/probes"
)

// The DGX H100 reads its RAID natively (GDS installed, nvidia-fs loaded,
// XFS) at about four drives' worth; the p5 bounces (no GDS installed), at
// less; nvidia_fs_missing turns the DGX's to compat; a directory on no
// drive is a skip.
func TestStorageProbes(t *testing.T) {
	run := func(t *testing.T, profile, faults, dir string) probes.Result {
		t.Helper()
		n := startNode(t, profile, faults)
		gpu := n.Machine().GPUs()[0].Addr
		round, err := n.Runner().Run(context.Background(), probes.Options{GPU: gpu, SizeBytes: 64 << 20, Samples: 3,
			StorageDir: dir, StorageBytes: 1 << 30, Probes: []probes.Kind{probes.StorageToDevice}})
		if err != nil {
			t.Fatal(err)
		}
		return round.GPUs[0].Results[0]
	}
	gen4x4 := 4 * 16e9 * 128 / 130 / 8
	t.Run("dgx native", func(t *testing.T) {
		r := run(t, "dgx-h100", "", "/raid/probe")
		if r.StorageMode != probes.StorageNative || r.StorageFilesystem != "xfs" || strings.Count(r.StorageDrive, ",") != 3 ||
			r.BytesPerSecond < 3*gen4x4 || r.BytesPerSecond > 4*gen4x4 {
			t.Errorf("%+v, want native over the four drives", r)
		}
	})
	t.Run("dgx without nvidia-fs", func(t *testing.T) {
		if r := run(t, "dgx-h100", "faults:\n- {kind: nvidia_fs_missing}\n", "/raid"); r.StorageMode != probes.StorageCompat {
			t.Errorf("%+v, want compat", r)
		}
	})
	t.Run("p5 compat", func(t *testing.T) {
		if r := run(t, "aws-p5", "", "/opt/dlami/nvme/data"); r.StorageMode != probes.StorageCompat || r.StorageFilesystem != "ext4" || r.BytesPerSecond <= 0 {
			t.Errorf("%+v, want compat on ext4", r)
		}
	})
	t.Run("no drive there", func(t *testing.T) {
		if r := run(t, "dgx-h100", "", "/scratch"); r.Skipped == nil || r.Skipped.Reason != probes.SkipStorageMissingDir {
			t.Errorf("%+v, want a missing_dir skip", r)
		}
	})
	t.Run("nvidia_fs_missing where it is not loaded", func(t *testing.T) {
		cfg := Config{Profile: "aws-p5", FaultsFile: filepath.Join(t.TempDir(), "faults.yaml")}
		if err := os.WriteFile(cfg.FaultsFile, []byte("faults:\n- {kind: nvidia_fs_missing}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if n, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "no nvidia_fs loaded") {
			if n != nil {
				n.Close()
			}
			t.Errorf("Start: %v, want the fault refused", err)
		}
	})
}
