package nodeprobe

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// maxJoinBytes bounds a join request; a real one is well under 1 KiB.
const maxJoinBytes = 64 << 10

// ReasonBadRequest is a target's answer to a join request it cannot read
// (HTTP 400); the prober reports it as bad_response.
const ReasonBadRequest = "bad_request"

// JoinHandler answers POST /node-probe/join: this node joins the prober's
// session with the id it sent, as ranks first_rank..ranks-1, and answers
// with its round and its NICs' rates, or declines (409 busy or in a session, 429 rate
// limited, 503 unable). It sits behind the exporter's web config like
// /metrics, so TLS and basic auth cover it.
func (n *Node) JoinHandler() http.Handler { return n.guard(JoinPath, n.serveJoin) }

func (n *Node) serveJoin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "Method not allowed: POST a join request", http.StatusMethodNotAllowed)
		return
	}
	req, err := n.readJoin(w, r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: err.Error()})
		return
	}
	logger := n.logger.With("prober", req.Prober, "remote", r.RemoteAddr, "module", req.Module)
	// The session the prober reserved, which the join must match; a
	// reservation the join does not match ends, refused, as does a join
	// beyond this node's own module.
	res := n.takeReservation(req.Reservation)
	why := ""
	if res != nil {
		why = res.matches(req)
	}
	if why == "" {
		if err := n.withinModule(req.Module, req.Options); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		if res != nil {
			n.endReservation(res, EndRefused, why)
		}
		logger.Warn("refused a node-to-node join", "why", why)
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "join: " + why})
		return
	}
	// Without a reservation (it expired, or the prober made none), the
	// join enters the session itself, under the same limits.
	var h *hold
	if res != nil {
		h = res.h
		n.joinedFrom(res.remote)
	} else {
		if n.cameLate(remoteHost(r), req.Reservation) {
			logger.Info("a node-to-node join came after its reservation expired; its prober is not locked out")
		}
		var reason, detail string
		h, reason, detail = n.enterTarget(req.Options.GPUsPerNode, remoteHost(r))
		if reason != "" {
			n.count(RoleTarget, ResultDeclined, reason)
			logger.Info("declined to join a node-to-node session", "reason", reason, "detail", detail)
			writeJSON(w, declineStatus(reason), Decline{Reason: reason, Detail: detail})
			return
		}
	}
	defer h.release()
	// The session runs: it spends this node's --node-probe.min-interval
	// as target, and its answer comes when it ends.
	n.started(RoleTarget, n.now())
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(req.Options.timeout() + writeMargin))
	ctx, cancel := context.WithTimeout(r.Context(), req.Options.timeout())
	defer cancel()
	// Ranks req.FirstRank on of req.Ranks, as validate checked.
	round, err := n.cfg.Runner.RunCollectives(ctx, req.Options.collectiveOptions(busIDs(h.gpus), req.FirstRank, req.ID, req.Prober), nil)
	if round == nil {
		reason, detail := childFailure(ctx, ran{err: err}, "")
		n.count(RoleTarget, ResultFailed, reason)
		logger.Warn("node-to-node session failed", "reason", reason, "err", detail)
		writeJSON(w, http.StatusInternalServerError, Decline{Reason: reason, Detail: detail})
		return
	}
	if err != nil && round.Error == "" {
		round.Error = err.Error()
	}
	if round.Error == "" && ctx.Err() != nil {
		// The child stopped at the deadline or when the prober went away;
		// what it measured is cut short.
		round.Error = "the session ended before the round did: " + context.Cause(ctx).Error()
	}
	if why := roundFailure(round); why != "" {
		n.count(RoleTarget, ResultFailed, "")
		logger.Warn("node-to-node session failed", "err", why)
	} else {
		n.count(RoleTarget, ResultSuccess, "")
		logger.Debug("joined a node-to-node session", "seconds", round.Seconds)
	}
	writeJSON(w, http.StatusOK, JoinResponse{Round: round, NICBytesPerSecond: n.nicRates(h.gpus)})
}

// readJoin reads a join request strictly: one JSON object, no unknown
// field, valid as validate checks it. The body is read to its end
// whatever happens, so that the server watches the connection while the
// child runs: a prober that hangs up ends the request's context, and so
// this node's child.
func (n *Node) readJoin(w http.ResponseWriter, r *http.Request) (*JoinRequest, error) {
	var req JoinRequest
	if err := n.readStrict(w, r, &req); err != nil {
		return nil, fmt.Errorf("reading the join request: %w", err)
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	return &req, nil
}
