package pvesim

import (
	"fmt"
	"net/http"
	"strings"
)

// taskEntry is a task as the task lists show it.
type taskEntry struct {
	UPID      string `json:"upid"`
	Node      string `json:"node"`
	PID       *int64 `json:"pid,omitempty"`
	PStart    *int64 `json:"pstart,omitempty"`
	StartTime int64  `json:"starttime"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	User      string `json:"user"`
	TokenID   string `json:"tokenid,omitempty"`
	EndTime   int64  `json:"endtime,omitempty"`
	Status    string `json:"status,omitempty"`
	Saved     any    `json:"saved,omitempty"`
}

// splitUser is Tasks.pm's convert_token_task.
func splitUser(e *taskEntry) {
	if owner, tok, ok := splitTokenID(e.User); ok {
		e.User, e.TokenID = owner, tok
	}
}

func entryOf(t *task) taskEntry {
	pid, pstart := t.pid, t.pstart
	e := taskEntry{UPID: t.upid, Node: t.node, PID: &pid, PStart: &pstart, StartTime: t.start.Unix(), Type: t.typ, ID: t.id, User: t.user}
	if !t.running {
		e.EndTime, e.Status = t.end.Unix(), t.exit
	}
	return e
}

// hNodeTasks is GET /nodes/{node}/tasks: running tasks from the active list,
// then finished ones from the index, newest first, filtered as Tasks.pm does.
func hNodeTasks(r *request) response {
	c := r.c
	start, _ := r.integer("start")
	limit := int64(50)
	if l, ok := r.integer("limit"); ok {
		limit = l
	}
	userfilter, _ := r.param("userfilter")
	typefilter, _ := r.param("typefilter")
	vmid, hasVMID := r.param("vmid")
	errorsOnly := r.flag("errors")
	source, _ := r.param("source")
	if source == "" {
		source = "archive"
	}
	since, hasSince := r.integer("since")
	until, hasUntil := r.integer("until")
	statusOK := map[string]bool{"ok": true, "warning": true, "error": true, "unknown": true}
	if sf, ok := r.param("statusfilter"); ok && !errorsOnly {
		statusOK = map[string]bool{}
		for _, f := range splitList(sf) {
			statusOK[strings.ToLower(f)] = true
		}
	} else if errorsOnly {
		statusOK["ok"] = false
	}

	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[r.node]
	auditor := c.hasPriv(r.who, "/nodes/"+r.node, "Sys.Audit")
	var count int64
	res := []taskEntry{}
	keep := func(e taskEntry, owner bool) bool {
		if userfilter != "" && !strings.Contains(strings.ToLower(e.User), strings.ToLower(userfilter)) {
			return false
		}
		if !auditor && !owner {
			return false
		}
		if typefilter != "" && e.Type != typefilter {
			return false
		}
		if hasVMID && vmid != "" && vmid != "0" && e.ID != vmid {
			return false
		}
		if hasSince && e.StartTime < since {
			return false
		}
		if hasUntil && e.StartTime > until {
			return false
		}
		if !statusOK[normalizeStatusType(e.Status)] {
			return false
		}
		count++
		if count-1 < start || limit <= 0 {
			return false
		}
		return true
	}
	if source == "active" || source == "all" {
		for i := len(n.active) - 1; i >= 0; i-- {
			t := n.active[i]
			e := entryOf(t)
			// Active entries keep the full token id as user (no split).
			if keep(e, r.who.user == t.user) {
				e.Status, e.Saved = "RUNNING", "0"
				res = append(res, e)
				limit--
			}
		}
	}
	if source != "active" {
		for i := len(n.archive) - 1; i >= 0; i-- {
			t := n.archive[i]
			e := entryOf(t)
			splitUser(&e)
			if keep(e, taskOwnedBy(t.user, r.who.user)) {
				res = append(res, e)
				limit--
			}
		}
	}
	resp := success(res)
	resp.total = int(count)
	return resp
}

// hClusterTasks is GET /cluster/tasks: each node's broadcast list, i.e. its
// running tasks and its latest finished ones (25 entries per node).
func hClusterTasks(r *request) response {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	all := c.hasPriv(r.who, "/", "Sys.Audit")
	res := []taskEntry{}
	add := func(e taskEntry) {
		splitUser(&e)
		if all || e.User == r.who.user {
			res = append(res, e)
		}
	}
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		room := 25
		for i := len(n.active) - 1; i >= 0; i-- {
			e := entryOf(n.active[i])
			e.PStart = nil
			add(e)
			room--
		}
		for i := len(n.archive) - 1; i >= 0 && room > 0; i-- {
			e := entryOf(n.archive[i])
			e.PID, e.PStart, e.Saved = nil, nil, 1
			add(e)
			room--
		}
	}
	return success(res)
}

func hTaskIndex(r *request) response {
	return success([]map[string]string{{"name": "log"}, {"name": "status"}})
}

// lookupTask finds a task whose log would be on the handling node: a UPID
// that does not parse is a 400, one from elsewhere "no such task".
func (r *request) lookupTask() (*task, upidInfo, *response) {
	upid, _ := r.param("upid")
	info, ok := decodeUPID(upid)
	if !ok {
		resp := paramFail(map[string]string{"upid": "unable to parse worker upid"})
		return nil, info, &resp
	}
	t := r.c.tasks[upid]
	if t == nil || t.node != r.node {
		return nil, info, nil
	}
	return t, info, nil
}

// mayRead is the owner-or-privilege check of the task methods.
func (r *request) mayRead(taskUser, priv string) *response {
	if taskOwnedBy(taskUser, r.who.user) || r.c.hasPriv(r.who, "/nodes/"+r.node, priv) {
		return nil
	}
	resp := fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (/nodes/%s, %s)\n", r.node, priv))
	return &resp
}

// hTaskStatus is GET .../tasks/{upid}/status. It has no endtime.
func hTaskStatus(r *request) response {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	t, info, bad := r.lookupTask()
	if bad != nil {
		return *bad
	}
	if t == nil {
		return paramFail(map[string]string{"upid": "no such task"})
	}
	if deny := r.mayRead(info.user, "Sys.Audit"); deny != nil {
		return *deny
	}
	st := map[string]any{
		"upid": t.upid, "node": info.node, "pid": info.pid, "pstart": info.pstart, "starttime": info.starttime,
		"type": info.typ, "id": info.id, "user": info.user, "status": "running",
	}
	if owner, tok, isToken := splitTokenID(info.user); isToken {
		st["user"], st["tokenid"] = owner, tok
	}
	if !t.running {
		st["status"] = "stopped"
		st["exitstatus"] = t.exit
	}
	return success(st)
}

// hTaskLog is GET .../tasks/{upid}/log (PVE::Tools::dump_logfile).
func hTaskLog(r *request) response {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	t, info, bad := r.lookupTask()
	if bad != nil {
		return *bad
	}
	if deny := r.mayRead(info.user, "Sys.Audit"); deny != nil {
		return *deny
	}
	if r.flag("download") {
		if _, ok := r.param("start"); ok {
			return die("'download' cannot be used together with 'start' or 'limit' parameters")
		}
		if _, ok := r.param("limit"); ok {
			return die("'download' cannot be used together with 'start' or 'limit' parameters")
		}
		if t == nil {
			return die(fmt.Sprintf("Could not open file '%s' - No such file or directory", logPath(r.params["upid"].s, info)))
		}
		body := strings.Join(t.lines, "\n")
		if len(t.lines) > 0 {
			body += "\n"
		}
		name := fmt.Sprintf("task-%s-%s-%s.log", info.node, info.typ, t.start.UTC().Format("2006-01-02T15:04:05Z"))
		return response{status: http.StatusOK, file: []byte(body), fileName: name}
	}
	if t == nil {
		resp := success([]map[string]any{{"n": 1, "t": "unable to open file - No such file or directory"}})
		resp.total = 1
		return resp
	}
	start, _ := r.integer("start")
	limit := int64(50)
	if l, ok := r.integer("limit"); ok {
		limit = l
	}
	type line struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	lines := []line{}
	all := limit == 0
	for i, text := range t.lines {
		if int64(i) < start {
			continue
		}
		if !all {
			if limit <= 0 {
				break
			}
			limit--
		}
		lines = append(lines, line{N: i + 1, T: text})
	}
	total := len(t.lines)
	if total == 0 {
		total = 1
		lines = append(lines, line{N: 1, T: "no content"})
	}
	resp := success(lines)
	resp.total = total
	return resp
}

func logPath(upid string, info upidInfo) string {
	hex := fmt.Sprintf("%08X", info.starttime)
	return "/var/log/pve/tasks/" + hex[7:8] + "/" + upid
}

// hTaskStop is DELETE .../tasks/{upid}: kill the worker.
func hTaskStop(r *request) response {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, info, bad := r.lookupTask()
	if bad != nil {
		return *bad
	}
	if t == nil {
		return paramFail(map[string]string{"upid": "no such task"})
	}
	if deny := r.mayRead(info.user, "Sys.Modify"); deny != nil {
		return *deny
	}
	c.kill(t, r.now)
	return success(nil)
}
