package fleet

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// The fleet answers every read of clusters and grants from memory: a request that
// is authorized and sent to PVE costs no store round trip (issue 8 (docs/history.md)). What makes the
// memory trustworthy is the store's change feed (store.Subscribe): every write of a
// cluster, a grant or a user, on this replica or any other, drops what it changed
// here — synchronously on this replica, within milliseconds through NOTIFY on the
// others — and the next read loads it again. A ChangeResync (the PostgreSQL listener
// reconnected and may have missed notifications) drops everything, once.
//
// Loads that race a change must not put the old value back: every change moves
// epoch forward, a load notes the epoch before it reads and fills the cache only
// if it has not moved, and concurrent loads are shared per epoch, so a request
// that comes after a change never takes the answer of a read that began before it.
type cache struct {
	st    store.Store
	loads singleflight.Group
	// loaded, when set, is told of every cluster set loaded (outside the lock), so
	// that the clients of clusters that are gone can be closed.
	loaded func(*clusterSet)

	mu       sync.RWMutex
	epoch    uint64
	clusters *clusterSet           // nil: not loaded
	grants   map[int64]*userGrants // by user; absent: not loaded
}

// maxCachedUsers bounds the grant cache; past it the cache starts over (a reload
// costs one indexed read per user).
const maxCachedUsers = 100_000

// userRoles is a user's grant role by cluster ID, as stored (a role this code does
// not know is kept, and grants nothing).
type userRoles map[int64]string

// userGrants is a user's grants as the cache holds them: the roles by cluster,
// and the scopes of those that are scoped (scope.go).
type userGrants struct {
	roles  userRoles
	scopes map[int64]store.GrantScope // only the scoped grants
}

// clusterSet is every registered cluster as one immutable snapshot.
type clusterSet struct {
	byID   map[int64]*clusterRecord
	sorted []*clusterRecord // by ID
}

// clusterRecord is one cluster as the store had it when the set was loaded. client
// is filled the first time a request needs the cluster's PVE client; a change of
// the cluster drops the whole set, so the next request looks again (clientFor).
type clusterRecord struct {
	row    store.Cluster
	client atomic.Pointer[pve.Client]
}

func newCache(st store.Store) *cache {
	return &cache{st: st, grants: map[int64]*userGrants{}}
}

// apply drops what a change of the feed makes stale. It runs inside the store's
// writers and listener: quick, no store calls.
func (c *cache) apply(ch store.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ch.Kind {
	case store.ChangeCluster:
		// A deletion also removes the cluster's grants without entries of their
		// own, and SQLite may hand a deleted cluster's ID to the next one.
		c.clusters = nil
		clear(c.grants)
	case store.ChangeGrant, store.ChangeUser:
		delete(c.grants, ch.UserID)
	case store.ChangeResync:
		c.clusters = nil
		clear(c.grants)
	default:
		return // sessions are auth's
	}
	c.epoch++
}

// clusterSet returns every registered cluster, loading them when a change dropped
// them.
func (c *cache) clusterSet(ctx context.Context) (*clusterSet, error) {
	c.mu.RLock()
	cs, epoch := c.clusters, c.epoch
	c.mu.RUnlock()
	if cs != nil {
		return cs, nil
	}
	v, err := c.shared(ctx, "clusters/"+strconv.FormatUint(epoch, 10), func(ctx context.Context) (any, error) {
		rows, err := c.st.ListClusters(ctx)
		if err != nil {
			return nil, err
		}
		cs := &clusterSet{byID: make(map[int64]*clusterRecord, len(rows)), sorted: make([]*clusterRecord, 0, len(rows))}
		for _, r := range rows {
			rec := &clusterRecord{row: r}
			cs.byID[r.ID] = rec
			cs.sorted = append(cs.sorted, rec)
		}
		slices.SortFunc(cs.sorted, func(x, y *clusterRecord) int { return cmp.Compare(x.row.ID, y.row.ID) })
		c.mu.Lock()
		if c.epoch == epoch {
			c.clusters = cs
		}
		c.mu.Unlock()
		if c.loaded != nil {
			c.loaded(cs)
		}
		return cs, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*clusterSet), nil
}

// roles returns a user's grant roles by cluster, loading them when a change
// dropped them.
func (c *cache) roles(ctx context.Context, userID int64) (userRoles, error) {
	g, err := c.userGrants(ctx, userID)
	if err != nil {
		return nil, err
	}
	return g.roles, nil
}

// userGrants returns a user's grants, loading them when a change dropped them.
func (c *cache) userGrants(ctx context.Context, userID int64) (*userGrants, error) {
	c.mu.RLock()
	g, ok := c.grants[userID]
	epoch := c.epoch
	c.mu.RUnlock()
	if ok {
		return g, nil
	}
	v, err := c.shared(ctx, "grants/"+strconv.FormatInt(userID, 10)+"/"+strconv.FormatUint(epoch, 10), func(ctx context.Context) (any, error) {
		gs, err := c.st.UserGrants(ctx, userID)
		if err != nil {
			return nil, err
		}
		g := &userGrants{roles: make(userRoles, len(gs))}
		for _, gr := range gs {
			g.roles[gr.ClusterID] = gr.Role
			if !gr.Scope.IsZero() {
				if g.scopes == nil {
					g.scopes = map[int64]store.GrantScope{}
				}
				g.scopes[gr.ClusterID] = gr.Scope
			}
		}
		c.mu.Lock()
		if c.epoch == epoch {
			if len(c.grants) >= maxCachedUsers {
				clear(c.grants)
			}
			c.grants[userID] = g
		}
		c.mu.Unlock()
		return g, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*userGrants), nil
}

// shared runs load once for every caller asking for key at the same time. The
// load does not stop when one caller goes away (the others may still want it);
// each caller stops waiting when its own ctx ends.
func (c *cache) shared(ctx context.Context, key string, load func(context.Context) (any, error)) (any, error) {
	ch := c.loads.DoChan(key, func() (any, error) { return load(context.WithoutCancel(ctx)) })
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
