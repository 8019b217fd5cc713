package nodeprobe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/version"
)

// A prober reserves the target before it starts its NCCL child: POST
// /node-probe/reserve enters the session on the target (its session lock,
// its rate limit and its GPUs, as a join would) and holds it for the join
// that follows with the reservation's token. Without it every try of a
// prober whose target was busy or in another session started a child (a
// CUDA context on each GPU, NCCL's setup) only to cancel it when the join
// was declined. A target that has no such path (an exporter from before
// it) answers 404, and the prober joins without a reservation as before.

// ReservePath is where a prober reserves a target.
const ReservePath = "/node-probe/reserve"

// Paths are every path node-to-node probes serve.
var Paths = []string{ProbePath, ReservePath, JoinPath}

// maxReserveHold bounds how long a target holds a reservation for its
// join, whatever the prober asks: the prober's child makes its unique id
// in a few seconds; a prober that went away must not hold the target for
// a whole probe timeout.
const maxReserveHold = 30 * time.Second

// ReserveRequest is the prober's body on POST /node-probe/reserve.
type ReserveRequest struct {
	Version int `json:"version"`
	// Module names the prober's module, for the target's log.
	Module      string `json:"module"`
	GPUsPerNode int    `json:"gpus_per_node"`
	// HoldSeconds is how long the target keeps the reservation for the
	// join: what is left of the prober's deadline, up to maxReserveHold.
	HoldSeconds float64 `json:"hold_seconds"`
	// Prober names the prober (its host name).
	Prober string `json:"prober"`
}

// ReserveResponse is a target's answer when it reserved itself: the token
// the join names.
type ReserveResponse struct {
	Token string `json:"token"`
}

// validate checks a reservation as the target reads it.
func (r *ReserveRequest) validate() error {
	switch {
	case r.Version != JoinVersion:
		return fmt.Errorf("version %d: this exporter speaks %d", r.Version, JoinVersion)
	case r.GPUsPerNode < 1 || r.GPUsPerNode > MaxGPUsPerNode:
		return fmt.Errorf("gpus_per_node %d: want 1 to %d", r.GPUsPerNode, MaxGPUsPerNode)
	case !(r.HoldSeconds > 0):
		return fmt.Errorf("hold_seconds %g: want above 0", r.HoldSeconds)
	}
	return nil
}

// reservation is a session entered for a prober whose join has not come
// yet.
type reservation struct {
	token string
	h     *hold
	timer *time.Timer
}

// ReserveHandler answers POST /node-probe/reserve (see ReservePath) with
// a token, or declines as a join does; DELETE
// /node-probe/reserve?token=... gives a reservation back unused. It sits
// behind the exporter's web config like /node-probe/join.
func (n *Node) ReserveHandler() http.Handler { return http.HandlerFunc(n.serveReserve) }

func (n *Node) serveReserve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		if n.dropReservation(r.URL.Query().Get("token"), "given back by the prober") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, "No such reservation", http.StatusNotFound)
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "Method not allowed: POST a reservation, or DELETE one", http.StatusMethodNotAllowed)
		return
	}
	var req ReserveRequest
	if err := readStrict(w, r, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "reading the reservation: " + err.Error()})
		return
	}
	if err := req.validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "reservation: " + err.Error()})
		return
	}
	logger := n.logger.With("prober", req.Prober, "remote", r.RemoteAddr, "module", req.Module)
	h, reason, detail := n.enter(RoleTarget, req.GPUsPerNode)
	if reason != "" {
		n.count(RoleTarget, ResultDeclined)
		logger.Info("declined a node-to-node session", "reason", reason, "detail", detail)
		writeJSON(w, declineStatus(reason), Decline{Reason: reason, Detail: detail})
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	token := hex.EncodeToString(b[:])
	hold := min(time.Duration(req.HoldSeconds*float64(time.Second)), maxReserveHold)
	n.mu.Lock()
	// The session lock is held: no other reservation can be pending.
	n.reserved = &reservation{token: token, h: h}
	n.reserved.timer = time.AfterFunc(hold, func() { n.dropReservation(token, "no join within "+hold.String()) })
	n.mu.Unlock()
	logger.Debug("reserved for a node-to-node session", "hold", hold)
	writeJSON(w, http.StatusOK, ReserveResponse{Token: token})
}

