package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// PVE's tasks as vmgate follows them (tag tasks), and the operations on many
// guests (tag fleet-operations).

const (
	tasksPath      = "/api/v1/pve/tasks"
	operationsPath = "/api/v1/pve/operations"
)

// TaskPath is the API path of a task, by UPID or vmgate's task reference.
func TaskPath(taskID string) string { return "/api/v1/pve/task/" + url.PathEscape(taskID) }

func operationPath(opID int64) string { return operationsPath + "/" + id(opID) }

// TaskQuery tunes a task read.
type TaskQuery struct {
	// ClusterID names the cluster of a task vmgate did not start (0 otherwise).
	ClusterID int64
	// Wait > 0 long-polls: the answer comes when the task ends or after Wait s.
	Wait int
}

func (q TaskQuery) values() url.Values {
	v := url.Values{}
	if q.ClusterID > 0 {
		v.Set("clusterId", id(q.ClusterID))
	}
	if q.Wait > 0 {
		v.Set("wait", strconv.Itoa(q.Wait))
	}
	return v
}

// Task reads a task by its UPID or vmgate's task reference.
func (c *Client) Task(ctx context.Context, taskID string, q TaskQuery) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodGet, TaskPath(taskID), q.values(), nil, &t)
	return t, err
}

// AbortTask stops a running task as PVE's own Stop does (the operator grant on
// its cluster). The answer is the task as it was when PVE was asked: PVE ends it
// a moment later with what it writes ("migration aborted", "received
// interrupt"), which Task with Wait reads. clusterID names the cluster of a task
// vmgate did not start (0 otherwise). An ended task is a 409 task_finished.
func (c *Client) AbortTask(ctx context.Context, taskID string, clusterID int64) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodDelete, TaskPath(taskID), TaskQuery{ClusterID: clusterID}.values(), nil, &t)
	return t, err
}

// TaskLogPage reads limit lines of a task's log from line start (0-based).
func (c *Client) TaskLogPage(ctx context.Context, taskID string, clusterID int64, start, limit int) (TaskLog, error) {
	q := TaskQuery{ClusterID: clusterID}.values()
	q.Set("start", strconv.Itoa(start))
	q.Set("limit", strconv.Itoa(limit))
	var l TaskLog
	_, err := c.do(ctx, http.MethodGet, TaskPath(taskID)+"/log", q, nil, &l)
	return l, err
}

// TaskLog reads a task's whole log, in pages of 5000 lines (the API's most).
func (c *Client) TaskLog(ctx context.Context, taskID string, clusterID int64) ([]TaskLogLine, error) {
	const page = 5000
	var all []TaskLogLine
	for start := 0; ; {
		l, err := c.TaskLogPage(ctx, taskID, clusterID, start, page)
		if err != nil {
			return nil, err
		}
		all = append(all, l.Lines...)
		start += len(l.Lines)
		if len(l.Lines) == 0 || start >= l.Total {
			return all, nil
		}
	}
}

// Tasks lists the tasks vmgate started, newest first.
func (c *Client) Tasks(ctx context.Context, f TaskFilter) (Listing[Task], error) {
	q := url.Values{}
	if f.ClusterID > 0 {
		q.Set("clusterId", id(f.ClusterID))
	}
	if f.VMID > 0 {
		q.Set("vmid", id(f.VMID))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return list[Task](ctx, c, tasksPath, q)
}

// TaskEvents reads a task's event stream once, calling each with every snapshot
// of the task until each says it is done (true), the stream ends, or ctx does.
// StreamEnd says how it ended; a caller that wants the task's end reconnects
// when it did not (internal/cli does, with backoff).
func (c *Client) TaskEvents(ctx context.Context, taskID string, each func(Task) (done bool)) (StreamEnd, error) {
	return c.events(ctx, TaskPath(taskID)+"/events", "task", func(data []byte) (bool, error) {
		var t Task
		if err := c.decode(data, &t); err != nil {
			return false, fmt.Errorf("task events: %w", err)
		}
		return each(t), nil
	})
}

// Evacuate moves every guest off a node as one operation (planned first; with
// DryRun only planned).
func (c *Client) Evacuate(ctx context.Context, clusterID int64, node string, req EvacuateRequest, opts ...CallOption) (Launched, error) {
	return c.launch(ctx, clusterPath(clusterID)+"/nodes/"+url.PathEscape(node)+"/evacuate", req, opts)
}

// Bulk runs a power action (start, stop, reboot, suspend, resume) on many guests
// of a cluster as one operation.
func (c *Client) Bulk(ctx context.Context, clusterID int64, action string, req BulkRequest, opts ...CallOption) (Launched, error) {
	return c.launch(ctx, clusterPath(clusterID)+"/bulk/"+url.PathEscape(action), req, opts)
}

func (c *Client) launch(ctx context.Context, path string, body any, opts []CallOption) (Launched, error) {
	var l Launched
	_, err := c.write(ctx, http.MethodPost, path, nil, body, &l, opts)
	return l, err
}

// Operation reads an operation and its items.
func (c *Client) Operation(ctx context.Context, opID int64) (Operation, error) {
	var o Operation
	_, err := c.do(ctx, http.MethodGet, operationPath(opID), nil, nil, &o)
	return o, err
}

// Operations lists operations, newest first (clusterID 0: every cluster's the
// caller may see; limit 0: the server's default).
func (c *Client) Operations(ctx context.Context, clusterID int64, limit int) (Listing[Operation], error) {
	q := url.Values{}
	if clusterID > 0 {
		q.Set("clusterId", id(clusterID))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return list[Operation](ctx, c, operationsPath, q)
}

// CancelOperation cancels an operation: nothing more starts; with abort its
// running migrations are stopped too.
func (c *Client) CancelOperation(ctx context.Context, opID int64, abort bool) (Operation, error) {
	q := url.Values{}
	if abort {
		q.Set("abort", "true")
	}
	var o Operation
	_, err := c.do(ctx, http.MethodDelete, operationPath(opID), q, nil, &o)
	return o, err
}

// OperationEvents reads an operation's event stream once, as TaskEvents does.
func (c *Client) OperationEvents(ctx context.Context, opID int64, each func(Operation) (done bool)) (StreamEnd, error) {
	return c.events(ctx, operationPath(opID)+"/events", "operation", func(data []byte) (bool, error) {
		var o Operation
		if err := c.decode(data, &o); err != nil {
			return false, fmt.Errorf("operation events: %w", err)
		}
		return each(o), nil
	})
}
