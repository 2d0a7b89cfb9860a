package fleet

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// A cluster's health is checked when a listing needs it and the last check is older
// than healthTTL: every endpoint's /version at once, all clusters at once, the whole
// listing waiting at most healthWait. So a listing costs at most one small request per
// endpoint every healthTTL, however often clients poll, and never hangs on a slow
// cluster. The checks go through the cluster's client, so a dead endpoint's circuit
// opens from them too and real requests stop trying it sooner.
const (
	healthTTL  = 30 * time.Second
	healthWait = 2 * time.Second
)

type healthEntry struct {
	status   string
	version  string // PVE's version, as the last endpoint that answered said it
	at       time.Time
	checking bool // a listing is checking it now; others use the last status
}

// health is a cluster's last known health: its status and PVE version.
type health struct {
	status  string
	version string
}

// statuses returns the health of each cluster, checking the stale ones.
func (s *Service) statuses(ctx context.Context, cs []*clusterRecord) map[int64]health {
	now := s.now()
	out := make(map[int64]health, len(cs))
	var stale []*clusterRecord
	s.mu.Lock()
	for _, c := range cs {
		h, ok := s.health[c.row.ID]
		if !ok {
			h.status = StatusUnknown
		}
		out[c.row.ID] = health{status: h.status, version: h.version}
		if ok && (h.checking || now.Sub(h.at) < healthTTL) {
			continue
		}
		h.checking = true
		s.health[c.row.ID] = h
		stale = append(stale, c)
	}
	s.mu.Unlock()
	if len(stale) == 0 {
		return out
	}
	// The caller going away does not cut a check short: its result serves the next.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthWait)
	defer cancel()
	results := make([]health, len(stale))
	var wg sync.WaitGroup
	for i, c := range stale {
		wg.Go(func() { results[i] = s.check(ctx, c) })
	}
	wg.Wait()
	s.recordVersions(ctx, stale, results)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range stale {
		if _, gone := s.health[c.row.ID]; !gone {
			continue // deleted meanwhile
		}
		s.health[c.row.ID] = healthEntry{status: results[i].status, version: results[i].version, at: s.now()}
		out[c.row.ID] = results[i]
	}
	return out
}

// recordVersions writes a version a health check found into the cluster's record
// when it differs (the cluster was upgraded), so that every replica's record, and
// the admin view, say it too.
func (s *Service) recordVersions(ctx context.Context, stale []*clusterRecord, results []health) {
	for i, c := range stale {
		if v := results[i].version; v != "" && v != c.row.PVEVersion {
			if err := s.store.SetClusterPVEVersion(ctx, c.row.ID, v); err != nil && errs.KindOf(err) != errs.NotFound {
				s.log.Warn("recording a cluster's PVE version failed", slog.Int64("cluster", c.row.ID), slog.String("error", err.Error()))
			}
		}
	}
}

// check asks every endpoint of a cluster for /version, one attempt each; the
// version is the highest an endpoint said (nodes differ during an upgrade).
func (s *Service) check(ctx context.Context, c *clusterRecord) health {
	cl, err := s.clientFor(c)
	if err != nil {
		return health{status: StatusUnknown}
	}
	eps := cl.Endpoints()
	var (
		up      atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		highest pve.Version
	)
	for _, ep := range eps {
		wg.Go(func() {
			v, err := cl.VersionAt(ctx, ep.URL)
			if err != nil {
				return
			}
			up.Add(1)
			mu.Lock()
			if newer(v, highest) {
				highest = v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	h := health{version: highest.Version}
	switch n := int(up.Load()); {
	case n == len(eps):
		h.status = StatusOnline
	case n > 0:
		h.status = StatusDegraded
	default:
		h.status = StatusUnavailable
	}
	return h
}

// newer reports whether a is a later PVE version than b (a release comes after
// its pre-releases).
func newer(a, b pve.Version) bool {
	if b.Version == "" {
		return a.Version != ""
	}
	pre := func(p int) int {
		if p == 0 {
			return math.MaxInt
		}
		return p
	}
	return slices.Compare([]int{a.Major, a.Minor, a.Patch, pre(a.Pre)}, []int{b.Major, b.Minor, b.Patch, pre(b.Pre)}) > 0
}

// Unavailable lists, by ID, the clusters none of whose endpoints answered their
// last health check (checked as for a listing: at most every 30 s, waiting at
// most 2 s). /readyz names them. The store failing is the error.
func (s *Service) Unavailable(ctx context.Context) ([]int64, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return nil, err
	}
	status := s.statuses(ctx, cs.sorted)
	var down []int64
	for _, c := range cs.sorted {
		if status[c.row.ID].status == StatusUnavailable {
			down = append(down, c.row.ID)
		}
	}
	return down, nil
}
