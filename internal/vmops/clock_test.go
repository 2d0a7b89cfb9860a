package vmops

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// TestSearchInPVETime: PVE's clock -60, -10, +10 and +60 s off vmgate's (the
// emulator started that far off, its clock moved by hand). The search for the
// task of a request whose answer was lost compares PVE's start times with the
// request's time on PVE's clock: it finds the task when vmgate runs ahead (a
// search in vmgate's time missed it, the row was given up and its
// Idempotency-Key released: a retry ran the action twice), and it does not take
// an older task of the same VM and token when vmgate runs behind (a search in
// vmgate's time took it).
func TestSearchInPVETime(t *testing.T) {
	t.Parallel()
	for _, offset := range []time.Duration{-60 * time.Second, -10 * time.Second, 10 * time.Second, 60 * time.Second} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			var later atomic.Int64 // vmgate's clock moved by hand
			e := newEnv(t, envOpts{manual: true, pveStart: time.Now().Add(offset), cfg: func(c *Config) {
				c.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
			}})
			ctx := e.request()
			if _, err := e.client.Nodes(ctx); err != nil {
				t.Fatal(err)
			}
			// The emulator's clock stands still until moved: by now it is behind
			// by as long as the set-up took.
			if got, ok := e.client.ClockOffset(); !ok || got < offset-guard || got > offset+2*time.Second {
				t.Fatalf("the client measured %v, %v; PVE is %v off, less the set-up's time", got, ok, offset)
			}

			// The task of a lost answer is found.
			e.svc.connect = wrapAPI(e.svc.connect, func(api PVE) PVE { return &hookAPI{PVE: api, loseAnswer: true} })
			_, err := e.svc.Start(ctx, e.actor, vm("pve1", 101), PowerOptions{})
			ref, ok := TaskRefOf(err)
			if !ok {
				t.Fatalf("start with a lost answer: %v, want outcome_unknown", err)
			}
			var row store.Task
			for range 3 { // (or the service's own background search)
				if e.svc.searchOnce(ctx, ref) != searchAgain {
					break
				}
			}
			row, err = e.store.TaskByID(ctx, ref)
			tasks := e.sim.TasksFor(101)
			if err != nil || len(tasks) != 1 || row.UPID != tasks[0].UPID || row.UPIDSource != store.UPIDFound {
				t.Fatalf("the row %+v (%v); PVE's tasks %+v", row, err, tasks)
			}

			// An older task of the same VM and token is not taken for a
			// request that never reached PVE.
			old, err := e.client.Start(ctx, pve.VMOn("pve3", 105), pve.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.sim.Advance(20 * time.Second)
			// The use case reads the VM's state first: PVE's clock as it is now.
			if _, err := e.client.GuestStatus(ctx, pve.VMOn("pve3", 105)); err != nil {
				t.Fatal(err)
			}
			_, lost, err := e.svc.startTask(ctx, e.client, e.actor, vm("pve3", 105), OpStart, "", map[string]any{},
				func(context.Context) (pve.UPID, error) {
					return pve.UPID{}, &pve.AmbiguousError{Method: "POST", Err: errors.New("connection reset")}
				})
			wantReason(t, err, errs.Timeout, ReasonOutcomeUnknown)
			// Past its window, on vmgate's clock and on PVE's.
			later.Add(int64(DefaultLostGrace + time.Second))
			e.sim.Advance(DefaultLostGrace + 10*time.Second)
			res := searchAgain
			for i := 0; i < 3 && res == searchAgain; i++ {
				res = e.svc.searchOnce(ctx, lost.ID)
			}
			row, err = e.store.TaskByID(ctx, lost.ID)
			// (The service's own background search may have got there first.)
			if res == searchAgain || res == searchFound || err != nil || row.UPID != "" || row.LostReason != store.LostNoTask {
				t.Fatalf("search: %d; the row %+v %v; the older task %s must not be taken", res, row, err, old)
			}
		})
	}
}
