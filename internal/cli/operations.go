package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Operations on many VMs (issue 13 (docs/history.md)): evacuating a node, bulk power actions, and
// following them.

// OperationsPath lists the operations.
const OperationsPath = "/api/v1/pve/operations"

// OperationPath is the API path of an operation.
func OperationPath(id int64) string { return OperationsPath + "/" + strconv.FormatInt(id, 10) }

// Operation is an operation as the API shows it.
type Operation struct {
	ID              int64           `json:"id"`
	Kind            string          `json:"kind"`
	ClusterID       int64           `json:"clusterId"`
	Node            string          `json:"node"`
	Status          string          `json:"status"`
	CreatedBy       string          `json:"createdBy"`
	CreatedAt       time.Time       `json:"createdAt"`
	StartedAt       *time.Time      `json:"startedAt"`
	EndedAt         *time.Time      `json:"endedAt"`
	MaxParallel     int             `json:"maxParallel"`
	CancelRequested bool            `json:"cancelRequested"`
	Abort           bool            `json:"abort"`
	Counts          OperationCounts `json:"counts"`
	Items           []OperationItem `json:"items"`
	// Raw is the operation as vmgate sent it (WatchOperation's last snapshot),
	// for -o json: re-encoding the fields above would turn its nulls into "".
	Raw json.RawMessage `json:"-"`
}

// Finished reports whether the operation has ended.
func (o Operation) Finished() bool { return o.Status != "planned" && o.Status != "running" }

