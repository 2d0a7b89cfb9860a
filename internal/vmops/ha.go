package vmops

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
)

// haUser is the user of the tasks the HA stack runs (reference §3.0).
const haUser = "root@pam"

// followHA completes the view of an HA stand-in task that ended well: PVE's
// hastart/hastop/hamigrate only queue a request for the HA stack, whose local
// resource manager runs the real task (as root@pam) a little later. The view then
// reports that task: running until it ends, with its result, error and progress.
// When no such task shows up but the VM is already in the requested state, the
// request was carried out (or had nothing to do); when neither happens within
// HAGrace, the request failed.
func (s *Service) followHA(ctx context.Context, api PVE, t *tracker, v *TaskView) error {
	now := s.now()
	if t.haEndedAt.IsZero() {
		t.haEndedAt = now
	}
	var reached bool
	var state string
	if t.follow == nil {
		// The VM's state is read before the task list: a real task that brought
		// the VM there has then been created before the list is read, so it is
		// found and followed rather than skipped.
		var err error
		reached, state, err = s.reachedState(ctx, api, t, v.Target)
		if err != nil {
			return err
		}
		real, found, err := findRealTask(ctx, api, t.upid)
		if err != nil {
			return readUpstream(err)
		}
		if found {
			t.follow = &real
		}
	}
	if t.follow == nil {
		switch {
		case reached:
			// v already says stopped/OK from the stand-in.
			if v.Progress != nil {
				v.Progress = &Progress{Percent: 100, Phase: PhaseDone}
			}
		case now.Sub(t.haEndedAt) > s.haGrace:
			v.Status, v.Result, v.ExitStatus = StatusStopped, ResultFailed, "HA request not carried out"
			v.Error = fmt.Sprintf("the HA stack did not carry out the %s request within %s (VM's HA state: %s)",
				t.upid.Type, s.haGrace, orUnknown(state))
			if v.Progress != nil {
				v.Progress.Phase = PhaseFailed
			}
		default:
			v.Status, v.Result, v.ExitStatus, v.EndTime = StatusRunning, ResultRunning, "", time.Time{}
			if isMigration(t.upid.Type) {
				v.Progress = &Progress{Phase: PhaseStarting}
			}
		}
		return nil
	}
	st, err := api.TaskStatus(ctx, *t.follow)
	if err != nil {
		return readUpstream(err)
	}
	if err := readLog(ctx, api, *t.follow, &t.followLog); err != nil {
		return readUpstream(err)
	}
	v.FollowTaskID = t.follow.String()
	v.Error = ""
	apply(v, st, &t.followLog)
	if v.Target == "" {
		v.Target = t.followLog.parser.target
	}
	if v.Finished() {
		v.EndTime = s.endTime(ctx, api, *t.follow)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// findRealTask looks for the task the HA stack ran for a stand-in: the same guest,
// one of the expected types, by root@pam, started at or after the stand-in; first
// in the stand-in node's task list, then in the cluster's recent tasks (the HA
// stack may have acted on another node). The earliest match wins.
func findRealTask(ctx context.Context, api PVE, ha pve.UPID) (pve.UPID, bool, error) {
	// The stand-in does not say the guest's kind; a vmid is one guest in a
	// cluster, so the real task of either kind is the one.
	types := append(pve.RealTaskTypes(pve.Qemu, ha.Type), pve.RealTaskTypes(pve.LXC, ha.Type)...)
	vmid, _ := strconv.Atoi(ha.ID)
	match := func(list []pve.TaskListEntry) (pve.UPID, bool) {
		var best pve.UPID
		found := false
		for _, e := range list {
			u := e.UPID
			if u.IsZero() || u.ID != ha.ID || u.User != haUser || !slices.Contains(types, u.Type) ||
				u.StartTime.Before(ha.StartTime) {
				continue
			}
			if !found || u.StartTime.Before(best.StartTime) {
				best, found = u, true
			}
		}
		return best, found
	}
	list, err := api.NodeTasks(ctx, ha.Node, pve.TaskListOptions{Source: "all", VMID: vmid,
		UserFilter: haUser, Since: ha.StartTime, Limit: 100})
	if err != nil {
		return pve.UPID{}, false, err
	}
	if u, ok := match(list); ok {
		return u, true, nil
	}
	list, err = api.ClusterTasks(ctx)
	if err != nil {
		return pve.UPID{}, false, err
	}
	u, ok := match(list)
	return u, ok, nil
}

// reachedState reports whether the VM already is where an HA request wanted it:
// running (hastart), stopped (hastop), on the target node (hamigrate). It also
// returns the VM's HA state for the message of a request that never completes.
func (s *Service) reachedState(ctx context.Context, api PVE, t *tracker, target string) (bool, string, error) {
	vmid, err := strconv.Atoi(t.upid.ID)
	if err != nil {
		return false, "", nil
	}
	res, err := api.Resources(ctx, "vm")
	if err != nil {
		return false, "", readUpstream(err)
	}
	for _, r := range res {
		if (r.Type != string(pve.Qemu) && r.Type != string(pve.LXC)) || r.VMID != vmid {
			continue
		}
		switch t.upid.Type {
		case "hamigrate":
			return target != "" && r.Node == target, r.HAState, nil
		}
		// /cluster/resources lags; the guest's own status is exact.
		st, err := api.GuestStatus(ctx, pve.Guest{Kind: pve.GuestKind(r.Type), Node: r.Node, VMID: vmid})
		if err != nil {
			return false, r.HAState, nil
		}
		switch t.upid.Type {
		case "hastart":
			return st.Status == "running", st.HA.State, nil
		case "hastop":
			return st.Status == "stopped", st.HA.State, nil
		}
	}
	return false, "", nil
}
