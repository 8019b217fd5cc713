package scrape

import (
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"sync"
)

// A gzip response is stitched from parts deflated apart: each part is a
// run of raw deflate blocks that ends on a byte boundary without a final
// block (a sync flush, what Deflate makes), and a deflate stream may go on
// with blocks from another compressor after one, since no block refers to
// data before its own compressor's first. So a part that did not change
// since the last scrape is not compressed again, and a source can compress
// its part when it publishes, off the scrape path.

// Deflate appends text to dst as raw deflate blocks at gzip's best speed,
// ending with a sync flush and no final block.
func Deflate(dst, text []byte) []byte {
	w := flateWriters.Get().(*flate.Writer)
	defer flateWriters.Put(w)
	a := &appender{b: dst}
	w.Reset(a)
	_, _ = w.Write(text) // an appender does not fail
	_ = w.Flush()
	return a.b
}

// A flate writer holds about 1 MB of state: reuse them.
var flateWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

// appender is an io.Writer over a byte slice.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// gzipHeader is what compress/gzip writes at BestSpeed: no name, no time,
// unknown OS.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff}

// part is a piece of a response: its text, and the text deflated by
// Deflate (nil when not yet).
type part struct {
	text, deflated []byte
}

// appendGzip appends a gzip member whose content is the parts' texts and
// then tail, deflating the parts that are not yet.
func appendGzip(dst []byte, parts []part, tail []byte) []byte {
	dst = append(dst, gzipHeader...)
	crc, size := uint32(0), 0
	for _, p := range parts {
		if len(p.text) == 0 {
			continue
		}
		if p.deflated == nil {
			p.deflated = Deflate(nil, p.text)
		}
		dst = append(dst, p.deflated...)
		crc = crc32.Update(crc, crc32.IEEETable, p.text)
		size += len(p.text)
	}
	dst = appendFinalStored(dst, tail)
	crc = crc32.Update(crc, crc32.IEEETable, tail)
	size += len(tail)
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return binary.LittleEndian.AppendUint32(dst, uint32(size))
}

// appendFinalStored appends b (at most 64 KiB) as the final deflate block,
// stored: after a sync flush the stream is at a byte boundary, so the
// block's three header bits (final, stored) fill the first byte.
func appendFinalStored(dst, b []byte) []byte {
	n := uint16(len(b))
	dst = append(dst, 1)
	dst = binary.LittleEndian.AppendUint16(dst, n)
	dst = binary.LittleEndian.AppendUint16(dst, ^n)
	return append(dst, b...)
}

// appendPlain appends the parts' texts and then tail.
func appendPlain(dst []byte, parts []part, tail []byte) []byte {
	for _, p := range parts {
		dst = append(dst, p.text...)
	}
	return append(dst, tail...)
}
