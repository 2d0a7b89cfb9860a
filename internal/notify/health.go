package notify

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// HealthEvery is how often a cluster's health is read: one light PVE read
// (/nodes) per cluster, whoever looks at the pages.
const HealthEvery = 15 * time.Second

// unreachableAfter is how many reads in a row must fail before a cluster is
// said unreachable: one lost read is not an outage.
const unreachableAfter = 2

// HealthStore is what Health needs of the store.
type HealthStore interface {
	ListClusters(ctx context.Context) ([]store.Cluster, error)
	TakeNotifyLease(ctx context.Context, name, owner string, now, until time.Time) (string, bool, error)
	SetNotifyLeaseState(ctx context.Context, name, owner, state string) error
	EnqueueNotifications(ctx context.Context, evs []store.NotifyEvent) error
}

// Nodes reads a cluster's nodes (fleet's client: pve.Client.Nodes).
type Nodes func(ctx context.Context, clusterID int64) ([]pve.Node, error)

// Health watches every cluster: one replica at a time per cluster (a lease in
// the store, which also keeps what it saw last, so the next holder goes on
// from it), one read every HealthEvery, and an event on every change.
type Health struct {
	st    HealthStore
	nodes Nodes
	owner string
	now   func() time.Time
	log   *slog.Logger
	every time.Duration
}

// NewHealth builds the watch.
func NewHealth(st HealthStore, nodes Nodes, owner string, now func() time.Time, log *slog.Logger) *Health {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Health{st: st, nodes: nodes, owner: owner, now: now, log: log, every: HealthEvery}
}

// healthState is what the watch keeps of a cluster between reads.
type healthState struct {
	Seen      bool              `json:"seen"`
	Reachable bool              `json:"reachable"`
	Fails     int               `json:"fails"`
	Nodes     map[string]string `json:"nodes"` // node → online/offline
}

// Run reads every cluster every HealthEvery until ctx ends.
func (h *Health) Run(ctx context.Context) error {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		h.Step(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Step reads each cluster whose lease this replica holds or takes.
func (h *Health) Step(ctx context.Context) {
	cs, err := h.st.ListClusters(ctx)
	if err != nil {
		h.log.Warn("health watch: listing the clusters failed", slog.String("error", err.Error()))
		return
	}
	for _, c := range cs {
		h.check(ctx, c)
	}
}

func (h *Health) check(ctx context.Context, c store.Cluster) {
	name := "health:" + strconv.FormatInt(c.ID, 10)
	now := h.now()
	raw, mine, err := h.st.TakeNotifyLease(ctx, name, h.owner, now, now.Add(3*h.every))
	if err != nil || !mine {
		return
	}
	var st healthState
	if raw != "" {
		_ = json.Unmarshal([]byte(raw), &st)
	}
	rctx, cancel := context.WithTimeout(ctx, h.every/2)
	nodes, rerr := h.nodes(rctx, c.ID)
	cancel()
	var evs []store.NotifyEvent
	if rerr != nil {
		st.Fails++
		if st.Fails == unreachableAfter && (st.Reachable || !st.Seen) {
			evs = append(evs, ClusterChanged(c.ID, c.Name, false, bounded(rerr.Error()), now))
			st.Reachable, st.Seen = false, true
		}
	} else {
		if st.Seen && !st.Reachable {
			evs = append(evs, ClusterChanged(c.ID, c.Name, true, "", now))
		}
		seen := map[string]string{}
		for _, n := range nodes {
			status := "offline"
			if n.Status == "online" {
				status = "online"
			}
			seen[n.Node] = status
		}
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names) // events in a stable order
		for _, n := range names {
			if was, ok := st.Nodes[n]; ok && was != seen[n] {
				evs = append(evs, NodeChanged(c.ID, c.Name, n, seen[n] == "online", now))
			}
		}
		st = healthState{Seen: true, Reachable: true, Nodes: seen}
	}
	if len(evs) > 0 {
		if err := h.st.EnqueueNotifications(ctx, evs); err != nil {
			h.log.Warn("health watch: writing events failed", slog.String("cluster", c.Name), slog.String("error", err.Error()))
			return // the state stays: the next read finds the change again
		}
	}
	b, _ := json.Marshal(st)
	if err := h.st.SetNotifyLeaseState(ctx, name, h.owner, string(b)); err != nil {
		h.log.Warn("health watch: keeping the state failed", slog.String("cluster", c.Name), slog.String("error", err.Error()))
	}
}
