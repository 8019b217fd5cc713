package probes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// RoundRunner runs one probe round. ChildRunner is the real one: the child
// it starts runs MeasureRound over CUDA. The simulated node's runs
// MeasureRound in process over its model; the tests supply others.
type RoundRunner interface {
	Run(ctx context.Context, o Options) (*Round, error)
}

// Limits on what is kept of a child's output. A round for one GPU with
// seven peers is a few tens of KiB; anything near the cap is a child gone
// wrong, and reading it unbounded would let it take the daemon's memory.
const (
	childStdoutCap  = 8 << 20
	childStderrTail = 8 << 10
	// childKillGrace is how long a child gets to die after SIGKILL. Only a
	// process stuck in the kernel (a wedged driver call) survives that long.
	childKillGrace = 10 * time.Second
	// childPipeGrace bounds the wait for stdout and stderr to close once the
	// child has exited: a descendant that left the process group may hold
	// them open.
	childPipeGrace = 2 * time.Second
)

// ChildRunner runs each round in a child process (`gpulink_exporter probe`)
// in a process group of its own, so that a timeout kills the child and
// anything it started, and the CUDA contexts and their device memory go
// with it.
type ChildRunner struct {
	// Command is the argv prefix: in production the exporter's own binary,
	// "probe", and the flags passed through to the child (--path.sysfs).
	// Run appends --output=json and Options.Args.
	Command []string
	// Timeout bounds one run; 0 leaves it to the context's deadline.
	Timeout time.Duration
	Logger  *slog.Logger

	// stuck counts children that survived SIGKILL for childKillGrace. While
	// one is left, Run starts no other: a child stuck in the driver means
	// the next one would most likely get stuck too.
	stuck    atomic.Int32
	stuckPID atomic.Int64

	// Seams for the tests.
	killGrace time.Duration
	signal    func(pgid int, sig syscall.Signal) error
}

// Exit statuses of the child.
const (
	ExitOK      = 0
	ExitUsage   = 1 // nothing was probed; the message is on stderr
	ExitGPUFail = 2 // the round is printed, but some GPU could not be probed
)

// Run results, one counter each.
const (
	RunSuccess = "success" // every probe gave a value
	RunPartial = "partial" // some probes failed
	RunError   = "error"   // the child ran but the GPU could not be probed
	RunTimeout = "timeout" // killed at the round's deadline
	RunCrash   = "crash"   // exited abnormally or printed no valid round
)

// RunFailure is why a run gave no usable round. (RunError already names
// one of the results it carries.)
type RunFailure struct {
	// GPU is the PCI address the run was for; for a collective round, its
	// GPUs joined by commas.
	GPU string
	// Collectives says the run was a collective round.
	Collectives bool
	// Result is RunTimeout, RunCrash or RunError.
	Result string
	Err    error
	// Stderr is the end of what the child wrote on stderr.
	Stderr string
}

func (e *RunFailure) Error() string {
	what := "probe of GPU "
	if e.Collectives {
		what = "collective probe of GPUs "
	}
	msg := fmt.Sprintf("%s%s: %s: %v", what, e.GPU, e.Result, e.Err)
	if line := stderrLine(e.Stderr); line != "" {
		msg += "; stderr: " + line
	}
	return msg
}

func (e *RunFailure) Unwrap() error { return e.Err }

// stderrLine picks the line of the child's stderr that says what went
// wrong: a Go runtime's "panic:" or "fatal error:" line (the stack follows
// it), else the last line, where the child's own errors end up. It is
// shortened to what fits in a log line.
func stderrLine(s string) string {
	var line string
	for l := range strings.Lines(s) {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			line = l
			break
		}
		if l != "" {
			line = l
		}
	}
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}

// Args are the child's flags for o, in a fixed order. o is sent as it is:
// the scheduler validated it (Options.Validate), and the child validates
// it again, so a zero size or sample count is refused, not defaulted.
func (o Options) Args() []string {
	args := make([]string, 0, 4+len(o.Peers)+len(o.HostNodes)+len(o.Probes))
	args = append(args, "--gpu="+o.GPU)
	for _, p := range o.Peers {
		args = append(args, "--peer="+p)
	}
	if len(o.HostNodes) == 0 {
		// Said out loud: a child that silently picked nodes itself would
		// measure a different path than the daemon asked for.
		args = append(args, "--no-host-node-binding")
	}
	for _, n := range o.HostNodes {
		args = append(args, "--host-node="+strconv.Itoa(n))
	}
	for _, k := range o.Probes {
		args = append(args, "--probe="+string(k))
	}
	if o.StorageDir != "" {
		args = append(args, "--storage-dir="+o.StorageDir, "--storage-size="+strconv.FormatInt(o.StorageBytes, 10))
	}
	return append(args, "--size="+strconv.FormatInt(o.SizeBytes, 10), "--samples="+strconv.Itoa(o.Samples))
}

