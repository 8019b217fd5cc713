package probes

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// UniqueID is what every rank of an NCCL communicator is joined by: made
// once (by rank 0's process, ncclGetUniqueId) and handed to the others,
// here as hex text. Its text form is the contract's (--unique-id, the
// node-to-node exchange); the NCCL binding makes and takes the same 128
// bytes as its nccl.UniqueID, and the child converts between the two, so
// this package needs no cgo.
type UniqueID [128]byte

// String is the id in lower-case hex: 256 characters.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// ParseUniqueID reads what String wrote; surrounding white space (a
// newline from a file) is ignored.
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	s = strings.TrimSpace(s)
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("NCCL unique id: %d characters, want %d hex digits", len(s), 2*len(id))
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return id, fmt.Errorf("NCCL unique id: %q at offset %d is not a hex digit", s[i], i)
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return UniqueID{}, fmt.Errorf("NCCL unique id: %w", err)
	}
	return id, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
