package webui

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/vmops"
)

// tasksPerPage is the length of a page of the task list.
const tasksPerPage = 50

// tasksView is the task list's data.
type tasksView struct {
	Values   url.Values
	Clusters []fleet.ClusterView
	Cluster  int64
	VMID     int64
	Result   string
	Mine     bool
	Tasks    []vmops.TaskView
	Next     int64 // the cursor of the next (older) page; 0 when none
	Older    string
}

// tasksPage lists the tasks vmgate started, newest first, on the clusters the
// caller may read (fleet.Readable), filtered by cluster, VM, result and "mine".
func (u *UI) tasksPage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	v := tasksView{Values: q, Result: q.Get("state"), Mine: q.Get("mine") == "1"}
	v.Cluster, _ = strconv.ParseInt(q.Get("cluster"), 10, 64)
	v.VMID, _ = strconv.ParseInt(q.Get("vmid"), 10, 64)
	before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
	if v.Cluster < 0 {
		v.Cluster = 0
	}
	if v.VMID != 0 && (v.VMID < vmops.MinVMID || v.VMID > vmops.MaxVMID) {
		v.VMID = 0
	}
	switch v.Result {
	case vmops.ResultRunning, vmops.ResultOK, vmops.ResultWarnings, vmops.ResultFailed:
	default:
		v.Result = ""
	}
	f := vmops.TaskFilter{ClusterID: v.Cluster, VMID: v.VMID, Result: v.Result, BeforeID: max(before, 0), Limit: tasksPerPage}
	if v.Mine {
		f.UserID = principal(r).UserID
	}
	tasks, next, err := u.vms.TaskPage(r.Context(), vmActor(r), f)
	if err != nil {
		return err
	}
	v.Tasks, v.Next = tasks, next
	if before == 0 && !v.Mine {
		v.Tasks = u.withOutside(r, v.Tasks, u.outsideClusters(r, v.Cluster), v.VMID, v.Result)
	}
	if next != 0 {
		v.Older = queryWith(q, "before", strconv.FormatInt(next, 10))
	}
	if cs, err := u.fleet.Clusters(r.Context(), actor(r)); err == nil {
		v.Clusters = cs
	}
	u.render(w, r, http.StatusOK, "tasks", u.page(w, r, "Tasks", "tasks", v))
	return nil
}

// pathTask reads {taskId} and the optional ?cluster= hint; the use cases check
// the viewer grant on the task's cluster.
func pathTask(r *http.Request) (upid string, hint int64, err error) {
	upid = r.PathValue("taskId")
	if !vmops.ValidTaskID(upid) {
		return "", 0, errs.E(errs.NotFound, "there is no task at this address")
	}
	hint, _ = strconv.ParseInt(r.URL.Query().Get("cluster"), 10, 64)
	return upid, max(hint, 0), nil
}

// logTail is how many of a log's last lines a task page shows (about 40 KB; the
// whole log is one link away, as text), so that no page outgrows its budget.
const logTail = 500

// taskView is a task page's data.
type taskView struct {
	Task     vmops.TaskView
	Live     liveTask
	Log      []vmops.LogLine // the log's last lines
	LogTotal int
	LogErr   string
	LogURL   string // the whole log, as text
	Events   string // the address of the page's event stream
	CanAct   bool
	CanAbort bool // a running shutdown or migration the caller may abort (abort.go)
	// TargetTask is a move to another cluster's tunnel task on the target, and
	// its page there (remote.go).
	TargetTask, TargetTaskURL string
}

// taskPage shows a task: its state, the migration's progress, the whole log; while
// it runs the page's script follows it on the UI's own event stream.
func (u *UI) taskPage(w http.ResponseWriter, r *http.Request) error {
	upid, hint, err := pathTask(r)
	if err != nil {
		return err
	}
	t, err := u.vms.Task(r.Context(), vmActor(r), upid, hint, 0)
	if err != nil {
		return err
	}
	v := taskView{Task: t, Live: live(t, u.now())}
	lg, err := u.vms.TaskLog(r.Context(), vmActor(r), upid, hint, 0, logTail)
	if err == nil && lg.Total > logTail {
		lg, err = u.vms.TaskLog(r.Context(), vmActor(r), upid, hint, lg.Total-logTail, logTail)
	}
	if err != nil {
		v.LogErr = errorText(err)
	} else {
		v.Log, v.LogTotal = lg.Lines, lg.Total
	}
	v.LogURL = taskURL(upid) + "/log"
	if hint != 0 {
		v.LogURL += "?cluster=" + strconv.FormatInt(hint, 10)
	}
	// The stream sends the log lines after those the page shows.
	from := 0
	if n := len(v.Log); n > 0 {
		from = v.Log[n-1].N
	}
	ev := url.Values{"from": {strconv.Itoa(from)}}
	if hint != 0 {
		ev.Set("cluster", strconv.FormatInt(hint, 10))
	}
	v.Events = taskURL(upid) + "/events?" + ev.Encode()
	v.CanAct = t.VMID != 0 && u.canAct(r.Context(), r, t.ClusterID)
	v.CanAbort = v.CanAct && abortable(t.Op()) && !t.Finished() && t.TaskID != ""
	v.TargetTask, v.TargetTaskURL = u.remoteTargetTask(r, t, upid, hint) // remote.go
	u.render(w, r, http.StatusOK, "task", u.page(w, r, taskTitle(t), "tasks", v))
	return nil
}