var (
	errRunTimeout = errors.New("run timeout")
	errOverflow   = fmt.Errorf("more than %d MiB on stdout", childStdoutCap>>20)
)

// Run runs one round for o.GPU. A round the child printed is returned with
// a nil error even when the child exited non-zero (it does when a GPU could
// not be probed at all; the round says why). Otherwise the error is a
// *RunFailure: RunTimeout when the child was killed at the deadline, RunCrash
// when it exited without a valid round, RunError when it could not be
// started or ctx was cancelled.
func (r *ChildRunner) Run(ctx context.Context, o Options) (*Round, error) {
	var round *Round
	pid, err := r.runChild(ctx, childRun{gpu: o.GPU, args: o.Args()}, func(out []byte) (err error) {
		round, err = parseRound(out)
		return err
	})
	if round != nil {
		round.PID = pid // as this process's PID namespace, and NVML's with hostPID, sees it
	}
	return round, err
}

// childRun is one child for runChild: what it is for, in RunFailure's
// terms, and its arguments after the command and --output=json.
type childRun struct {
	gpu         string
	collectives bool
	args        []string
	// extraFiles are the child's descriptors from 3 on; runChild closes
	// this process's copies once the child has its own.
	extraFiles []*os.File
}

// runChild runs one child in a process group of its own, bounded by ctx
// and r.Timeout, and hands parse what it printed on stdout once it has
// exited by itself. It returns the child's pid, and a *RunFailure when it
// gave no usable output: parse's error, a kill at the deadline or for
// flooding stdout, a failed start. A child that died of a signal is a
// RunCrash even when parse took its output.
func (r *ChildRunner) runChild(ctx context.Context, run childRun, parse func(out []byte) error) (int, error) {
	fail := func(result string, err error, stderr string) (int, error) {
		return 0, &RunFailure{GPU: run.gpu, Collectives: run.collectives, Result: result, Err: err, Stderr: stderr}
	}
	closeExtra := func() {
		for _, f := range run.extraFiles {
			f.Close()
		}
	}
	if len(r.Command) == 0 {
		closeExtra()
		return fail(RunError, errors.New("no probe command configured"), "")
	}
	if r.stuck.Load() > 0 {
		closeExtra()
		return fail(RunTimeout, fmt.Errorf("an earlier probe child (pid %d) is still alive after SIGKILL, stuck in the kernel; not starting another", r.stuckPID.Load()), "")
	}
	if err := ctx.Err(); err != nil {
		closeExtra()
		return fail(RunError, fmt.Errorf("not started: %w", err), "")
	}
	logger := r.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	start := time.Now()
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.Timeout, errRunTimeout)
		defer cancel()
	}
	limit := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		limit = dl.Sub(start)
	}

	// The daemon watches what shares the GPUs of its rounds itself: the
	// child does not list processes as well.
	args := append(slices.Clone(r.Command[1:]), "--output=json", "--no-sharing-check")
	args = append(args, run.args...)
	cmd := exec.Command(r.Command[0], args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout := &cappedBuffer{max: childStdoutCap, full: make(chan struct{})}
	stderr := &tailBuffer{max: childStderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = run.extraFiles
	cmd.WaitDelay = childPipeGrace
	err := cmd.Start()
	closeExtra()
	if err != nil {
		return fail(RunError, fmt.Errorf("starting probe child: %w", err), "")
	}
	pid := cmd.Process.Pid
	logger.Debug("probe child started", "gpu", run.gpu, "pid", pid, "args", args)

	// exited says true when the child has exited and is left unreaped,
	// false when it was reaped already (no waitid: see waitExitNoReap).
	exited := make(chan bool, 1)
	go func() {
		if waitExitNoReap(pid) {
			exited <- true
			return
		}
		_ = cmd.Wait()
		exited <- false
	}()

	var unreaped, gone bool
	var cause error
	select {
	case unreaped = <-exited:
		gone = true
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-stdout.full:
		cause = errOverflow
	}
	if !gone {
		r.killGroup(pid)
		grace := r.killGrace
		if grace <= 0 {
			grace = childKillGrace
		}
		t := time.NewTimer(grace)
		select {
		case unreaped = <-exited:
			t.Stop()
		case <-t.C:
			r.stuck.Add(1)
			r.stuckPID.Store(int64(pid))
			logger.Error("probe child still alive after SIGKILL; no probe runs until it exits", "gpu", run.gpu, "pid", pid, "waited", grace)
			go func() {
				r.reap(cmd, <-exited)
				r.stuck.Add(-1)
				logger.Info("stuck probe child exited at last", "gpu", run.gpu, "pid", pid)
			}()
			return fail(RunTimeout, fmt.Errorf("%v; child pid %d did not exit within %s of SIGKILL", describeCause(cause, limit), pid, grace), stderr.String())
		}
	}
	r.reap(cmd, unreaped)
	took := time.Since(start)
	if cause == nil && stdout.over {
		cause = errOverflow // it filled stdout and exited before the kill
	}

	switch {
	case errors.Is(cause, errOverflow):
		return fail(RunCrash, fmt.Errorf("%w; child killed", errOverflow), stderr.String())
	case errors.Is(cause, context.Canceled):
		return fail(RunError, fmt.Errorf("cancelled after %s; child killed", took.Round(time.Millisecond)), stderr.String())
	case cause != nil:
		return fail(RunTimeout, fmt.Errorf("%v; child killed", describeCause(cause, limit)), stderr.String())
	}

	state := cmd.ProcessState
	if state == nil {
		return fail(RunCrash, errors.New("child's exit status unknown"), stderr.String())
	}
	perr := parse(stdout.Bytes())
	ws, _ := state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		// Even with a valid round: a child that dies of a signal is a bug
		// to be counted, and its measurements are returned for what they
		// are worth.
		return pid, &RunFailure{GPU: run.gpu, Collectives: run.collectives, Result: RunCrash, Err: fmt.Errorf("child %s", state), Stderr: stderr.String()}
	case perr != nil && state.Success():
		return fail(RunCrash, perr, stderr.String())
	case perr != nil:
		return fail(RunCrash, fmt.Errorf("child %s without a valid round (%v)", state, perr), stderr.String())
	case !state.Success():
		logger.Debug("probe child exited non-zero with a round", "gpu", run.gpu, "status", state.String(), "stderr", stderrLine(stderr.String()))
	}
	return pid, nil
}

