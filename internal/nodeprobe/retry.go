package nodeprobe

import (
	"time"
)

// A prober whose session could not start because either node was in
// another one (declined_session) tries again: Prometheus' scrape offsets
// are fixed per target, so in a ring where one node's probe and its
// neighbour's fall at the same moment, each holds its own session lock
// while asking the other to join, and both are declined at every scrape.
// Between tries the prober holds nothing (a ring of probers each holding
// its lock while waiting would wait for ever), and its wait is jittered,
// so that the second try of two colliding probers does not collide too.
//
// The wait of try n is drawn from [c/2, c), c = retryFirstWait doubled
// n-1 times up to retryMaxWait: at least half of c, so that the tries are
// bounded whatever the draw, and the rest random, to break the symmetry.
const (
	retryFirstWait = 100 * time.Millisecond
	retryMaxWait   = 5 * time.Second
)

// sessionMargin is how many times the module's last session on this node
// a try needs left of the probe's budget: a session taken late runs with
// only what is left, and the next may well be slower than the last.
const sessionMargin = 2

// retryWait is how long to wait before try tries+1 of module name, and
// false when what would be left of the budget (ending at end, budget long
// in all) holds no session.
func (n *Node) retryWait(name string, tries int, budget time.Duration, end time.Time) (time.Duration, bool) {
	spare := end.Sub(n.now()) - n.sessionLength(name, budget)
	if spare <= 0 {
		return 0, false
	}
	ceiling := min(retryFirstWait<<min(tries-1, 16), retryMaxWait)
	wait := ceiling/2 + time.Duration(n.rand()*float64(ceiling/2))
	return min(wait, spare), true
}

// sessionLength is what a try of module name is taken to need: sessionMargin
// times its last successful session as prober on this node, or, before
// there is one, half the probe's budget.
func (n *Node) sessionLength(name string, budget time.Duration) time.Duration {
	n.mu.Lock()
	took, ok := n.took[name]
	n.mu.Unlock()
	if !ok {
		return budget / 2
	}
	return sessionMargin * took
}

// tookSession records how long a successful session of module name took
// as prober. Names are the modules file's, so the record stays bounded.
func (n *Node) tookSession(name string, d time.Duration) {
	n.mu.Lock()
	n.took[name] = d
	n.mu.Unlock()
}