// takeReservation hands the session reserved under token to its join;
// nil when there is none (it expired, or was never made).
func (n *Node) takeReservation(token string) *hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	res := n.reserved
	if token == "" || res == nil || res.token != token || !res.timer.Stop() {
		return nil
	}
	n.reserved = nil
	return res.h
}

// dropReservation leaves the session reserved under token, which took no
// place: its start is taken back from the target's rate limit. It says
// whether there was one.
func (n *Node) dropReservation(token, why string) bool {
	n.mu.Lock()
	res := n.reserved
	if token == "" || res == nil || res.token != token {
		n.mu.Unlock()
		return false
	}
	res.timer.Stop()
	n.reserved = nil
	n.mu.Unlock()
	res.h.forget()
	res.h.release()
	n.logger.Info("node-to-node reservation left unused", "why", why)
	return true
}

// reserve asks the target at base (scheme://host:port) to reserve itself.
// It returns the token; or no token and no reason when the target has no
// reservations (an exporter from before them: join without one); or the
// reason and detail the target declined or failed with.
func (n *Node) reserve(ctx context.Context, client *http.Client, base string, req ReserveRequest) (token, reason, detail string) {
	resp, b, reason, detail := call(ctx, client, http.MethodPost, base+ReservePath, req)
	if reason != "" {
		return "", reason, detail
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var rr ReserveResponse
		if err := json.Unmarshal(b, &rr); err != nil || rr.Token == "" {
			return "", ReasonBadResponse, fmt.Sprintf("the target's reservation: %.200q", b)
		}
		return rr.Token, "", ""
	case http.StatusNotFound:
		return "", "", ""
	}
	reason, detail = answerFailure(resp, b, ReservePath)
	return "", reason, detail
}

// giveBack returns a reservation the prober will not join, so that the
// target need not wait for it to expire. Best effort: ctx may be over,
// so it has a few seconds of its own.
func (n *Node) giveBack(client *http.Client, base, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodDelete, base+ReservePath+"?token="+token, nil)
	if err != nil {
		return
	}
	resp, err := client.Do(hr)
	if err != nil {
		n.logger.Debug("giving back a node-to-node reservation", "err", err)
		return
	}
	_ = resp.Body.Close()
}

// call sends v as JSON with method to u and reads the answer, up to
// maxRoundBytes; reason is set when no answer came or it was too long.
func call(ctx context.Context, client *http.Client, method, u string, v any) (resp *http.Response, b []byte, reason, detail string) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, nil, ReasonBadModule, err.Error()
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, nil, ReasonUnreachable, err.Error()
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("User-Agent", "gpulink_exporter/"+version.Version)
	resp, err = client.Do(hr)
	if err != nil {
		return nil, nil, transportReason(ctx), err.Error()
	}
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxRoundBytes+1))
	if err != nil {
		resp.Body.Close()
		return nil, nil, transportReason(ctx), "reading the target's answer: " + err.Error()
	}
	if len(b) > maxRoundBytes {
		resp.Body.Close()
		return nil, nil, ReasonBadResponse, fmt.Sprintf("the target's answer is over %d bytes", maxRoundBytes)
	}
	return resp, b, "", ""
}

// answerFailure is why a target's answer other than 200 (and, for a join,
// 404) says it did not take part.
func answerFailure(resp *http.Response, b []byte, path string) (reason, detail string) {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ReasonUnauthorized, resp.Status
	case http.StatusNotFound:
		return ReasonDisabled, resp.Status + ": the target does not answer " + path + " (--node-probe.enabled)"
	}
	var d Decline
	if err := json.Unmarshal(b, &d); err != nil || !targetReason(d.Reason) {
		return ReasonBadResponse, fmt.Sprintf("%s: %.200q", resp.Status, b)
	}
	return d.Reason, "target: " + d.Detail
}

// readStrict reads one JSON object into v, no unknown field, up to
// maxJoinBytes; it reads the body to its end whatever happens.
func readStrict(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxJoinBytes)
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