// RunCollectives runs one collective round for o in a child
// (`gpulink_exporter collectives`) as Run runs a probe round: the same
// process group, deadline, kill and output limits, and the same errors,
// the round being a CollectiveRound. When other processes hold ranks and
// o has no unique id, the child makes one and writes it on a pipe, its
// descriptor 3 (--id-fd=3); each line is sent on ids as it comes. The
// child gets a deadline of its own ahead of the kill (childDeadline), so
// that it can abort a hung communicator and still print the round.
func (r *ChildRunner) RunCollectives(ctx context.Context, o CollectiveOptions, ids chan<- string) (*CollectiveRound, error) {
	run := childRun{gpu: strings.Join(o.GPUs, ","), collectives: true, args: o.Args()}
	fail := func(err error) (*CollectiveRound, error) {
		return nil, &RunFailure{GPU: run.gpu, Collectives: true, Result: RunError, Err: err}
	}
	limit := r.Timeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); limit <= 0 || d < limit {
			limit = d
		}
	}
	if d := childDeadline(limit); d > 0 {
		run.args = append(run.args, "--timeout="+d.String())
	}
	if o.UniqueID == "" && o.Ranks > len(o.GPUs) {
		if ids == nil {
			return fail(errors.New("other processes hold ranks, and no one takes the unique id to them"))
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("unique id pipe: %w", err))
		}
		run.extraFiles = []*os.File{pw}
		run.args = append(run.args, "--id-fd=3")
		stop, forwarded := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(forwarded)
			forwardLines(pr, ids, stop)
		}()
		defer func() {
			// The pipe ends when the child is gone; a descendant that
			// escaped its group may hold it longer.
			t := time.NewTimer(childPipeGrace)
			select {
			case <-forwarded:
			case <-t.C:
			}
			t.Stop()
			close(stop)
			pr.Close()
			<-forwarded
		}()
	}
	var round *CollectiveRound
	pid, err := r.runChild(ctx, run, func(out []byte) (err error) {
		round, err = parseCollectiveRound(out)
		return err
	})
	if round != nil {
		round.PID = pid
	}
	return round, err
}

