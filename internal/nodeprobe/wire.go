package nodeprobe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/probes"
)

// JoinPath is where a target exporter is asked to join a session.
const JoinPath = "/node-probe/join"

// JoinVersion changes whenever the reservation, the join request or
// their answers change incompatibly; a target refuses a request of
// another version. 2: the reservation carries the session's options, the
// join must match them, and send/recv runs only from each of the
// prober's GPUs to its counterpart (both children must make the same
// calls).
const JoinVersion = 2

// Reasons a session gave no result: gpulink_node_probe_failure_info's
// reason label on /probe, and the reason a target declines with.
const (
	ReasonBusy        = "declined_busy"         // a GPU the session needs is busy, or a probe round runs
	ReasonSession     = "declined_session"      // the node is already in a session
	ReasonRateLimited = "declined_rate_limited" // the node's last session is less than --node-probe.min-interval ago
	// ReasonUnavailable: the node cannot take part: fewer GPUs than the
	// module asks for, no NVML sample, probes off, no collective runner.
	ReasonUnavailable  = "declined_unavailable"
	ReasonDisabled     = "declined_disabled" // the target does not answer joins (--node-probe.enabled is off)
	ReasonUnauthorized = "unauthorized"      // the target refused the prober's credentials
	ReasonUnreachable  = "unreachable"       // no connection, or TLS failed
	ReasonTimeout      = "timeout"           // the session outlived its deadline
	ReasonBadModule    = "bad_module"        // the module's http_client cannot be built (a CA file gone since it was loaded)
	ReasonNCCLError    = "nccl_error"        // a child failed, or a result has no value
	ReasonBadResponse  = "bad_response"      // the target answered what no exporter of this version sends
	// ReasonRefused: the target refused the request (400): another
	// version, beyond its own module of the name, or a join that does not
	// match its reservation.
	ReasonRefused = "refused"
)

// JoinRequest is the prober's body on POST /node-probe/join: the NCCL
// unique id its child made, and what the session runs.
type JoinRequest struct {
	Version int `json:"version"`
	// ID is the NCCL unique id, hex.
	ID string `json:"id"`
	// Ranks is the communicator's size; the target's GPUs take ranks
	// FirstRank to Ranks-1.
	Ranks     int `json:"ranks"`
	FirstRank int `json:"first_rank"`
	// Module names the prober's module: the target checks Options
	// against its own module of that name.
	Module  string         `json:"module"`
	Options SessionOptions `json:"options"`
	// Prober names the prober (its host name): the target's round's peer.
	Prober string `json:"prober"`
	// Reservation is the token of the target's reservation (ReservePath)
	// for this session, which the join must match. A prober of this
	// version always has one; a join without one (its reservation expired,
	// or a client that made none) enters the session under the target's
	// limits as a reservation would.
	Reservation string `json:"reservation,omitempty"`
}

