package nodeprobe

import (
	"encoding/json"
	"time"
)

// The requests of this version as the tests write them by hand, and the
// seams they set, in one place: hostage_test.go is also run against the
// exporter from before it (with this file in that version's words), to
// show each of its tests failing there.

// reserveJSON is a reservation of a session with options o under module.
func reserveJSON(module string, o SessionOptions) string {
	return string(must(json.Marshal(ReserveRequest{Version: JoinVersion, Module: module, Options: o, Prober: "a"})))
}

// setBodyTimeout bounds how long the node reads a request's body.
func setBodyTimeout(n *Node, d time.Duration) { n.bodyTimeout = d }

// setReserveHold bounds how long the node holds a reservation for its join.
func setReserveHold(n *Node, d time.Duration) { n.reserveHold = d }

// setMaxProbes bounds the /probe calls the node answers at once.
func setMaxProbes(n *Node, max int) { n.probes = make(chan struct{}, max) }