// childDeadline is the collectives child's own deadline within a run's
// limit: a tenth short of it, at least 3 s (the child's stuckGrace and
// abortGrace, then printing the round) and at most 10 s short, and never
// less than half of it. 0 for no limit.
func childDeadline(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return limit - min(max(limit/10, 3*time.Second), 10*time.Second, limit/2)
}

// forwardLines sends each non-empty line read from r on out, until r ends
// or stop is closed.
func forwardLines(r io.Reader, out chan<- string, stop <-chan struct{}) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		select {
		case out <- line:
		case <-stop:
			return
		}
	}
}

// describeCause says why a run was cut short.
func describeCause(cause error, limit time.Duration) string {
	if limit > 0 {
		return fmt.Sprintf("no round within %s", limit.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("no round: %v", cause)
}

// reap collects the child. When the leader is known to be exited but not
// yet reaped, its zombie keeps the process group's id from being reused, so
// the group can be killed safely first: whatever the child left behind
// (a helper holding a GPU context, or stdout) dies with it.
func (r *ChildRunner) reap(cmd *exec.Cmd, unreaped bool) {
	if !unreaped {
		return // cmd.Wait has run
	}
	r.killGroup(cmd.Process.Pid)
	// The error only repeats the exit status, or says a descendant that
	// escaped the group kept a pipe open past childPipeGrace; the status
	// is read from ProcessState.
	_ = cmd.Wait()
}

func (r *ChildRunner) killGroup(pgid int) {
	send := r.signal
	if send == nil {
		send = func(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }
	}
	if err := send(pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) && r.Logger != nil {
		r.Logger.Warn("killing probe child's process group", "pgid", pgid, "err", err)
	}
}

// waitExitNoReap blocks until the process exits and leaves it a zombie, so
// that its pid, and with it the process group id, stays taken until
// cmd.Wait reaps it. It returns false if it could not wait (waitid
// unavailable); the caller then only has cmd.Wait.
func waitExitNoReap(pid int) bool {
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return true
		case syscall.EINTR:
			continue
		default:
			return false
		}
	}
}

// parseRound reads the probe child's stdout: one Round of ContractVersion
// and nothing else.
func parseRound(out []byte) (*Round, error) {
	var round Round
	if err := parseVersioned(out, ContractVersion, &round); err != nil {
		return nil, err
	}
	return &round, nil
}

// parseCollectiveRound reads the collectives child's stdout: one
// CollectiveRound of CollectiveContractVersion and nothing else.
func parseCollectiveRound(out []byte) (*CollectiveRound, error) {
	var round CollectiveRound
	if err := parseVersioned(out, CollectiveContractVersion, &round); err != nil {
		return nil, err
	}
	return &round, nil
}

// parseVersioned reads a child's stdout into v, whose "version" must be
// want.
func parseVersioned(out []byte, want int, v any) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return errors.New("no output on stdout")
	}
	// The version first, so that a round of another version is named as
	// such rather than as whatever field it changed.
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(out, &head); err != nil {
		return jsonError(out, err)
	}
	if head.Version == nil {
		return errors.New("no contract version in output")
	}
	if *head.Version != want {
		return fmt.Errorf("contract version %d, want %d", *head.Version, want)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return jsonError(out, err)
	}
	return nil
}

func jsonError(out []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	lo, hi := max(0, off-20), min(int64(len(out)), off+20)
	return fmt.Errorf("invalid JSON at offset %d near %q: %w", off, out[lo:hi], err)
}

// cappedBuffer keeps up to max bytes and closes full when more arrive. It
// keeps accepting (and dropping) writes so the child never blocks on a full
// pipe while it is being killed.
type cappedBuffer struct {
	max  int
	buf  bytes.Buffer
	over bool
	full chan struct{}
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.over {
		return len(p), nil
	}
	if b.buf.Len()+len(p) > b.max {
		b.over = true
		close(b.full)
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Bytes may only be called once the writes are over (after cmd.Wait).
func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }

// tailBuffer keeps the last max bytes written. It is locked: a stuck
// child's stderr is read while the child may still write.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.max {
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