func taskTitle(t vmops.TaskView) string {
	if t.VMID != 0 {
		return t.Type + " of " + vmops.GuestKind(t.GuestKind()).Noun() + " " + itoa(t.VMID)
	}
	return "Task " + t.Type
}

// maxLogText bounds the lines of the whole log as text.
const maxLogText = 100000

// taskLog is a task's whole log as plain text (up to maxLogText lines).
func (u *UI) taskLog(w http.ResponseWriter, r *http.Request) error {
	upid, hint, err := pathTask(r)
	if err != nil {
		return err
	}
	lg, err := u.vms.TaskLog(r.Context(), vmActor(r), upid, hint, 0, maxLogText)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range lg.Lines {
		b.WriteString(l.T)
		b.WriteByte('\n')
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(b.String()))
	return nil
}

// liveTask is a task as the page and its event stream show it: the words and
// figures, worked out here so that the script only places them.
type liveTask struct {
	Status      string  `json:"status"`
	Result      string  `json:"result"`
	Finished    bool    `json:"finished"`
	Error       string  `json:"error,omitempty"`
	ExitStatus  string  `json:"exitStatus,omitempty"`
	Migration   bool    `json:"migration"`
	HasProgress bool    `json:"hasProgress"`
	Percent     float64 `json:"percent"`
	PercentText string  `json:"percentText"`
	Phase       string  `json:"phase"`
	Transferred string  `json:"transferred"`
	Total       string  `json:"total"`
	Rate        string  `json:"rate"`
	RateBytes   int64   `json:"rateBytes"`
	ETA         string  `json:"eta"`
	Elapsed     float64 `json:"elapsed"` // seconds since the task started, the chart's x
	Node        string  `json:"node"`
	Target      string  `json:"target,omitempty"`
	// NewNode and VMURL name where a migrated VM is now, once it ended well.
	NewNode string          `json:"newNode,omitempty"`
	VMURL   string          `json:"vmUrl,omitempty"`
	Log     []vmops.LogLine `json:"log,omitempty"` // lines since the last event
	Ended   string          `json:"ended,omitempty"`
}

func live(t vmops.TaskView, now time.Time) liveTask {
	l := liveTask{Status: t.Status, Result: t.Result, Finished: t.Finished(), Error: t.Error, ExitStatus: t.ExitStatus,
		Migration: t.IsMigration(), Node: t.Node, Target: t.Target}
	end := now
	if t.Finished() && !t.EndTime.IsZero() {
		end = t.EndTime
		l.Ended = when(t.EndTime)
	}
	if !t.StartTime.IsZero() {
		l.Elapsed = math.Max(0, end.Sub(t.StartTime).Seconds())
	}
	if p := t.Progress; p != nil {
		l.HasProgress = true
		l.Percent = math.Min(100, math.Max(0, math.Floor(p.Percent)))
		if t.Result == vmops.ResultOK || t.Result == vmops.ResultWarnings {
			l.Percent = 100
		}
		l.PercentText = strconv.FormatFloat(l.Percent, 'f', 0, 64) + "%"
		l.Phase = p.Phase
		l.Transferred, l.Total = humanBytes(p.TransferredBytes), humanBytes(p.TotalBytes)
		if p.BytesPerSecond > 0 && !t.Finished() {
			l.RateBytes = p.BytesPerSecond
			l.Rate = humanBytes(p.BytesPerSecond) + "/s"
			if left := p.TotalBytes - p.TransferredBytes; left > 0 {
				l.ETA = humanDuration(int64(math.Ceil(float64(left) / float64(p.BytesPerSecond))))
			}
		}
	}
	if l.Migration && t.VMID != 0 && t.Target != "" && (t.Result == vmops.ResultOK || t.Result == vmops.ResultWarnings) {
		l.NewNode, l.VMURL = t.Target, guestURL(t.GuestKind(), t.ClusterID, t.Target, t.VMID)
		if strings.Contains(t.Target, "/") {
			// A move to another cluster ("dev-b/pveb1"): the guest list finds it there.
			l.VMURL = "/vms?q=" + strconv.FormatInt(t.VMID, 10)
		}
	}
	return l
}