// OperationCounts counts an operation's items by state.
type OperationCounts struct {
	Total   int `json:"total"`
	Pending int `json:"pending"`
	Running int `json:"running"`
	OK      int `json:"ok"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

// OperationItem is one VM of an operation or a plan.
type OperationItem struct {
	VMID     int64     `json:"vmid"`
	Name     string    `json:"name"`
	Node     string    `json:"node"`
	Target   string    `json:"target"`
	Action   string    `json:"action"`
	Online   bool      `json:"online"`
	HA       bool      `json:"ha"`
	MemBytes int64     `json:"memBytes"`
	State    string    `json:"state"`
	TaskID   string    `json:"taskId"`
	Error    string    `json:"error"`
	Progress *Progress `json:"progress"`
}

// Plan is what an operation does, per VM, and an evacuation's targets.
type Plan struct {
	Items   []OperationItem `json:"items"`
	Targets []PlanTarget    `json:"targets"`
}

// PlanTarget is a node an evacuation may move VMs to.
type PlanTarget struct {
	Node       string `json:"node"`
	Status     string `json:"status"`
	Eligible   bool   `json:"eligible"`
	Mem        int64  `json:"mem"`
	MaxMem     int64  `json:"maxMem"`
	PlannedMem int64  `json:"plannedMem"`
	VMs        int    `json:"vms"`
}

// Launched is the answer of an evacuation or a bulk action: the operation's id
// (0 for a dry run) and its plan, with the raw data for -o json.
type Launched struct {
	OperationID int64           `json:"operationId"`
	Plan        Plan            `json:"plan"`
	Raw         json.RawMessage `json:"-"`
}

// Launch POSTs an evacuation or a bulk action (path) with body.
func (c *Client) Launch(ctx context.Context, path string, body any) (Launched, error) {
	var raw json.RawMessage
	if _, err := c.Do(ctx, http.MethodPost, path, nil, body, &raw); err != nil {
		return Launched{}, err
	}
	l := Launched{Raw: raw}
	if err := json.Unmarshal(raw, &l); err != nil {
		return Launched{}, err
	}
	return l, nil
}

// Operation reads an operation, with its raw data.
func (c *Client) Operation(ctx context.Context, id int64) (Operation, json.RawMessage, error) {
	var raw json.RawMessage
	if _, err := c.Do(ctx, http.MethodGet, OperationPath(id), nil, nil, &raw); err != nil {
		return Operation{}, nil, err
	}
	var o Operation
	err := json.Unmarshal(raw, &o)
	return o, raw, err
}

// CancelOperation cancels an operation; with abort its running migrations are
// stopped too.
func (c *Client) CancelOperation(ctx context.Context, id int64, abort bool) (Operation, error) {
	q := map[string][]string{}
	if abort {
		q["abort"] = []string{"true"}
	}
	var o Operation
	_, err := c.Do(ctx, http.MethodDelete, OperationPath(id), q, nil, &o)
	return o, err
}

// WatchOperation follows an operation to its end on its event stream, calling
// each with every snapshot, and reconnects as Watch does when vmgate goes away;
// it returns the last snapshot.
func (c *Client) WatchOperation(ctx context.Context, id int64, o WatchOptions, notice func(string), each func(Operation)) (Operation, error) {
	var last Operation
	err := c.follow(ctx, OperationPath(id)+"/events", "operation", o, "vmgate op watch "+strconv.FormatInt(id, 10), notice,
		func(data []byte) (bool, error) {
			var op Operation
			if err := json.Unmarshal(data, &op); err != nil {
				return false, fmt.Errorf("operation events: %w", err)
			}
			op.Raw = append(json.RawMessage(nil), data...)
			last = op
			each(op)
			return op.Finished(), nil
		})
	return last, err
}

// PlanTable is a plan, one row per VM: where it goes, or why it is skipped.
func PlanTable(p Plan) TableOf {
	t := TableOf{Header: []string{"VMID", "NAME", "NODE", "ACTION", "TARGET", "MEM", "PLAN", "REASON"}}
	for _, it := range p.Items {
		action := it.Action
		if it.Action == "migrate" {
			action = "migrate-offline"
			if it.Online {
				action = "migrate-live"
			}
			if it.HA {
				action += "(HA)"
			}
		}
		plan := "go"
		if it.State == "skipped" {
			plan = "skip"
		}
		t.Add(strconv.FormatInt(it.VMID, 10), it.Name, it.Node, action, it.Target, Size(it.MemBytes), plan, it.Error)
	}
	return t
}

// TargetsTable is an evacuation plan's targets: memory now and after the plan.
func TargetsTable(p Plan) TableOf {
	t := TableOf{Header: []string{"TARGET", "STATUS", "ELIGIBLE", "MEM-NOW", "MEM-AFTER", "MAXMEM", "VMS"}}
	for _, tg := range p.Targets {
		t.Add(tg.Node, tg.Status, strconv.FormatBool(tg.Eligible), percentOf(tg.Mem, tg.MaxMem),
			percentOf(tg.Mem+tg.PlannedMem, tg.MaxMem), Size(tg.MaxMem), strconv.Itoa(tg.VMs))
	}
	return t
}

func percentOf(part, whole int64) string {
	if whole <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f%%", float64(part)*100/float64(whole))
}

// OperationsTable lists operations.
func OperationsTable(list []Operation) TableOf {
	t := TableOf{Header: []string{"ID", "KIND", "CLUSTER", "NODE", "STATUS", "OK", "FAILED", "SKIPPED", "TOTAL", "CREATED", "BY"}}
	for _, o := range list {
		c := o.Counts
		t.Add(strconv.FormatInt(o.ID, 10), o.Kind, strconv.FormatInt(o.ClusterID, 10), o.Node, o.Status, strconv.Itoa(c.OK),
			strconv.Itoa(c.Failed), strconv.Itoa(c.Skipped), strconv.Itoa(c.Total), Stamp(o.CreatedAt), o.CreatedBy)
	}
	return t
}

// ItemsTable is an operation's items: state, target, progress, task, reason.
func ItemsTable(o Operation) TableOf {
	t := TableOf{Header: []string{"VMID", "NAME", "NODE", "ACTION", "TARGET", "STATE", "PROGRESS", "TASK", "REASON"}}
	for _, it := range o.Items {
		t.Add(strconv.FormatInt(it.VMID, 10), it.Name, it.Node, it.Action, it.Target, it.State, itemProgress(it), it.TaskID, it.Error)
	}
	return t
}

func itemProgress(it OperationItem) string {
	if it.Progress == nil || it.Action != "migrate" {
		return ""
	}
	return fmt.Sprintf("%.0f%%", it.Progress.Percent)
}

// OperationSummary is an operation's last line: its status and counts, and how
// long it took.
func OperationSummary(o Operation) string {
	c := o.Counts
	what := o.Kind
	if o.Kind == "evacuate" {
		what = "evacuation of " + o.Node
	}
	line := fmt.Sprintf("operation %d (%s): %s — %d ok, %d failed, %d skipped of %d", o.ID, what, o.Status, c.OK, c.Failed,
		c.Skipped, c.Total)
	if o.StartedAt != nil && o.EndedAt != nil {
		line += " in " + HumanDuration(o.EndedAt.Sub(*o.StartedAt))
	}
	return line
}

// OperationView draws an operation as it goes: on a terminal one line per running
// item and a line of counts, redrawn in place, each finished item printed once
// above them; otherwise a line when an item starts, per tenth of a migration,
// and when it ends.
type OperationView struct {
	out      io.Writer
	terminal bool
	drawn    int              // lines of the redrawn block on the terminal
	state    map[int64]string // each item's last state printed
	step     map[int64]int    // each migration's last tenth printed
	seen     map[int64]bool   // items whose end was printed
}

// NewOperationView draws on out; terminal redraws in place.
func NewOperationView(out io.Writer, terminal bool) *OperationView {
	return &OperationView{out: out, terminal: terminal, state: map[int64]string{}, step: map[int64]int{}, seen: map[int64]bool{}}
}

// itemLine describes an item for a progress line.
func itemLine(it OperationItem) string {
	what := "VM " + strconv.FormatInt(it.VMID, 10)
	if it.Name != "" {
		what += " " + it.Name
	}
	switch {
	case it.Target != "":
		what += " " + it.Node + " → " + it.Target
	case it.Action != "":
		what += " " + it.Action
	}
	return what
}

func progressText(p *Progress) string {
	if p == nil {
		return ""
	}
	s := fmt.Sprintf("%3.0f%% %s", p.Percent, p.Phase)
	if p.BytesPerSecond > 0 {
		s += ", " + HumanBytes(p.BytesPerSecond) + "/s"
	}
	return s
}

// endLine is the line of an item that ended.
func endLine(it OperationItem) string {
	switch it.State {
	case "ok":
		return fmt.Sprintf("ok       %s", itemLine(it))
	case "failed":
		return fmt.Sprintf("failed   %s: %s", itemLine(it), it.Error)
	}
	return fmt.Sprintf("skipped  %s: %s", itemLine(it), it.Error)
}

// Shown marks the plan's skipped items as told already (the plan was printed).
func (v *OperationView) Shown(p Plan) {
	for _, it := range p.Items {
		if it.State == "skipped" {
			v.seen[it.VMID] = true
		}
	}
}

// Show draws a snapshot.
func (v *OperationView) Show(o Operation) {
	if v.terminal {
		v.clear()
	}
	for _, it := range o.Items {
		prev := v.state[it.VMID]
		v.state[it.VMID] = it.State
		switch it.State {
		case "ok", "failed", "skipped":
			if !v.seen[it.VMID] {
				writeLine(v.out, endLine(it))
			}
			v.seen[it.VMID] = true
		case "running":
			if v.terminal {
				continue
			}
			if prev != "running" {
				writeLine(v.out, "started  "+itemLine(it))
			}
			if it.Progress != nil && it.Action == "migrate" {
				step := int(it.Progress.Percent / 10)
				if last, ok := v.step[it.VMID]; (!ok || step != last) && it.Progress.Percent > 0 {
					v.step[it.VMID] = step
					writeLine(v.out, fmt.Sprintf("         %s: %s", itemLine(it), progressText(it.Progress)))
				}
			}
		}
	}
	if v.terminal {
		var lines []string
		for _, it := range o.Items {
			if it.State == "running" {
				lines = append(lines, fmt.Sprintf("running  %s %s", itemLine(it), progressText(it.Progress)))
			}
		}
		c := o.Counts
		lines = append(lines, fmt.Sprintf("%s: %d ok, %d running, %d waiting, %d failed, %d skipped of %d", o.Status, c.OK,
			c.Running, c.Pending, c.Failed, c.Skipped, c.Total))
		for _, l := range lines {
			writeLine(v.out, l)
		}
		v.drawn = len(lines)
	}
}

// Notice prints a line of its own (reconnecting, ...).
func (v *OperationView) Notice(msg string) {
	if v.terminal {
		v.clear()
	}
	writeLine(v.out, msg)
}

// Finish leaves the last drawing as it is.
func (v *OperationView) Finish() { v.drawn = 0 }

// clear erases the redrawn block (cursor up, erase each line).
func (v *OperationView) clear() {
	if v.drawn == 0 {
		return
	}
	fmt.Fprint(v.out, strings.Repeat("\x1b[1A\x1b[2K", v.drawn))
	v.drawn = 0
}
