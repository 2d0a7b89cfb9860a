package pve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// TaskStatus is GET /nodes/{node}/tasks/{upid}/status.
type TaskStatus struct {
	UPID       UPID
	Node       string
	Status     string // running or stopped
	ExitStatus string // once stopped: OK, WARNINGS: n, or the error text
	Type       string
	ID         string
	User       string // user@realm (for token tasks without the token name)
	TokenID    string // the token name of token tasks
	StartTime  time.Time
	PID        uint32
	PStart     uint64
}

// Running reports whether the task is still running.
func (s TaskStatus) Running() bool { return s.Status == "running" }

// OK reports whether the task stopped successfully: exit status "OK" or
// "WARNINGS: n".
func (s TaskStatus) OK() bool {
	return s.Status == "stopped" && (s.ExitStatus == "OK" || strings.HasPrefix(s.ExitStatus, "WARNINGS: "))
}

// TaskStatus reads a task's status from the node that runs it (upid.Node).
func (c *Client) TaskStatus(ctx context.Context, upid UPID) (TaskStatus, error) {
	p, err := taskPath(upid, "status")
	if err != nil {
		return TaskStatus{}, fmt.Errorf("pve: %w", err)
	}
	var w struct {
		UPID       flexString `json:"upid"`
		Node       flexString `json:"node"`
		Status     flexString `json:"status"`
		ExitStatus flexString `json:"exitstatus"`
		Type       flexString `json:"type"`
		ID         flexString `json:"id"`
		User       flexString `json:"user"`
		TokenID    flexString `json:"tokenid"`
		StartTime  flexInt    `json:"starttime"`
		PID        flexInt    `json:"pid"`
		PStart     flexInt    `json:"pstart"`
	}
	if _, err := c.get(ctx, p, nil, limitDefault, &w); err != nil {
		return TaskStatus{}, err
	}
	bad := func(why string) (TaskStatus, error) {
		return TaskStatus{}, fmt.Errorf("pve: GET %s: %w: %s", p, ErrBadResponse, why)
	}
	if w.UPID != "" {
		got, err := ParseUPID(string(w.UPID))
		if err != nil || !got.Equal(upid) {
			return bad("status of another task " + strconv.Quote(truncate(string(w.UPID), 120)))
		}
	}
	if w.Status != "running" && w.Status != "stopped" {
		return bad("task status " + strconv.Quote(truncate(string(w.Status), 40)))
	}
	st := TaskStatus{
		UPID: upid, Node: upid.Node, Status: string(w.Status), ExitStatus: cleanText(string(w.ExitStatus)),
		Type: upid.Type, ID: upid.ID, StartTime: upid.StartTime, PID: upid.PID, PStart: upid.PStart,
		User: string(w.User), TokenID: string(w.TokenID),
	}
	if st.User == "" {
		st.User, st.TokenID = splitTaskUser(upid.User)
	}
	return st, nil
}

// splitTaskUser splits a UPID's user field into user and token name, as PVE
// does for task status and archived task lists.
func splitTaskUser(u string) (user, token string) {
	if checkTokenID(u) == nil {
		i := strings.LastIndexByte(u, '!')
		return u[:i], u[i+1:]
	}
	return u, ""
}

// LogLine is one line of a task log; N counts from 1.
type LogLine struct {
	N int
	T string
}

