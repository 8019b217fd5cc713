package healthcheck

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
)

// History is what earlier checks saw of the series the rules read, raw
// and recorded: the part of Prometheus' TSDB the rules need, so that an
// alert that asks whether a link was up in the last day can be answered
// on a node with no Prometheus. A series that a check no longer sees gets
// a staleness marker, as a scrape gives one.
type History struct {
	series map[string]*series
}

type series struct {
	labels labels.Labels
	t      []int64 // milliseconds
	f      []float64
}

// spacing is how far apart the samples kept between checks are at least
// (the latest is always kept): a day at one a minute, not one every
// HealthCheckInterval.
const spacing int64 = 60_000

// NewHistory is an empty history.
func NewHistory() *History { return &History{series: map[string]*series{}} }

// add appends a sample at t (ms) to the series of ls, after what it has.
func (h *History) add(ls labels.Labels, t int64, f float64) {
	k := ls.String()
	s := h.series[k]
	if s == nil {
		s = &series{labels: ls}
		h.series[k] = s
	}
	if n := len(s.t); n > 0 && s.t[n-1] >= t {
		return
	}
	s.t, s.f = append(s.t, t), append(s.f, f)
}

// markStale gives the series that ended (by their key) a staleness marker
// at t, unless their latest sample is one already.
func (h *History) markStale(t int64, ended func(key string, name string) bool) {
	for k, s := range h.series {
		if !ended(k, s.labels.Get(model.MetricNameLabel)) || value.IsStaleNaN(s.f[len(s.f)-1]) {
			continue
		}
		h.add(s.labels, t, math.Float64frombits(value.StaleNaN))
	}
}

// thin drops samples older than since (ms) and those closer than spacing
// to the one kept before them, but never a series' latest; a series left
// with only a staleness marker is dropped.
func (h *History) thin(since int64) {
	for k, s := range h.series {
		var t []int64
		var f []float64
		for i := range s.t {
			last := i == len(s.t)-1
			if s.t[i] < since && !last {
				continue
			}
			if !last && len(t) > 0 && s.t[i]-t[len(t)-1] < spacing {
				continue
			}
			t, f = append(t, s.t[i]), append(f, s.f[i])
		}
		if s.t[len(s.t)-1] < since || len(f) == 1 && value.IsStaleNaN(f[0]) {
			delete(h.series, k)
			continue
		}
		s.t, s.f = t, f
	}
}

// stored is a series as the state file holds it.
type stored struct {
	Labels map[string]string
	T      []int64
	F      []float64
}

// stateVersion changes when the state file's form does; a file of another
// version is started afresh.
const stateVersion = 1

type state struct {
	Version int
	Series  []stored
}

// LoadHistory reads the state file; one that does not exist yet, or was
// written by another version, is an empty history. A file that cannot be
// read or decoded is an error naming it.
func LoadHistory(name string) (*History, error) {
	h := NewHistory()
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("healthcheck state: %w", err)
	}
	var st state
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&st); err != nil {
		return nil, fmt.Errorf("healthcheck state %s: %w (remove it to start afresh)", name, err)
	}
	if st.Version != stateVersion {
		return h, nil
	}
	for _, s := range st.Series {
		if len(s.T) == 0 || len(s.T) != len(s.F) {
			return nil, fmt.Errorf("healthcheck state %s: a series of %d times and %d values (remove it to start afresh)", name, len(s.T), len(s.F))
		}
		ls := labels.FromMap(s.Labels)
		h.series[ls.String()] = &series{labels: ls, t: s.T, f: s.F}
	}
	return h, nil
}

// Save writes the state file through a rename, so that a check killed
// meanwhile leaves the previous one whole.
func (h *History) Save(name string) error {
	st := state{Version: stateVersion}
	keys := make([]string, 0, len(h.series))
	for k := range h.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := h.series[k]
		st.Series = append(st.Series, stored{Labels: s.labels.Map(), T: s.t, F: s.f})
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(st); err != nil {
		return fmt.Errorf("healthcheck state: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("healthcheck state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("healthcheck state: %w", err)
	}
	_, err = tmp.Write(b.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("healthcheck state: %w", err)
	}
	return nil
}
