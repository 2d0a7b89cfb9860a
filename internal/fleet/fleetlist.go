package fleet

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// FleetQuery selects and pages the guests of every cluster an actor may see
// (FleetGuests). The filters and the limit are VMQuery's; its Cursor is one
// FleetGuests gave (FleetGuestList.NextCursor), not a cluster list's.
type FleetQuery struct {
	VMQuery
	// Type keeps the guests of one kind: "qemu" or "lxc"; "" keeps both.
	Type string
}

// FleetGuestList is one page of the fleet's guests, ordered by cluster id and
// then by vmid: the page's guests, cluster by cluster.
type FleetGuestList struct {
	// Clusters holds each cluster's part of the page, by cluster id; a cluster
	// with no guest on the page is left out. Their guests are shared with other
	// answers: read only.
	Clusters []ClusterGuests
	// AsOf is the oldest of the snapshots the page read (now when it read none).
	AsOf time.Time
	// NextCursor continues with the next page (FleetQuery.Cursor); "" on the last.
	NextCursor string
	// Unavailable are the clusters this page would have read but could not
	// (no endpoint answers, PVE failed): their guests are missing, and the page
	// says so rather than failing as a whole.
	Unavailable []ClusterUnavailable
}

// ClusterGuests is one cluster's part of a FleetGuestList.
type ClusterGuests struct {
	ClusterID int64
	Name      string
	Guests    []VMView
	AsOf      time.Time // when PVE was read for this cluster
	// All and Memo are VMList's: every guest of the cluster's snapshot, and
	// what a front end keeps of them.
	All  []VMView
	Memo *Memo
}

// ClusterUnavailable is a cluster whose guests could not be read: Err is the
// error a list of that cluster alone would have answered.
type ClusterUnavailable struct {
	ClusterID int64
	Name      string
	Err       error
}

// Validate checks every value of q as FleetGuests does (invalid_request); a
// front end calls it before anything else.
func (q FleetQuery) Validate() error {
	_, err := q.validate()
	return err
}

// fleetCursor is where a page of the fleet's guests continues: after vmid in
// cluster. Its text is "cluster:vmid", both canonical decimal numbers.
type fleetCursor struct {
	cluster, vmid int64
}

func (q FleetQuery) validate() (fleetCursor, error) {
	if k := pve.GuestKind(q.Type); k != "" && !k.Valid() {
		return fleetCursor{}, invalid("type must be %s or %s", pve.Qemu, pve.LXC)
	}
	vq := q.VMQuery
	vq.Cursor = ""
	if _, err := vq.validate(); err != nil {
		return fleetCursor{}, err
	}
	if q.Cursor == "" {
		return fleetCursor{}, nil
	}
	bad := invalid("cursor is not one vmgate gave (nextCursor of the fleet's guest list)")
	c, v, ok := strings.Cut(q.Cursor, ":")
	if !ok {
		return fleetCursor{}, bad
	}
	cluster, err1 := strconv.ParseInt(c, 10, 64)
	vmid, err2 := strconv.ParseInt(v, 10, 64)
	if err1 != nil || err2 != nil || cluster < 1 || vmid < pve.MinVMID || vmid > pve.MaxVMID ||
		strconv.FormatInt(cluster, 10) != c || strconv.FormatInt(vmid, 10) != v {
		return fleetCursor{}, bad
	}
	return fleetCursor{cluster, vmid}, nil
}

func (c fleetCursor) String() string {
	return strconv.FormatInt(c.cluster, 10) + ":" + strconv.FormatInt(c.vmid, 10)
}