// TaskLog reads up to limit lines of a task's log starting after line start
// (0 = from the first line; limit 0 = all lines), with the log's total line
// count. PVE answers an empty log with the single line "no content".
func (c *Client) TaskLog(ctx context.Context, upid UPID, start, limit int) ([]LogLine, int, error) {
	if start < 0 || limit < 0 {
		return nil, 0, fmt.Errorf("pve: %w: negative start or limit", ErrInvalidArgument)
	}
	p, err := taskPath(upid, "log")
	if err != nil {
		return nil, 0, fmt.Errorf("pve: %w", err)
	}
	q := url.Values{"start": {strconv.Itoa(start)}, "limit": {strconv.Itoa(limit)}}
	var w []struct {
		N flexInt    `json:"n"`
		T flexString `json:"t"`
	}
	total, err := c.get(ctx, p, q, limitLarge, &w)
	if err != nil {
		return nil, 0, err
	}
	lines := make([]LogLine, len(w))
	for i, l := range w {
		if l.N < 1 {
			return nil, 0, fmt.Errorf("pve: GET %s: %w: log line number %d", p, ErrBadResponse, l.N)
		}
		lines[i] = LogLine{N: intIn(l.N), T: string(l.T)}
	}
	return lines, int(total), nil
}

// TaskListOptions filters GET /nodes/{node}/tasks. Zero values are left out.
type TaskListOptions struct {
	Source       string // archive (PVE's default), active or all
	VMID         int
	TypeFilter   string // exact task type, e.g. qmigrate
	UserFilter   string // PVE matches it as a case-insensitive substring of the user
	StatusFilter string // comma list of ok, warning, error, unknown
	Errors       bool   // only failed tasks
	Since, Until time.Time
	Start        int
	Limit        int // PVE's default is 50
}

// TaskListEntry is one task of a task list.
type TaskListEntry struct {
	UPID      UPID
	Node      string
	Type      string
	ID        string
	User      string // user@realm, or the full token id for active token tasks
	TokenID   string
	Status    string // RUNNING for active tasks; OK, WARNINGS: n or the error once ended
	StartTime time.Time
	EndTime   time.Time // zero while running
}

var taskSources = map[string]bool{"": true, "archive": true, "active": true, "all": true}

// NodeTasks reads a node's task list (/nodes/{node}/tasks).
func (c *Client) NodeTasks(ctx context.Context, node string, o TaskListOptions) ([]TaskListEntry, error) {
	p, err := nodeTasksPath(node)
	if err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	q, err := o.query()
	if err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	return c.taskList(ctx, p, q)
}

func (o TaskListOptions) query() (url.Values, error) {
	q := url.Values{}
	if !taskSources[o.Source] {
		return nil, fmt.Errorf("%w: task source %q", ErrInvalidArgument, truncate(o.Source, 40))
	}
	if o.Source != "" {
		q.Set("source", o.Source)
	}
	if o.VMID != 0 {
		if err := checkVMID(o.VMID); err != nil {
			return nil, err
		}
		q.Set("vmid", strconv.Itoa(o.VMID))
	}
	for _, f := range []struct{ name, v string }{{"typefilter", o.TypeFilter}, {"userfilter", o.UserFilter}} {
		if f.v == "" {
			continue
		}
		if len(f.v) > 128 || !upidText(f.v) {
			return nil, fmt.Errorf("%w: %s %q", ErrInvalidArgument, f.name, truncate(f.v, 40))
		}
		q.Set(f.name, f.v)
	}
	if o.StatusFilter != "" {
		for _, s := range strings.Split(o.StatusFilter, ",") {
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "ok", "warning", "error", "unknown":
			default:
				return nil, fmt.Errorf("%w: status filter %q", ErrInvalidArgument, truncate(o.StatusFilter, 40))
			}
		}
		q.Set("statusfilter", o.StatusFilter)
	}
	if o.Errors {
		q.Set("errors", "1")
	}
	if !o.Since.IsZero() {
		q.Set("since", strconv.FormatInt(o.Since.Unix(), 10))
	}
	if !o.Until.IsZero() {
		q.Set("until", strconv.FormatInt(o.Until.Unix(), 10))
	}
	if o.Start < 0 || o.Limit < 0 {
		return nil, fmt.Errorf("%w: negative start or limit", ErrInvalidArgument)
	}
	if o.Start > 0 {
		q.Set("start", strconv.Itoa(o.Start))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q, nil
}