// ssePing is how often a quiet stream is written to (keeping proxies from closing
// it) and the session checked again.
const ssePing = 10 * time.Second

// taskEvents is the task page's event stream, on the UI's cookie session (the API's
// stream takes Bearer tokens only): an "task" event with the task as the page shows
// it, new log lines included, each time it changes, until it ends ("end") or the
// session does ("session"). The session is checked again at every event and ping,
// so a logout or revocation ends the stream at once.
func (u *UI) taskEvents(w http.ResponseWriter, r *http.Request) error {
	upid, hint, err := pathTask(r)
	if err != nil {
		return err
	}
	next, _ := strconv.Atoi(r.URL.Query().Get("from")) // the last log line the page has
	next = max(next, 0)
	a := vmActor(r)
	follow := func(ctx context.Context, emit func(vmops.TaskView) error) error {
		return u.vms.Events(ctx, a, upid, hint, emit)
	}
	return sessionStream(u, w, r, "task", follow, func(ctx context.Context, t vmops.TaskView) any {
		l := live(t, u.now())
		if lg, err := u.vms.TaskLog(ctx, a, upid, hint, next, 500); err == nil {
			l.Log = lg.Lines
			if n := len(lg.Lines); n > 0 {
				next = lg.Lines[n-1].N
			}
		}
		return l
	})
}

// sessionStream is the event stream of a live page (a task's, an operation's) on
// the UI's cookie session: follow calls emit with the view now and each time it
// changes, and each call sends one event named event carrying show's answer as
// JSON. It takes one of the caller's stream slots first (429 too_many_streams,
// docs/security.md item 34: the limiter the API's streams count in too) and gives it back
// when it ends. The session is checked again at every event and ping, so a logout
// or revocation ends the stream at once ("session"); it ends with "end" when the
// view is final, or with a retry hint when vmgate shuts down ("shutdown").
func sessionStream[V any](u *UI, w http.ResponseWriter, r *http.Request, event string,
	follow func(ctx context.Context, emit func(V) error) error, show func(ctx context.Context, v V) any) error {
	p := principal(r)
	release, err := u.streams.Acquire(p.UserID, p.AuditSession())
	if err != nil {
		return err
	}
	defer release()
	raw := sessionToken(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sessionEnded := false
	sessionOK := func() bool {
		if _, err := u.sessions.Authenticate(ctx, raw); errs.KindOf(err) == errs.Unauthenticated {
			sessionEnded = true
			cancel()
			return false
		}
		return true
	}
	var stream *sse.Stream
	err = follow(ctx, func(v V) error {
		if !sessionOK() {
			return errUnauthenticated
		}
		b, err := json.Marshal(show(ctx, v))
		if err != nil {
			return err
		}
		if stream == nil {
			stream = sse.Start(ctx, w, ssePing, sessionOK)
		}
		return stream.Event(event, string(b))
	})
	if stream != nil {
		stream.Close()
	}
	switch {
	case stream == nil && sessionEnded:
		return errUnauthenticated
	case stream == nil && errors.Is(err, vmops.ErrDraining):
		return &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonShuttingDown, Message: "vmgate is shutting down; try again",
			RetryAfter: int(shutdownRetry / time.Second), Err: err}
	case stream == nil:
		return err
	case sessionEnded:
		_ = stream.Event("session", "{}")
	case errors.Is(err, vmops.ErrDraining):
		// vmgate shuts down: the browser reconnects after the retry hint, to this
		// replica's replacement or another one.
		_ = stream.Retry("shutdown", shutdownRetry, "{}")
	case err == nil && r.Context().Err() == nil:
		_ = stream.Event("end", "{}")
	}
	return nil
}

// shutdownRetry is the reconnection delay a stream's last event suggests when
// vmgate shuts down (as the API's stream does).
const shutdownRetry = 2 * time.Second
