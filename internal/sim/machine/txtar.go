package machine

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The archive format is txtar (golang.org/x/tools/txtar, which this module
// does not depend on): each file is a header line "-- path --" followed by
// its content, and anything before the first header is a comment. This
// package adds symlinks as "-- path -> target --" with no content. Paths
// are relative to the tree's root, with forward slashes, in sorted order,
// so that a tree always prints the same. A file that is not text (it holds
// a NUL byte or is not UTF-8: a PCI config space image) is a hex dump under
// "-- path [hex <size>] --": one line "<offset>: <bytes>" for each 16-byte
// row that is not all zero, offsets in hex, so that a 4 KiB image of a few
// registers takes a few lines.

const (
	linkArrow = " -> "
	hexMark   = " [hex "
	// maxBinary bounds a binary file an archive may declare.
	maxBinary = 1 << 20
)

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
		if strings.Contains(p, linkArrow) || strings.Contains(p, hexMark) || strings.ContainsAny(p, "\n") {
			return fmt.Errorf("machine: cannot archive path %q", p)
		}
		if e.isLink {
			fmt.Fprintf(bw, "-- %s%s%s --\n", p, linkArrow, e.target)
			continue
		}
		if isBinary(e.data) {
			if len(e.data) > maxBinary {
				return fmt.Errorf("machine: %s is %d bytes, over the %d an archive holds", p, len(e.data), maxBinary)
			}
			fmt.Fprintf(bw, "-- %s%s%d] --\n", p, hexMark, len(e.data))
			writeHex(bw, e.data)
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
		size   = -1 // a binary file's size; -1 for text
		body   strings.Builder
	)
	flush := func() error {
		defer body.Reset()
		switch {
		case cur == "":
		case isLink && body.Len() > 0:
			return fmt.Errorf("machine: symlink %s has content", cur)
		case size >= 0:
			data, err := parseHex(cur, size, body.String())
			if err != nil {
				return err
			}
			t.file(cur, data)
		case !isLink:
			t.file(cur, body.String())
		}
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
		cur, isLink, size = name, false, -1
		if p, target, found := strings.Cut(name, linkArrow); found {
			cur, isLink = p, true
			t.add(p, entry{target: target, isLink: true})
		} else if p, n, found := strings.Cut(name, hexMark); found {
			v, err := strconv.Atoi(strings.TrimSuffix(n, "]"))
			if !strings.HasSuffix(n, "]") || err != nil || v <= 0 || v > maxBinary {
				return fmt.Errorf("machine: header %q: want \"<path>%s<size>]\" with a size of 1 to %d", name, hexMark, maxBinary)
			}
			cur, size = p, v
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return t.writeTo(root)
}

// isBinary says whether a file's content is not text.
func isBinary(data string) bool { return strings.IndexByte(data, 0) >= 0 || !utf8.ValidString(data) }

// writeHex writes data's rows of 16 bytes that are not all zero.
func writeHex(w io.Writer, data string) {
	for off := 0; off < len(data); off += 16 {
		row := data[off:min(off+16, len(data))]
		if strings.Trim(row, "\x00") == "" {
			continue
		}
		fmt.Fprintf(w, "%04x:", off)
		for i := 0; i < len(row); i++ {
			fmt.Fprintf(w, " %02x", row[i])
		}
		fmt.Fprintln(w)
	}
}

// parseHex reads a hex dump written by writeHex back into size bytes.
// Rows must be in order, whole (16 bytes) unless they end the file, and
// inside it.
func parseHex(path string, size int, body string) (string, error) {
	data := make([]byte, size)
	next := 0 // the lowest offset the next row may have
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if line == "" && body == "" {
			break
		}
		bad := func(why string) (string, error) {
			return "", fmt.Errorf("machine: %s: hex row %q: %s", path, line, why)
		}
		offText, bytesText, ok := strings.Cut(line, ": ")
		off, err := strconv.ParseUint(offText, 16, 32)
		if !ok || err != nil || len(offText) < 4 {
			return bad("want \"<offset>: <bytes>\"")
		}
		if off%16 != 0 || int(off) < next || int(off) >= size {
			return bad("offset out of order, unaligned or past the end")
		}
		fields := strings.Fields(bytesText)
		end := int(off) + len(fields)
		if len(fields) == 0 || len(fields) > 16 || end > size || (len(fields) < 16 && end != size) {
			return bad("want 16 bytes, or the rest of the file")
		}
		for i, f := range fields {
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil || len(f) != 2 {
				return bad(fmt.Sprintf("byte %q is not two hex digits", f))
			}
			data[int(off)+i] = byte(v)
		}
		next = end
	}
	return string(data), nil
}