// ClusterTasks reads the cluster's recent tasks (/cluster/tasks).
func (c *Client) ClusterTasks(ctx context.Context) ([]TaskListEntry, error) {
	return c.taskList(ctx, pathClusterTasks, nil)
}

func (c *Client) taskList(ctx context.Context, p apiPath, q url.Values) ([]TaskListEntry, error) {
	var w []struct {
		UPID      flexString `json:"upid"`
		User      flexString `json:"user"`
		TokenID   flexString `json:"tokenid"`
		Status    flexString `json:"status"`
		EndTime   flexInt    `json:"endtime"`
		StartTime flexInt    `json:"starttime"`
	}
	if _, err := c.get(ctx, p, q, limitLarge, &w); err != nil {
		return nil, err
	}
	out := make([]TaskListEntry, 0, len(w))
	for _, e := range w {
		u, err := ParseUPID(string(e.UPID))
		if err != nil {
			// PVE lists only UPIDs it made; skip rather than fail the list.
			c.log.Warn("pve: task list holds a bad UPID; skipped", "path", p.escaped, "err", err)
			continue
		}
		t := TaskListEntry{
			UPID: u, Node: u.Node, Type: u.Type, ID: u.ID, StartTime: u.StartTime,
			User: string(e.User), TokenID: string(e.TokenID), Status: cleanText(string(e.Status)),
		}
		if t.User == "" {
			t.User, t.TokenID = splitTaskUser(u.User)
		}
		if e.EndTime > 0 {
			t.EndTime = time.Unix(int64(e.EndTime), 0).UTC()
		}
		out = append(out, t)
	}
	return out, nil
}

// StopTask asks the task's node to stop it (DELETE /nodes/{node}/tasks/{upid}).
// Like every write it is never repeated; if its outcome is unknown the error
// is an *AmbiguousError (read the task's status to learn more).
func (c *Client) StopTask(ctx context.Context, upid UPID) error {
	p, err := taskPath(upid, "")
	if err != nil {
		return fmt.Errorf("pve: %w", err)
	}
	_, err = c.do(ctx, call{method: http.MethodDelete, path: p, limit: limitDefault})
	var amb *ambiguity
	if errors.As(err, &amb) {
		return &AmbiguousError{Method: http.MethodDelete, Path: p.escaped, Endpoint: amb.ep.base, Node: upid.Node, Err: amb.cause}
	}
	return err
}

// WaitTask polls the task's status every interval (at least 100ms; 0 means 1s)
// until it stops or ctx ends. Transient failures (ErrUnavailable, ErrTimeout,
// ErrNodeOffline) are polled through; other errors end the wait. When ctx ends
// first it returns the last status read and an error wrapping ctx's error
// (and, if no status could be read at all, the last PVE error too).
func (c *Client) WaitTask(ctx context.Context, upid UPID, interval time.Duration) (TaskStatus, error) {
	if interval == 0 {
		interval = time.Second
	}
	interval = max(interval, 100*time.Millisecond)
	var last TaskStatus
	var lastErr error
	for {
		st, err := c.TaskStatus(ctx, upid)
		switch {
		case err == nil:
			last, lastErr = st, nil
			if !st.Running() {
				return st, nil
			}
		case ctx.Err() != nil:
			// fall through to the ctx check below
		case errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNodeOffline):
			lastErr = err
			c.log.Debug("pve: task status unavailable, still waiting", "upid", upid.String(), "err", err)
		default:
			return last, err
		}
		if ctx.Err() != nil || c.sleep(ctx, interval) != nil {
			switch {
			case lastErr != nil && last.Status == "":
				// Never read a status: PVE's failure is the story.
				return last, fmt.Errorf("pve: wait for task %s: %w (last error: %w)", upid, ctx.Err(), lastErr)
			case lastErr != nil:
				return last, fmt.Errorf("pve: wait for task %s: %w (last error: %v)", upid, ctx.Err(), lastErr)
			}
			return last, fmt.Errorf("pve: wait for task %s: %w", upid, ctx.Err())
		}
	}
}
