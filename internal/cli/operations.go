package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vmgate/vmgate/client"
)

// Operations on many VMs (issue 13 (docs/history.md)): evacuating a node, bulk power actions, and
// following them.

// WatchOperation follows an operation to its end on its event stream, calling
// each with every snapshot, and reconnects as Watch does when vmgate goes away;
// it returns the last snapshot.
func WatchOperation(ctx context.Context, c *client.Client, id int64, o WatchOptions, notice func(string), each func(client.Operation)) (client.Operation, error) {
	var last client.Operation
	err := follow(ctx, o, "vmgate op watch "+strconv.FormatInt(id, 10), notice, func(ctx context.Context, seen func()) (client.StreamEnd, error) {
		return c.OperationEvents(ctx, id, func(op client.Operation) bool {
			seen()
			last = op
			each(op)
			return op.Finished()
		})
	})
	return last, err
}

// PlanTable is a plan, one row per guest: where it goes, or why it is skipped.
func PlanTable(p client.Plan) TableOf {
	t := TableOf{Header: []string{"VMID", "NAME", "NODE", "ACTION", "TARGET", "MEM", "PLAN", "REASON"},
		Flex: []string{"NAME", "NODE", "TARGET", "REASON"}}
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
		t.Add(strconv.FormatInt(it.VMID, 10), it.Name, it.Node, action, it.TargetNode(), Size(it.MemBytes), plan, it.Why())
	}
	return t
}

// SkipNotes are the reasons of a plan's skipped guests in full, a guest a
// paragraph wrapped to TableWidth: the plan's table cuts its REASON column short
// to fit, and the reason (which disk, which node) is what a person acts on.
func SkipNotes(p client.Plan) []string {
	var out []string
	for _, it := range p.Items {
		if it.State != "skipped" || it.Why() == "" {
			continue
		}
		out = append(out, Wrap(fmt.Sprintf("%s %d skipped: %s", it.Type.Noun(), it.VMID, CLIWords(it.Why())), TableWidth, "  ")...)
	}
	return out
}

// Wrap breaks s into lines of at most width runes at spaces, the lines after
// the first indented with indent; a word longer than a line stands alone.
func Wrap(s string, width int, indent string) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = indent + w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// TargetsTable is an evacuation plan's targets: memory now and after the plan.
func TargetsTable(p client.Plan) TableOf {
	t := TableOf{Header: []string{"TARGET", "STATUS", "ELIGIBLE", "MEM-NOW", "MEM-AFTER", "MAXMEM", "VMS"}, Flex: []string{"TARGET"}}
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

// OperationsTable lists operations: their items counted as OK/FAIL/SKIP/ALL,
// the cluster by name.
func OperationsTable(list []client.Operation, names ClusterNames) TableOf {
	t := TableOf{Header: []string{"ID", "KIND", "CLUSTER", "NODE", "STATUS", "OK/FAIL/SKIP/ALL", "CREATED", "BY"},
		Flex: []string{"CLUSTER", "NODE", "BY"}}
	for _, o := range list {
		c := o.Counts
		t.Add(strconv.FormatInt(o.ID, 10), o.Kind, names.Of(o.ClusterID), o.NodeName(), o.Status,
			fmt.Sprintf("%d/%d/%d/%d", c.OK, c.Failed, c.Skipped, c.Total), ShortStamp(o.CreatedAt), o.CreatedBy)
	}
	return t
}

// ItemsTable is an operation's items: state, target, progress, reason; -o wide
// adds each item's task.
func ItemsTable(o client.Operation) TableOf {
	t := TableOf{Header: []string{"VMID", "TYPE", "NAME", "NODE", "ACTION", "TARGET", "STATE", "PROGRESS", "TASK", "REASON"},
		Flex: []string{"NAME", "NODE", "TARGET", "REASON"}, WideOnly: []string{"TASK"}}
	for _, it := range o.Items {
		kind := KindWord(it.Type)
		if kind == "" {
			kind = "vm"
		}
		t.Add(strconv.FormatInt(it.VMID, 10), kind, it.Name, it.Node, it.Action, it.TargetNode(), it.State, itemProgress(it),
			it.UPID(), it.Why())
	}
	return t
}

func itemProgress(it client.OperationItem) string {
	if it.Progress == nil || it.Action != "migrate" {
		return ""
	}
	return fmt.Sprintf("%.0f%%", it.Progress.Percent)
}

// OperationSummary is an operation's last line: its status and counts, and how
// long it took.
func OperationSummary(o client.Operation) string {
	c := o.Counts
	what := o.Kind
	switch o.Kind {
	case "evacuate":
		what = "evacuation of " + o.NodeName()
	case "maintenance_enter":
		what = o.NodeName() + " entering maintenance"
	case "maintenance_leave":
		what = o.NodeName() + " leaving maintenance"
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
func itemLine(it client.OperationItem) string {
	what := it.Type.Noun() + " " + strconv.FormatInt(it.VMID, 10)
	if it.Name != "" {
		what += " " + it.Name
	}
	switch {
	case it.TargetNode() != "":
		what += " " + it.Node + " → " + it.TargetNode()
	case it.Action != "":
		what += " " + it.Action
	}
	return what
}

func progressText(p *client.Progress) string {
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
func endLine(it client.OperationItem) string {
	switch it.State {
	case "ok":
		return fmt.Sprintf("ok       %s", itemLine(it))
	case "failed":
		return fmt.Sprintf("failed   %s: %s", itemLine(it), it.Why())
	}
	return fmt.Sprintf("skipped  %s: %s", itemLine(it), it.Why())
}

// Shown marks the plan's skipped items as told already (the plan was printed).
func (v *OperationView) Shown(p client.Plan) {
	for _, it := range p.Items {
		if it.State == "skipped" {
			v.seen[it.VMID] = true
		}
	}
}

// Show draws a snapshot.
func (v *OperationView) Show(o client.Operation) {
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