// SessionOptions are the parts of a module both children run with.
type SessionOptions struct {
	Collectives []probes.Collective `json:"collectives"`
	SizeBytes   int64               `json:"size_bytes"`
	SmallBytes  int64               `json:"small_bytes"`
	GPUsPerNode int                 `json:"gpus_per_node"`
	Warmup      int                 `json:"warmup"`
	Iterations  int                 `json:"iterations"`
	Samples     int                 `json:"samples"`
	// TimeoutSeconds is what is left of the prober's deadline: the target
	// ends its child by then.
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

// sessionOptions are m's options with timeout left.
func sessionOptions(m Module, left time.Duration) SessionOptions {
	return SessionOptions{Collectives: m.Collectives, SizeBytes: int64(m.Size), SmallBytes: int64(m.SmallSize),
		GPUsPerNode: m.GPUsPerNode, Warmup: m.Warmup, Iterations: m.Iterations, Samples: m.Samples,
		TimeoutSeconds: left.Seconds()}
}

// timeout is TimeoutSeconds as a duration: how long the target's child
// may run, and its reservation be held (up to maxReserveHold).
func (o SessionOptions) timeout() time.Duration {
	return time.Duration(o.TimeoutSeconds * float64(time.Second))
}

// module is o as a module, for the checks a modules file's modules get.
func (o SessionOptions) module() Module {
	m := DefaultModule()
	m.Collectives, m.Size, m.SmallSize, m.GPUsPerNode = o.Collectives, units.Base2Bytes(o.SizeBytes), units.Base2Bytes(o.SmallBytes), o.GPUsPerNode
	m.Warmup, m.Iterations, m.Samples = o.Warmup, o.Iterations, o.Samples
	m.Timeout = model.Duration(o.timeout())
	return m
}

// collectiveOptions are what this node's child runs with in a session of
// o: on gpus, as ranks firstRank on of 2×gpus_per_node, joined with id
// ("" on the prober, whose child makes it), peer naming the other node.
// Both nodes' children are given theirs here, so that they make the same
// calls: send/recv only from each of the prober's GPUs to its counterpart.
func (o SessionOptions) collectiveOptions(gpus []string, firstRank int, id, peer string) probes.CollectiveOptions {
	m := o.module()
	c := m.options()
	k := o.GPUsPerNode
	c.GPUs, c.Ranks, c.FirstRank, c.UniqueID, c.Peer, c.SendRecvOffset = gpus, 2*k, firstRank, id, peer, k
	return c
}

// beyond is the first of o's options beyond limit's, as the wire names
// it, with o's value and limit's: a collective not among limit's, a
// count or size over limit's or, where exact, other than limit's; the
// timeout only when over. The target checks a session against its own
// module (a limit) and a join against its reservation (exact) with it,
// so that every option is checked both ways. "" when none is.
func (o SessionOptions) beyond(limit SessionOptions, exact bool) (field string, got, want any) {
	for _, c := range o.Collectives {
		if !slices.Contains(limit.Collectives, c) {
			return "collective", c, limit.Collectives
		}
	}
	if exact && !slices.Equal(o.Collectives, limit.Collectives) {
		return "collectives", o.Collectives, limit.Collectives
	}
	over := func(a, b int64) bool { return a > b || (exact && a != b) }
	switch {
	case over(int64(o.GPUsPerNode), int64(limit.GPUsPerNode)):
		return "gpus_per_node", o.GPUsPerNode, limit.GPUsPerNode
	case over(o.SizeBytes, limit.SizeBytes):
		return "size_bytes", o.SizeBytes, limit.SizeBytes
	case over(o.SmallBytes, limit.SmallBytes):
		return "small_bytes", o.SmallBytes, limit.SmallBytes
	case over(int64(o.Warmup), int64(limit.Warmup)):
		return "warmup", o.Warmup, limit.Warmup
	case over(int64(o.Iterations), int64(limit.Iterations)):
		return "iterations", o.Iterations, limit.Iterations
	case over(int64(o.Samples), int64(limit.Samples)):
		return "samples", o.Samples, limit.Samples
	case o.TimeoutSeconds > limit.TimeoutSeconds:
		return "timeout_seconds", o.TimeoutSeconds, limit.TimeoutSeconds
	}
	return "", nil, nil
}

// validate checks a session's options, as a module named module.
func (o SessionOptions) validate(module string) error {
	if !(o.TimeoutSeconds > 0) {
		return fmt.Errorf("options: timeout_seconds %g: want above 0", o.TimeoutSeconds)
	}
	m := o.module()
	if err := m.Validate(module); err != nil {
		return fmt.Errorf("options: %w", err)
	}
	return nil
}

// validate checks a request as the target reads it; the error says which
// field is wrong.
func (r *JoinRequest) validate() error {
	if r.Version != JoinVersion {
		return fmt.Errorf("version %d: this exporter speaks %d", r.Version, JoinVersion)
	}
	if err := r.Options.validate(r.Module); err != nil {
		return err
	}
	k := r.Options.GPUsPerNode
	if r.FirstRank != k || r.Ranks != 2*k {
		return fmt.Errorf("ranks %d, first_rank %d: with gpus_per_node %d want ranks %d, first_rank %d", r.Ranks, r.FirstRank, k, 2*k, k)
	}
	// The options the child will run with, the unique id as NCCL takes
	// it; the GPUs are this node's to fill in.
	gpus := make([]string, k)
	for i := range gpus {
		gpus[i] = strconv.Itoa(i)
	}
	if err := r.Options.collectiveOptions(gpus, r.FirstRank, r.ID, r.Prober).Validate(); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	return nil
}

// JoinResponse is a target's answer when it joined: its round, and what
// the NIC nearest each of its GPUs carries, in rank order (0 unknown), for
// the prober to set beside its own: each of its results is its side of
// an operation the prober's round times too.
type JoinResponse struct {
	Round             *probes.CollectiveRound `json:"round"`
	NICBytesPerSecond []float64               `json:"nic_bytes_per_second"`
}

// Decline is a target's answer when it does not join, with one of the
// declined_* reasons (or why the request was refused).
type Decline struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// declineStatus is the HTTP status a target declines with.
func declineStatus(reason string) int {
	switch reason {
	case ReasonBusy, ReasonSession:
		return http.StatusConflict
	case ReasonRateLimited:
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxChannels is NCCL's MAXCHANNELS: no communicator has more channels.
const maxChannels = 64

// maxNetworkName bounds a network's name, as internal/nccllog cuts it.
const maxNetworkName = 32

// knownNetworks are the networks internal/nccllog names itself; any
// other is a plugin's own name, which must look like one (pluginName).
var knownNetworks = []string{nccllog.NetworkSocket, nccllog.NetworkIB, nccllog.NetworkRoCE, nccllog.NetworkEFA}

// pluginName is what a network plugin's name looks like ("AWS Libfabric",
// "SHARP", "IBext_v8"): a letter, then letters, digits, spaces and
// "_.-/+", at most maxNetworkName in all.
var pluginName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9 _./+-]*$`)

// checkTransports says what is wrong with a target's transports in a
// session of ranks ranks ("" when nothing is): each becomes a label set
// of the prober's answer, so a target could otherwise make any number of
// series with free text. A communicator of ranks ranks has at most
// maxChannels channels from each rank, each of a known kind between ranks
// of the session (-1: NVLS and CollNet's reduction), over a known network
// or one that looks like a plugin's name.
func checkTransports(ts []probes.Transport, ranks int) string {
	if len(ts) > maxChannels*ranks {
		return fmt.Sprintf("%d transports; a session of %d ranks has at most %d", len(ts), ranks, maxChannels*ranks)
	}
	inRange := func(v, n int) bool { return v >= -1 && v < n }
	for i, t := range ts {
		switch {
		case !slices.Contains(probes.TransportKinds, t.Kind):
			return fmt.Sprintf("transport %d: kind %.40q is not one of %v", i, t.Kind, probes.TransportKinds)
		case !inRange(t.Channel, maxChannels):
			return fmt.Sprintf("transport %d: channel %d outside -1 to %d", i, t.Channel, maxChannels-1)
		case !inRange(t.FromRank, ranks) || !inRange(t.ToRank, ranks):
			return fmt.Sprintf("transport %d: ranks %d -> %d outside the session's %d", i, t.FromRank, t.ToRank, ranks)
		case t.Network != "" && !slices.Contains(knownNetworks, t.Network) &&
			(len(t.Network) > maxNetworkName || !pluginName.MatchString(t.Network)):
			return fmt.Sprintf("transport %d: network %.40q is neither one of %v nor a plugin's name", i, t.Network, knownNetworks)
		}
	}
	return ""
}
