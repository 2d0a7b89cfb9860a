package vmops

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
)

// Tasks started outside vmgate (issue 19 item 4): by PVE's own UI, the HA
// stack, another tool. PVE's cluster task list (/cluster/tasks: each node's
// running tasks and its latest finished ones) names them; vmgate shows them
// beside its own, marked by the PVE user that started them, to anyone who may
// read the cluster's tasks. They have no task row: their view is the list's.

// outsideMaxAge is how old a cluster's task list may be and still answer: the
// list is shared by every page that shows it, as the inventory snapshot is.
const outsideMaxAge = 2 * time.Second

// outsideTasks is each cluster's latest task list, read at most once per
// outsideMaxAge however many ask. The zero value is ready.
type outsideTasks struct {
	reads singleflight.Group
	mu    sync.Mutex
	lists map[int64]outsideList
}

type outsideList struct {
	at    time.Time
	tasks []TaskView // newest first; shared: read only
}

// OutsideTasks lists the tasks of a cluster that vmgate did not start, newest
// first, from PVE's cluster task list: those of one guest when vmid is not 0.
// A task vmgate started (its UPID's user is vmgate's API token) is left out:
// its row lists it. Each view has no TaskRef and no StartedBy; PVEUser says who
// started it in PVE. It needs a viewer grant on the cluster.
func (s *Service) OutsideTasks(ctx context.Context, a Actor, clusterID, vmid int64) ([]TaskView, error) {
	if err := s.require(ctx, a, clusterID, fleet.GrantViewer, "read the tasks of cluster "+strconv.FormatInt(clusterID, 10)); err != nil {
		return nil, err
	}
	in, err := s.ScopeFilter(ctx, a, clusterID)
	if err != nil {
		return nil, err
	}
	all, err := s.outsideList(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	if vmid == 0 && in == nil {
		return slices.Clone(all), nil
	}
	var out []TaskView
	for _, v := range all {
		// A scoped grant sees the tasks of its guests only (scope.go).
		if (vmid == 0 || v.VMID == vmid) && (in == nil || v.VMID > 0 && in(v.VMID)) {
			out = append(out, v)
		}
	}
	return out, nil
}

func (s *Service) outsideList(ctx context.Context, clusterID int64) ([]TaskView, error) {
	o := &s.outside
	o.mu.Lock()
	l, ok := o.lists[clusterID]
	o.mu.Unlock()
	if ok && s.now().Sub(l.at) < outsideMaxAge {
		return l.tasks, nil
	}
	ch := o.reads.DoChan(strconv.FormatInt(clusterID, 10), func() (any, error) {
		at := s.now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		api, err := s.connect(rctx, clusterID)
		if err != nil {
			return nil, err
		}
		entries, err := api.ClusterTasks(rctx)
		if err != nil {
			return nil, readUpstream(err)
		}
		own := api.TokenID()
		tasks := make([]TaskView, 0, len(entries))
		for _, e := range entries {
			if own != "" && e.UPID.User == own {
				continue
			}
			tasks = append(tasks, outsideView(clusterID, e))
		}
		slices.SortStableFunc(tasks, func(a, b TaskView) int { return b.StartTime.Compare(a.StartTime) })
		o.mu.Lock()
		if o.lists == nil {
			o.lists = map[int64]outsideList{}
		}
		o.lists[clusterID] = outsideList{at: at, tasks: tasks}
		o.mu.Unlock()
		return tasks, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]TaskView), nil
	case <-ctx.Done():
		return nil, readUpstream(ctx.Err())
	}
}

// outsideView is a task of PVE's list as vmgate shows it.
func outsideView(clusterID int64, e pve.TaskListEntry) TaskView {
	v := TaskView{TaskID: e.UPID.String(), ClusterID: clusterID, Node: e.Node, Type: e.Type, PVEUser: e.User,
		StartTime: e.StartTime, Status: StatusRunning, Result: ResultRunning}
	if e.TokenID != "" {
		v.PVEUser = e.User + "!" + e.TokenID
	}
	v.VMID, _ = strconv.ParseInt(e.ID, 10, 64)
	if !e.EndTime.IsZero() || (e.Status != "" && e.Status != "RUNNING") {
		v.Status, v.ExitStatus, v.Result, v.EndTime = StatusStopped, e.Status, resultOfExit(e.Status), e.EndTime
		if v.Result == ResultFailed {
			v.Error = e.Status
		}
	}
	return v
}

// MergeTasks merges vmgate's tasks and outside ones, newest first (by start),
// a task listed by both once (vmgate's view).
func MergeTasks(own, outside []TaskView) []TaskView {
	seen := make(map[string]bool, len(own))
	for _, v := range own {
		if v.TaskID != "" {
			seen[v.TaskID] = true
		}
	}
	out := slices.Clone(own)
	for _, v := range outside {
		if !seen[v.TaskID] {
			out = append(out, v)
		}
	}
	slices.SortStableFunc(out, func(a, b TaskView) int { return cmp.Compare(b.StartTime.UnixNano(), a.StartTime.UnixNano()) })
	return out
}
