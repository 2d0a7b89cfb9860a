package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/vmops"
)

// Suspend and resume (issue 13 (docs/history.md)): the power operations' flow (decode,
// once per Idempotency-Key the use case with its checks and the operator grant,
// wait for the task, 200/202 or the mapped error), each with its own query string.

// readSuspendQuery reads ?wait= and ?todisk=.
func readSuspendQuery(r *http.Request) (powerQuery, error) {
	if err := checkQuery(r, "wait", "todisk"); err != nil {
		return powerQuery{}, err
	}
	q, err := readWait(r)
	if err != nil {
		return q, err
	}
	v, err := queryOne(r, "todisk")
	if err != nil {
		return q, err
	}
	q.toDisk, err = parseBool("todisk", v, false)
	return q, err
}

// readResumeQuery reads ?wait=.
func readResumeQuery(r *http.Request) (powerQuery, error) {
	if err := checkQuery(r, "wait"); err != nil {
		return powerQuery{}, err
	}
	return readWait(r)
}

func readWait(r *http.Request) (powerQuery, error) {
	wait, err := queryInt(r, "wait", int64(vmops.DefaultWait/time.Second), 0, int64(vmops.MaxPowerWait/time.Second))
	return powerQuery{wait: time.Duration(wait) * time.Second}, err
}

func (s *Server) vmSuspend(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.powerWith(w, r, kind, readSuspendQuery, func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, q powerQuery) (vmops.Outcome, error) {
			return s.vms.Suspend(ctx, a, vm, vmops.SuspendOptions{ToDisk: q.toDisk, Wait: q.wait})
		})
	}
}

func (s *Server) vmResume(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.powerWith(w, r, kind, readResumeQuery, func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, q powerQuery) (vmops.Outcome, error) {
			return s.vms.Resume(ctx, a, vm, vmops.ResumeOptions{Wait: q.wait})
		})
	}
}
