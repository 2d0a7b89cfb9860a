package webui

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/vmops"
)

// Tasks started outside vmgate — by PVE's own UI, the HA stack, another tool
// (issue 19 item 4) — are listed beside vmgate's on the task list's first page
// and on a guest's page, marked "started in PVE by" their PVE user. Whoever may
// read a cluster's tasks sees them; a cluster whose list cannot be read now
// shows vmgate's tasks alone.

// withOutside merges the outside tasks of the clusters (of one guest when vmid
// is not 0, of one result when result is not "") into tasks, newest first.
func (u *UI) withOutside(r *http.Request, tasks []vmops.TaskView, clusters []int64, vmid int64, result string) []vmops.TaskView {
	var outside []vmops.TaskView
	for _, id := range clusters {
		l, err := u.vms.OutsideTasks(r.Context(), vmActor(r), id, vmid)
		if err != nil {
			continue
		}
		for _, t := range l {
			if result == "" || t.Result == result {
				outside = append(outside, t)
			}
		}
	}
	if len(outside) == 0 {
		return tasks
	}
	return vmops.MergeTasks(tasks, outside)
}

// outsideClusters are the clusters whose outside tasks the task list shows:
// the one filtered, else every one the caller may see.
func (u *UI) outsideClusters(r *http.Request, cluster int64) []int64 {
	if cluster != 0 {
		return []int64{cluster}
	}
	cs, err := u.fleet.Clusters(r.Context(), actor(r))
	if err != nil {
		return nil
	}
	ids := make([]int64, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}
