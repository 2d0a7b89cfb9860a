package fleet

import (
	"context"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// SnapshotMaxAge is how old a cluster's VM or node list may be and still answer a
// request (issue 8 (docs/history.md)). PVE's own /cluster/resources lags about 10 s behind the VMs,
// so 2 s more cost a caller little, and they bound the load a cluster's listers
// put on PVE at one read per SnapshotMaxAge, however many there are. Every
// answer says how old its data is (asOf).
const SnapshotMaxAge = 2 * time.Second

// snapshot is one read of a cluster's list from PVE: val is shared by every
// request it answers and never changed.
type snapshot[T any] struct {
	at  time.Time // when the read began: the data is at least this old
	val T
}

// snapshots holds the latest list of each cluster. A request is answered from a
// snapshot younger than SnapshotMaxAge; otherwise it reads PVE, and every
// request that comes meanwhile waits for that one read (singleflight). A change
// of the cluster (the change feed) drops its snapshot, and a read that began
// before the change does not put its answer back (epoch, as in cache.go).
type snapshots[T any] struct {
	mu    sync.Mutex
	byID  map[int64]*snapshot[T]
	epoch uint64
	loads singleflight.Group
}

func newSnapshots[T any]() *snapshots[T] {
	return &snapshots[T]{byID: map[int64]*snapshot[T]{}}
}

// fresh returns the cluster's snapshot if it is younger than SnapshotMaxAge at now.
func (c *snapshots[T]) fresh(id int64, now time.Time) (*snapshot[T], uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sn := c.byID[id]; sn != nil && now.Sub(sn.at) < SnapshotMaxAge {
		return sn, c.epoch
	}
	return nil, c.epoch
}

// get returns a snapshot of cluster id no older than SnapshotMaxAge, reading it
// with load when there is none. The read goes on if the request that started it
// goes away (the others waiting for it may still want it); each request stops
// waiting when its own ctx ends.
func (c *snapshots[T]) get(ctx context.Context, id int64, now func() time.Time, load func(context.Context) (T, error)) (*snapshot[T], error) {
	sn, epoch := c.fresh(id, now())
	if sn != nil {
		return sn, nil
	}
	key := strconv.FormatInt(id, 10) + "/" + strconv.FormatUint(epoch, 10)
	ch := c.loads.DoChan(key, func() (any, error) {
		// A read that ended between this request's look and this call has
		// left its snapshot: no second read for it.
		at := now()
		if sn, _ := c.fresh(id, at); sn != nil {
			return sn, nil
		}
		val, err := load(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		sn := &snapshot[T]{at: at, val: val}
		c.mu.Lock()
		if c.epoch == epoch {
			c.byID[id] = sn
		}
		c.mu.Unlock()
		return sn, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*snapshot[T]), nil
	case <-ctx.Done():
		return nil, ReadError(ctx.Err())
	}
}

// drop forgets cluster id's snapshot (the cluster changed or went away).
func (c *snapshots[T]) drop(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.byID, id)
}

// dropAll forgets every snapshot (the change feed may have lost changes).
func (c *snapshots[T]) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.byID)
}
