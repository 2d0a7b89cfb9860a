package vmops

import (
	"cmp"
	"slices"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Which task of PVE's list belongs to which request (issue 17 (docs/history.md)). A write whose
// answer was lost leaves a task row without a UPID; its task, if PVE started
// one, is in the node's task list — among the tasks of every other request for
// the same VM, all by vmgate's one token, which PVE's list cannot tell apart.
// Taking "the earliest task not yet recorded" handed request Y the task of a
// request X whose answer was on its way, and left X's row without its task.
//
// So a search never looks at its own row alone. It reads the task list first
// and then every row of the VM that may own one of its tasks (a task exists
// only after its row was written, so every task read has its row among those),
// and matches them all at once, the same way on every replica:
//
//   - a task recorded for a row (PVE's answer, or an earlier search) is never
//     matched again;
//   - a row may own a task of its node, VM, token and operation's types that
//     started, on PVE's clock, no earlier than the row was written less
//     pendingSlack (the offset's error and the nodes' disagreement);
//   - tasks go in the order PVE started them (start time, then the worker's
//     process start, which orders one node's tasks within a second), each
//     first to a row whose POST was being answered when the task started (its
//     window ends when it learned its outcome was unknown: a task starts while
//     its POST is answered), the one whose window closes first, then to any
//     row that may own it, the oldest first. Ties go to the older row. This is
//     the order in which rows and tasks were made, and it matches as many
//     tasks as can be matched;
//   - a row whose POST is still under way ("in flight": its process has not
//     heard back yet) takes part, because the answer it is about to get may be
//     any task it may own. A search whose result depends on such a row — its
//     task could be the in-flight row's, or it found none while the in-flight
//     row may own one it could — waits for the next look;
//   - a row none is left for is lost once its search window (LostGrace, on
//     vmgate's clock and on PVE's) has passed: proven never started when every
//     task it may own of that window is PVE's answer to another request;
//     "ambiguous" when one went to another row by a match, which is as good a
//     claim as its own would have been. An ambiguous request is never made
//     again: its Idempotency-Key keeps an outcome_unknown answer.
//
// PVE's answer is proof and a search's match an inference: a row PVE answers
// with a UPID a search gave to another row takes it (store.ClaimTaskUPID), and
// that row searches again. With the in-flight rule that happens only when an
// answer reaches the store later than writeBound after its request began.

// writeBound is how long a write may be under way in the process that sends it
// before another replica takes its row for one whose process died: the PVE
// client's call deadline (30 s) and its task-list lookup (15 s), and the store's
// deadline for recording the answer, with room to spare.
const writeBound = time.Minute

// claimant is a task row without a UPID as the matching sees it.
type claimant struct {
	row      store.Task
	types    []string
	lo       time.Time // PVE's time: the earliest its task may have started
	tight    time.Time // PVE's time: the latest while its POST was being answered
	deadline time.Time // PVE's time: the end of its search window
	inFlight bool
}

// admits reports whether the row may own task u.
func (c *claimant) admits(u pve.UPID) bool {
	return u.Node == c.row.Node && slices.Contains(c.types, u.Type) && !u.StartTime.Before(c.lo)
}

// pveCreated is when row r was written on the cluster's clock, as early and as
// late as it may have been: as its writer measured PVE's offset, or, for a row
// written before that was kept, its creation on vmgate's clock with or without
// the offset known now (either clock may be the one the row was compared with).
func pveCreated(r store.Task, offset time.Duration) (earliest, latest time.Time) {
	if !r.PVECreatedAt.IsZero() {
		return r.PVECreatedAt, r.PVECreatedAt
	}
	if offset < 0 {
		return r.CreatedAt.Add(offset), r.CreatedAt
	}
	return r.CreatedAt, r.CreatedAt.Add(offset)
}

// newClaimant describes row r for the matching. offset is PVE's clock less
// vmgate's; lost is the search window; inFlight says its POST is under way.
func newClaimant(r store.Task, offset, lost time.Duration, inFlight bool) *claimant {
	earliest, latest := pveCreated(r, offset)
	c := &claimant{row: r, types: opTypes(rowKind(r), r.Op), lo: earliest.Add(-pendingSlack).Truncate(time.Second),
		deadline: latest.Add(lost + pendingSlack), inFlight: inFlight}
	switch {
	case inFlight:
		c.tight = latest.Add(writeBound + pendingSlack)
	case !r.OutcomeUnknownAt.IsZero() && !r.OutcomeUnknownAt.Before(r.CreatedAt):
		c.tight = latest.Add(r.OutcomeUnknownAt.Sub(r.CreatedAt) + pendingSlack)
	default:
		c.tight = c.deadline
	}
	if c.tight.After(c.deadline) {
		c.tight = c.deadline
	}
	return c
}

// taskOrder orders tasks as PVE started them: by start time, then by the
// worker's process start (one node's tasks within a second), then by text.
func taskOrder(a, b pve.UPID) int {
	return cmp.Or(a.StartTime.Compare(b.StartTime), cmp.Compare(a.PStart, b.PStart), cmp.Compare(a.String(), b.String()))
}

// match assigns tasks (none recorded for a row) to claimants as the package
// comment above says, and returns each matched row's task by row id.
func match(tasks []pve.UPID, rows []*claimant) map[int64]pve.UPID {
	tasks = slices.Clone(tasks)
	slices.SortFunc(tasks, taskOrder)
	out := map[int64]pve.UPID{}
	used := make([]bool, len(tasks))
	pass := func(within func(*claimant, pve.UPID) bool, key func(*claimant) time.Time) {
		for i, u := range tasks {
			if used[i] {
				continue
			}
			var best *claimant
			for _, c := range rows {
				if _, taken := out[c.row.ID]; taken || !c.admits(u) || !within(c, u) {
					continue
				}
				if best == nil || key(c).Before(key(best)) || key(c).Equal(key(best)) && c.row.ID < best.row.ID {
					best = c
				}
			}
			if best != nil {
				out[best.row.ID] = u
				used[i] = true
			}
		}
	}
	// While their POSTs were answered, the window closing first first; then
	// without a bound, the oldest first.
	pass(func(c *claimant, u pve.UPID) bool { return !u.StartTime.After(c.tight) }, func(c *claimant) time.Time { return c.tight })
	pass(func(*claimant, pve.UPID) bool { return true }, func(c *claimant) time.Time { return c.lo })
	return out
}