// FleetGuests returns the page of the guests of every cluster the actor may
// read (Readable: any grant; an admin every cluster) that q selects, by cluster
// id and then by vmid. Each cluster's guests come from its snapshot (as
// GuestList's: younger than SnapshotMaxAge, one shared PVE read otherwise);
// the snapshots a page needs are read concurrently, and a page stops reading
// clusters once it is full and knows whether more follow. The cursor names a
// cluster and a vmid, so a page is stable across clusters: a cluster or guest
// appearing or going elsewhere neither skips nor repeats one. A cluster that
// cannot be read is named in Unavailable, not an error of the whole list.
func (s *Service) FleetGuests(ctx context.Context, a Actor, q FleetQuery) (FleetGuestList, error) {
	cur, err := q.validate()
	if err != nil {
		return FleetGuestList{}, err
	}
	visible, err := s.readableClusters(ctx, a, cur.cluster)
	if err != nil {
		return FleetGuestList{}, err
	}
	kind := pve.GuestKind(q.Type)

	// Fresh snapshots are taken at once; the others are read concurrently,
	// each cluster's result waited for in order.
	now := s.now()
	type result struct {
		sn  *snapshot[guestSet]
		err error
	}
	results := make([]chan result, len(visible))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel() // the reads go on for the snapshots' sake; this request stops waiting
	snaps := make([]*snapshot[guestSet], len(visible))
	for i, rec := range visible {
		if sn, _ := s.guestSnaps.fresh(rec.row.ID, now); sn != nil {
			snaps[i] = sn
			continue
		}
		ch := make(chan result, 1)
		results[i] = ch
		go func(id int64) {
			sn, err := s.guests(rctx, id)
			ch <- result{sn, err}
		}(rec.row.ID)
	}

	var out FleetGuestList
	room := q.Limit // 0: no limit
	for i, rec := range visible {
		sn := snaps[i]
		if sn == nil {
			var r result
			select {
			case r = <-results[i]:
			case <-ctx.Done():
				return FleetGuestList{}, ReadError(ctx.Err())
			}
			if r.err != nil {
				if ctx.Err() != nil {
					return FleetGuestList{}, ReadError(ctx.Err())
				}
				if errs.KindOf(r.err) == errs.NotFound {
					continue // deleted since the list of clusters was read
				}
				out.Unavailable = append(out.Unavailable, ClusterUnavailable{ClusterID: rec.row.ID, Name: rec.row.Name, Err: r.err})
				continue
			}
			sn = r.sn
		}
		after := int64(0)
		if rec.row.ID == cur.cluster {
			after = cur.vmid
		}
		items := sn.val.of(kind)
		q := q // this cluster's: the caller's scope here narrows it
		if q.scope, err = s.scopeOf(ctx, a, rec.row.ID); err != nil {
			return FleetGuestList{}, err
		}
		if q.Limit > 0 && room == 0 {
			// The page is full: one more match anywhere means another page.
			if more, _ := q.page(items, after, 1); len(more) > 0 {
				last := out.Clusters[len(out.Clusters)-1]
				out.NextCursor = fleetCursor{last.ClusterID, last.Guests[len(last.Guests)-1].VMID}.String()
				break
			}
			continue
		}
		page, more := q.page(items, after, room)
		if out.AsOf.IsZero() || sn.at.Before(out.AsOf) {
			out.AsOf = sn.at
		}
		if len(page) > 0 {
			out.Clusters = append(out.Clusters, ClusterGuests{ClusterID: rec.row.ID, Name: rec.row.Name, Guests: page, AsOf: sn.at,
				All: sn.val.all, Memo: sn.val.memo})
		}
		if q.Limit > 0 {
			room -= len(page)
			if more {
				out.NextCursor = fleetCursor{rec.row.ID, page[len(page)-1].VMID}.String()
				break
			}
		}
	}
	if out.AsOf.IsZero() {
		out.AsOf = now
	}
	return out, nil
}

// readableClusters returns the registered clusters the actor may read, by id,
// from the cluster with id from on.
func (s *Service) readableClusters(ctx context.Context, a Actor, from int64) ([]*clusterRecord, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return nil, err
	}
	ids, all, err := s.Readable(ctx, a)
	if err != nil {
		return nil, err
	}
	out := make([]*clusterRecord, 0, len(cs.sorted))
	if all {
		for _, rec := range cs.sorted {
			if rec.row.ID >= from {
				out = append(out, rec)
			}
		}
		return out, nil
	}
	for _, id := range ids { // sorted
		if rec := cs.byID[id]; rec != nil && id >= from {
			out = append(out, rec)
		}
	}
	return out, nil
}
