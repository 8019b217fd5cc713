package machine

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSyncer: a synced tree is the machine's tree; a change rewrites the
// changed files only, and what the machine no longer has goes.
func TestSyncer(t *testing.T) {
	root := t.TempDir()
	s := NewSyncer(root)
	m := DGXH100()
	if err := s.Sync(m); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteTxtar(&got, root); err != nil {
		t.Fatal(err)
	}
	if want := archive(t, DGXH100()); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("synced tree differs from the written one: %s", firstDiff(got.Bytes(), want))
	}

	stat := func(rel string) os.FileInfo {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	counter := m.IBPortDir("mlx5_0", 1) + "/counters/port_rcv_data"
	other := m.IBPortDir("mlx5_0", 1) + "/counters/port_xmit_data"
	link := "sys/bus/pci/devices/0000:18:00.0"
	before := map[string]os.FileInfo{counter: stat(counter), other: stat(other), link: stat(link)}

	m2 := DGXH100()
	m2.IBPort("mlx5_0", 1).Counters["port_rcv_data"] += 1000
	m2.Processes = m2.Processes[:1] // 5151 and 6161 exit
	if err := s.Sync(m2); err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before[counter], stat(counter)) {
		t.Error("the changed counter was not replaced")
	}
	b, _ := os.ReadFile(filepath.Join(root, counter))
	if want := m2.IBPort("mlx5_0", 1).Counters["port_rcv_data"]; string(b) != strconv.FormatUint(want, 10)+"\n" {
		t.Errorf("counter reads %q, want %d", b, want)
	}
	for _, rel := range []string{other, link} {
		if !os.SameFile(before[rel], stat(rel)) {
			t.Errorf("%s was rewritten though it did not change", rel)
		}
	}
	for _, gone := range []string{"proc/5151", "proc/6161"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "proc/4242/task/4242/stat")); err != nil {
		t.Errorf("a process that stayed lost its files: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(root, ".staging"))
	if err != nil || len(entries) != 0 {
		t.Errorf("staging holds %v, %v", entries, err)
	}

	// A fresh syncer over the same root rewrites everything and ends in
	// the same tree.
	if err := NewSyncer(root).Sync(m2); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	if err := WriteTxtar(&got, root); err != nil {
		t.Fatal(err)
	}
	if want := archive(t, m2); !bytes.Equal(got.Bytes(), want) {
		t.Errorf("resynced tree differs: %s", firstDiff(got.Bytes(), want))
	}

	// Processes that exited come back: their directories, pruned when
	// they went, are made again.
	if err := s.Sync(DGXH100()); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	if err := WriteTxtar(&got, root); err != nil {
		t.Fatal(err)
	}
	if want := archive(t, DGXH100()); !bytes.Equal(got.Bytes(), want) {
		t.Errorf("tree after the processes came back differs: %s", firstDiff(got.Bytes(), want))
	}
}

// A Syncer with a Pause parks between the parts of the tree and between
// slices of writing; without one, Sync calls nothing.
func TestSyncPauses(t *testing.T) {
	m := DGXH100()
	s := NewSyncer(t.TempDir())
	pauses := 0
	s.Pause = func() { pauses++ }
	if err := s.Sync(m); err != nil {
		t.Fatal(err)
	}
	// Before the host bridges, after each, after the processes, before
	// the writing: at least that many, and more for the writing's slices.
	if want := len(m.HostBridges) + 3; pauses < want {
		t.Errorf("%d pauses for a machine of %d host bridges, want at least %d", pauses, len(m.HostBridges), want)
	}
	if err := NewSyncer(t.TempDir()).Sync(m); err != nil {
		t.Errorf("a Syncer without Pause: %v", err)
	}
}
