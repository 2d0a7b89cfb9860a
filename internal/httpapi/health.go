package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// The health of this replica: /healthz (the process answers) and /readyz (it
// can serve: the store answers and takes writes, its clock agrees, its
// clusters as the fleet last saw them).

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeData(w, map[string]string{"status": "ok"})
	return nil
}

// readyCheck is one dependency /readyz checks.
type readyCheck struct {
	name   string // what the answer calls it ("dependency")
	reason string // the reason when its check fails without saying why
	down   string // what the answer says first when it fails: "store is not available"
	check  func(ctx context.Context) error
	// gate: its error's message is the whole answer (a condition of this
	// replica, not a dependency that is down).
	gate bool
}

// readyChecks lists what /readyz checks, in order; per-cluster checks belong here.
// The store answers (Ping), then takes writes (the write probe, when the store
// has one).
func (s *Server) readyChecks() []readyCheck {
	checks := []readyCheck{{name: "store", reason: errs.ReasonStoreUnavailable, down: "store is not available", check: s.store.Ping}}
	if s.writes != nil {
		checks = append(checks, readyCheck{name: "store", reason: errs.ReasonStoreUnwritable, down: "store does not take writes",
			check: s.writes.check})
	}
	for _, g := range s.gates {
		checks = append(checks, readyCheck{name: g.Name, reason: errs.ReasonNotReady, check: g.Check, gate: true})
	}
	return checks
}

// WriteProber is a store whose writes /readyz can try (docs/decisions/0035);
// every store.Store is one.
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// DefaultReadyWriteProbe is Config.ReadyWriteProbe's default.
const DefaultReadyWriteProbe = 5 * time.Second

// writeProbe runs the store's write probe at most once every `every` and
// answers the readiness checks in between with its last result: a load
// balancer that asks every second costs the database one small write every few
// seconds per replica, and a full or read-only store is noticed within that.
// Checks that come while a probe runs wait for it and share its result.
type writeProbe struct {
	probe func(ctx context.Context) error
	every time.Duration
	now   func() time.Time

	mu  sync.Mutex
	at  time.Time // when the last probe ran; zero: never
	err error
}

// check returns the last probe's result while it is younger than every, else
// probes again. A failure is store_unwritable, saying why.
func (p *writeProbe) check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.at.IsZero() && !now.Before(p.at) && now.Sub(p.at) < p.every {
		return p.err
	}
	p.at, p.err = now, nil
	if err := p.probe(ctx); err != nil {
		why, retry := "it failed", 2
		if e, ok := errs.As(err); ok {
			why, retry = e.Message, max(e.RetryAfter, 1)
		}
		p.err = &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonStoreUnwritable, Err: err, RetryAfter: retry,
			Message: why}
	}
	return p.err
}

// clusterHealth is what /readyz asks the fleet (*fleet.Service has it): the
// clusters none of whose endpoints answers.
type clusterHealth interface {
	Unavailable(ctx context.Context) ([]int64, error)
}

// readyJSON is /readyz's data. A PVE cluster that is down does not make the
// replica unready: every replica sees the same cluster, and taking them all out
// of rotation would cut every other cluster off too. It is named instead, by id
// only (the route is public): status "degraded" and one entry per cluster.
type readyJSON struct {
	Status      string          `json:"status"`
	Unavailable []downClusterJS `json:"unavailable,omitempty"`
}

type downClusterJS struct {
	Dependency string `json:"dependency"`
	ClusterID  int64  `json:"clusterId"`
	Reason     string `json:"reason"`
}

// readyz answers 200, or 503 naming the first dependency that is down: its reason
// (store_unavailable, store_unwritable, ...) and "dependency". A 200 names the
// clusters that are down (readyJSON).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, c := range s.readyChecks() {
		err := c.check(ctx)
		if err == nil {
			continue
		}
		down := &errs.Error{Kind: errs.Unavailable, Reason: c.reason, Err: err, RetryAfter: 2,
			Message: c.down, Details: map[string]any{"dependency": c.name}}
		if e, ok := errs.As(err); ok && e.Kind == errs.Unavailable {
			down.Reason, down.Message, down.RetryAfter = e.ReasonOrDefault(), c.down+": "+e.Message, e.RetryAfter
			if c.gate {
				down.Message = e.Message
			}
		}
		return down
	}
	out := readyJSON{Status: "ready"}
	if h, ok := s.fleet.(clusterHealth); ok {
		ids, err := h.Unavailable(ctx)
		if err != nil {
			return &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonStoreUnavailable, Err: err, RetryAfter: 2,
				Message: "store is not available", Details: map[string]any{"dependency": "store"}}
		}
		for _, id := range ids {
			out.Status = "degraded"
			out.Unavailable = append(out.Unavailable, downClusterJS{Dependency: "cluster", ClusterID: id, Reason: "cluster_unavailable"})
		}
	}
	writeData(w, out)
	return nil
}
