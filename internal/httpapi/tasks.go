package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/vmops"
)

// pathTask reads and validates {taskId}: a UPID exactly as PVE writes it, or
// vmgate's task reference (a task view's taskRef: the task row an
// outcome_unknown answer names in X-Operation-Id).
func pathTask(r *http.Request) (string, error) {
	id := r.PathValue("taskId")
	if !vmops.ValidTaskID(id) {
		return "", errs.E(errs.Invalid,
			"the task id is neither a PVE UPID (UPID:node:pid:pstart:starttime:type:id:user:) nor vmgate's task reference (a positive integer)")
	}
	return id, nil
}

// clusterHint reads ?clusterId=, the cluster of a task vmgate did not start (0
// when not given).
func clusterHint(r *http.Request) (int64, error) {
	return queryInt(r, "clusterId", 0, 1, 1<<53)
}

func (s *Server) task(w http.ResponseWriter, r *http.Request) error {
	upid, err := pathTask(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "wait", "clusterId"); err != nil {
		return err
	}
	wait, err := queryInt(r, "wait", 0, 0, int64(vmops.MaxTaskWait/time.Second))
	if err != nil {
		return err
	}
	hint, err := clusterHint(r)
	if err != nil {
		return err
	}
	v, err := s.vms.Task(r.Context(), vmActor(r), upid, hint, time.Duration(wait)*time.Second)
	if err != nil {
		return err
	}
	writeEncoded(w, http.StatusOK, "success", (*taskAnswer)(&v), nil)
	return nil
}

// maxLogLines bounds one page of a task log.
const maxLogLines = 5000

func (s *Server) taskLog(w http.ResponseWriter, r *http.Request) error {
	upid, err := pathTask(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "start", "limit", "clusterId"); err != nil {
		return err
	}
	start, err := queryInt(r, "start", 0, 0, 1<<31-1)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 50, 1, maxLogLines)
	if err != nil {
		return err
	}
	hint, err := clusterHint(r)
	if err != nil {
		return err
	}
	lg, err := s.vms.TaskLog(r.Context(), vmActor(r), upid, hint, int(start), int(limit))
	if err != nil {
		return err
	}
	type line struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	out := struct {
		Lines []line `json:"lines"`
		Total int    `json:"total"`
	}{Lines: make([]line, 0, len(lg.Lines)), Total: lg.Total}
	for _, l := range lg.Lines {
		out.Lines = append(out.Lines, line{N: l.N, T: l.T})
	}
	writeData(w, out)
	return nil
}

// ssePing is how often a quiet stream sends a comment, so that proxies keep it open.
const ssePing = 15 * time.Second

// shutdownRetry is the reconnection delay an event stream's last event suggests
// when vmgate shuts down: a rolling restart's replacement (or another replica)
// is usually there by then.
const shutdownRetry = 2 * time.Second

// taskEvents streams the task's view as server-sent events ("event: task") each
// time it changes, until the task ends ("event: end"), the client goes away, or
// vmgate shuts down ("event: shutdown" with a retry hint: reconnect and go on).
// Errors found before the first event are answered as usual.
func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) error {
	upid, err := pathTask(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "clusterId"); err != nil {
		return err
	}
	hint, err := clusterHint(r)
	if err != nil {
		return err
	}
	a := vmActor(r)
	follow := func(ctx context.Context, emit func(vmops.TaskView) error) error {
		return s.vms.Events(ctx, a, upid, hint, emit)
	}
	return eventStream(w, r, s.streams, "task", follow, func(v vmops.TaskView) ([]byte, error) {
		return encode((*taskAnswer)(&v))
	})
}

// eventStream answers with server-sent events: follow calls emit with the view now
// and each time it changes, and each call sends one event named event with the
// view as enc writes it. The stream takes one of the caller's slots in streams
// first (429 too_many_streams when the user or the session holds its cap,
// docs/security.md item 34) and gives it back when it ends. An error before the first event
// is answered as usual; after it, the stream ends with "end" when the view is
// final, or with "shutdown" and a retry hint when vmgate drains.
func eventStream[V any](w http.ResponseWriter, r *http.Request, streams *sse.Limiter, event string,
	follow func(ctx context.Context, emit func(V) error) error, enc func(V) ([]byte, error)) error {
	p := principal(r)
	release, err := streams.Acquire(p.UserID, p.AuditSession())
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	var stream *sse.Stream
	err = follow(ctx, func(v V) error {
		b, err := enc(v)
		if err != nil {
			return err
		}
		if stream == nil {
			stream = sse.Start(ctx, w, ssePing, nil)
		}
		return stream.Event(event, string(b))
	})
	if stream == nil {
		return err
	}
	defer stream.Close()
	switch {
	case errors.Is(err, vmops.ErrDraining):
		// The SSE retry field is the client's reconnection delay; the data says the
		// same for clients that read only data.
		ms := shutdownRetry.Milliseconds()
		_ = stream.Retry("shutdown", shutdownRetry, fmt.Sprintf(`{"reason":"shutdown","retryMs":%d}`, ms))
	case err == nil && ctx.Err() == nil:
		_ = stream.Event("end", "{}")
	}
	return nil
}

func (s *Server) tasks(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "clusterId", "vmid", "limit"); err != nil {
		return err
	}
	clusterID, err := queryInt(r, "clusterId", 0, 1, 1<<53)
	if err != nil {
		return err
	}
	vmid, err := queryInt(r, "vmid", 0, vmops.MinVMID, vmops.MaxVMID)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	f := vmops.TaskFilter{ClusterID: clusterID, VMID: vmid, Limit: int(limit)}
	list, err := s.vms.Tasks(r.Context(), vmActor(r), f)
	if err != nil {
		return err
	}
	writeEncoded(w, http.StatusOK, "success", taskList(list), nil)
	return nil
}
