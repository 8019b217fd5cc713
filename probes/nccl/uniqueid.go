package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"
)

// UniqueID is the 128 bytes of an ncclUniqueId. Its text form and parsing
// are the probe contract's (probes.UniqueID, the same array), so that the
// contract needs no cgo; the collectives child converts between the two.
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

// c is the id as NCCL takes it.
func (id *UniqueID) c() *C.gn_unique_id {
	var cid C.gn_unique_id
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), len(id)), id[:])
	return &cid
}
