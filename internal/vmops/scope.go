package vmops

import (
	"context"
	"fmt"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
)

// Grants scoped to pools and tags (issue 23 section 3, docs/decisions/0120):
// a task is about a guest (its row's vmid, else its UPID's id); to a caller
// whose grant on the task's cluster is scoped, a task about a guest outside the
// scope — or about no guest at all — is a task that does not exist, answered
// with the very 404 of one, PVE not asked (docs/security.md item 42).

// requireTaskScope checks that a's grant on clusterID, already checked, covers
// the guest of task id when it is scoped.
func (s *Service) requireTaskScope(ctx context.Context, a Actor, id string, clusterID, clusterHint int64, need, what string) error {
	in, err := s.ScopeFilter(ctx, a, clusterID)
	if err != nil || in == nil {
		return err
	}
	ref, err := parseTaskRef(id)
	if err != nil {
		return err
	}
	vmid, err := s.taskGuest(ctx, ref)
	if err != nil {
		return err
	}
	if vmid > 0 && in(vmid) {
		return nil
	}
	return s.OutOfScope(ctx, a, clusterID, need, what, taskNotFoundAs(ref, id, clusterHint))
}

// taskGuest is the vmid of the guest a task is about, from what vmgate knows
// without asking PVE: its row, else its UPID's id; 0 for none.
func (s *Service) taskGuest(ctx context.Context, ref taskRef) (int64, error) {
	if ref.row > 0 {
		row, err := s.store.TaskByID(ctx, ref.row)
		if err != nil {
			if errs.KindOf(err) == errs.NotFound {
				return 0, taskRefNotFound(ref.row)
			}
			return 0, err
		}
		return row.VMID, nil
	}
	row, err := s.store.TaskByUPID(ctx, ref.upid.String())
	switch {
	case err == nil:
		return row.VMID, nil
	case errs.KindOf(err) != errs.NotFound:
		return 0, err
	}
	vmid, err := strconv.ParseInt(ref.upid.ID, 10, 64)
	if err != nil || vmid <= 0 {
		return 0, nil
	}
	return vmid, nil
}

// taskNotFoundAs is the 404 a query for a task that does not exist gets, as the
// caller asked it: a task reference no row has; a UPID with a cluster given,
// which PVE would have said it does not know (taskGone); a UPID without one.
func taskNotFoundAs(ref taskRef, id string, clusterHint int64) error {
	switch {
	case ref.row > 0:
		return taskRefNotFound(ref.row)
	case clusterHint > 0:
		return &errs.Error{Kind: errs.NotFound, Reason: "not_found",
			Message: fmt.Sprintf("task %s not found on node %s", ref.upid.String(), ref.upid.Node)}
	default:
		return errs.E(errs.NotFound,
			"task %s not found; for a task vmgate did not start, give its cluster (?clusterId=)", id)
	}
}

// listScopes returns, for the clusters a list shows (one asked, else those of
// readScope; nil and none asked: every one, an admin's), the scope filter of
// each where a's grant is scoped; nil when none is.
func (s *Service) listScopes(ctx context.Context, a Actor, clusterID int64, ids []int64) (map[int64]fleet.InScope, error) {
	if clusterID != 0 {
		ids = []int64{clusterID}
	}
	var out map[int64]fleet.InScope
	for _, id := range ids {
		in, err := s.ScopeFilter(ctx, a, id)
		if err != nil {
			return nil, err
		}
		if in != nil {
			if out == nil {
				out = map[int64]fleet.InScope{}
			}
			out[id] = in
		}
	}
	return out, nil
}

// ListScopes is listScopes for the lists of the use cases built on this
// service's (internal/operations' list of operations).
func (s *Service) ListScopes(ctx context.Context, a Actor, clusterID int64, ids []int64) (map[int64]fleet.InScope, error) {
	return s.listScopes(ctx, a, clusterID, ids)
}
