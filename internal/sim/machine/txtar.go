package machine

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// The archive format is txtar (golang.org/x/tools/txtar, which this module
// does not depend on): each file is a header line "-- path --" followed by
// its content, and anything before the first header is a comment. This
// package adds symlinks as "-- path -> target --" with no content. Paths
// are relative to the tree's root, with forward slashes, in sorted order,
// so that a tree always prints the same.

const linkArrow = " -> "

// WriteTxtar writes the files and symlinks under root as a txtar archive.
// Empty directories are not kept. A file that txtar cannot hold exactly
// (content without a final newline, or with a line that looks like a
// header) is an error rather than a silent change.
func WriteTxtar(w io.Writer, root string) error {
	t, err := readTree(root)
	if err != nil {
		return err
	}
	return t.format(w)
}

// format writes the tree as a txtar archive.
func (t *tree) format(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, p := range t.paths() {
		e := t.entries[p]
		if strings.Contains(p, linkArrow) || strings.ContainsAny(p, "\n") {
			return fmt.Errorf("machine: cannot archive path %q", p)
		}
		if e.isLink {
			fmt.Fprintf(bw, "-- %s%s%s --\n", p, linkArrow, e.target)
			continue
		}
		if e.data != "" && !strings.HasSuffix(e.data, "\n") {
			return fmt.Errorf("machine: %s does not end in a newline", p)
		}
		for _, l := range strings.SplitAfter(e.data, "\n") {
			if _, ok := header(strings.TrimSuffix(l, "\n")); ok {
				return fmt.Errorf("machine: %s holds a txtar header line %q", p, l)
			}
		}
		fmt.Fprintf(bw, "-- %s --\n%s", p, e.data)
	}
	return bw.Flush()
}

// header returns the name in a header line.
func header(line string) (string, bool) {
	if !strings.HasPrefix(line, "-- ") || !strings.HasSuffix(line, " --") || len(line) < len("-- x --") {
		return "", false
	}
	return line[3 : len(line)-3], true
}

// ExtractTxtar creates the files and symlinks of a txtar archive under
// root. Paths must stay inside root; symlinks are created after all files,
// so no file is written through one.
func ExtractTxtar(r io.Reader, root string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	t := newTree()
	var (
		cur    string // path of the file being read; "" in the comment
		isLink bool
		body   strings.Builder
	)
	flush := func() error {
		switch {
		case cur == "":
		case isLink && body.Len() > 0:
			return fmt.Errorf("machine: symlink %s has content", cur)
		case !isLink:
			t.file(cur, body.String())
		}
		body.Reset()
		return nil
	}
	for _, l := range strings.SplitAfter(string(b), "\n") {
		name, ok := header(strings.TrimSuffix(l, "\n"))
		if !ok {
			body.WriteString(l)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		cur, isLink = name, false
		if p, target, found := strings.Cut(name, linkArrow); found {
			cur, isLink = p, true
			t.add(p, entry{target: target, isLink: true})
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return t.writeTo(root)
}
