package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/hex"
	"fmt"
	"strings"
	"unsafe"
)

// UniqueID is what every rank of a communicator is joined by: made once
// (by rank 0's process) and handed to the others, here as hex text.
type UniqueID [128]byte

// NewUniqueID asks NCCL for a fresh id (ncclGetUniqueId). NCCL starts its
// bootstrap listener for the id here, so the caller must go on to
// initialise a communicator with it.
func (l *Library) NewUniqueID() (UniqueID, error) {
	var cid C.gn_unique_id
	if err := l.check("ncclGetUniqueId", C.gn_get_unique_id(l.api, &cid)); err != nil {
		return UniqueID{}, err
	}
	var id UniqueID
	copy(id[:], unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), len(id)))
	return id, nil
}

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

// c is the id as NCCL takes it.
func (id *UniqueID) c() *C.gn_unique_id {
	var cid C.gn_unique_id
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), len(id)), id[:])
	return &cid
}
