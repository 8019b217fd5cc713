// Package hostfs is the filesystem seam every source that reads sysfs or
// procfs takes: the two roots, and nothing about what lies under them. It
// sits at the bottom of the module and imports nothing of it, so a source
// (nic, process) takes a root without importing the topology package
// (numa) that once held this type; prometheus/procfs keeps its root the
// same way, in internal/fs. Named hostfs, not fs, so that it never
// shadows io/fs in the files that use both.
package hostfs

import "path/filepath"

// Root is a sysfs root and a procfs root. Tests and the simulated node
// point them at fixture trees.
type Root struct {
	Sys  string // usually /sys
	Proc string // usually /proc
}

// SysPath joins parts under the sysfs root.
func (r Root) SysPath(parts ...string) string {
	return filepath.Join(append([]string{r.Sys}, parts...)...)
}

// ProcPath joins parts under the procfs root.
func (r Root) ProcPath(parts ...string) string {
	return filepath.Join(append([]string{r.Proc}, parts...)...)
}

// Under is the Root of a tree holding both, as sys/ and proc/ under dir:
// a fixture, a captured machine, the simulated node's tree.
func Under(dir string) Root {
	return Root{Sys: filepath.Join(dir, "sys"), Proc: filepath.Join(dir, "proc")}
}
