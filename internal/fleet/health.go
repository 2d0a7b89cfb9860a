package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
	at       time.Time
	checking bool // a listing is checking it now; others use the last status
}

// statuses returns the health of each cluster, checking the stale ones.
func (s *Service) statuses(ctx context.Context, cs []*clusterRecord) map[int64]string {
	now := s.now()
	out := make(map[int64]string, len(cs))
	var stale []*clusterRecord
	s.mu.Lock()
	for _, c := range cs {
		h, ok := s.health[c.row.ID]
		if !ok {
			h.status = StatusUnknown
		}
		out[c.row.ID] = h.status
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
	results := make([]string, len(stale))
	var wg sync.WaitGroup
	for i, c := range stale {
		wg.Go(func() { results[i] = s.check(ctx, c) })
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range stale {
		if _, gone := s.health[c.row.ID]; !gone {
			continue // deleted meanwhile
		}
		s.health[c.row.ID] = healthEntry{status: results[i], at: s.now()}
		out[c.row.ID] = results[i]
	}
	return out
}

// check asks every endpoint of a cluster for /version, one attempt each.
func (s *Service) check(ctx context.Context, c *clusterRecord) string {
	cl, err := s.clientFor(c)
	if err != nil {
		return StatusUnknown
	}
	eps := cl.Endpoints()
	var up atomic.Int64
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Go(func() {
			if _, err := cl.VersionAt(ctx, ep.URL); err == nil {
				up.Add(1)
			}
		})
	}
	wg.Wait()
	switch n := int(up.Load()); {
	case n == len(eps):
		return StatusOnline
	case n > 0:
		return StatusDegraded
	default:
		return StatusUnavailable
	}
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
		if status[c.row.ID] == StatusUnavailable {
			down = append(down, c.row.ID)
		}
	}
	return down, nil
}
