package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/vmgate/vmgate/client"
)

// Rolling maintenance (issue 20 (docs/history.md)): its plan as a table, node
// by node, and its progress as lines, one per step a node reaches and per log
// line, on stderr.

// RollingPlanTable is the plan of `vmgate cluster rolling-maintenance`: a row
// per node, in order.
func RollingPlanTable(p client.RollingPlan) TableOf {
	t := TableOf{Header: []string{"NODE", "MOVES", "STAYS", "UPDATES", "REBOOT", "WHY"}, Flex: []string{"NODE", "WHY"}}
	for _, n := range p.Nodes {
		moves, stays := 0, 0
		for _, it := range n.Drain.Items {
			if it.State == "skipped" {
				stays++
			} else {
				moves++
			}
		}
		reboot := "no"
		if n.Reboot {
			reboot = "yes"
		}
		t.Add(n.Node, strconv.Itoa(moves), strconv.Itoa(stays), strconv.Itoa(n.PendingUpdates), reboot, n.RebootWhy)
	}
	return t
}

// RollingView prints a rolling maintenance as it goes: each log line once.
type RollingView struct {
	out  io.Writer
	seen int
}

// NewRollingView prints on out.
func NewRollingView(out io.Writer) *RollingView { return &RollingView{out: out} }

// Show prints what is new in o's log.
func (v *RollingView) Show(o client.Operation) {
	if o.Rolling == nil {
		return
	}
	for _, l := range o.Rolling.Log[min(v.seen, len(o.Rolling.Log)):] {
		node := ""
		if l.Node != nil {
			node = *l.Node + ": "
		}
		fmt.Fprintf(v.out, "%s %s%s\n", ShortStamp(l.At), Escape(node), Escape(l.Text))
	}
	v.seen = len(o.Rolling.Log)
}

// Notice prints a message of the watch itself (a reconnect).
func (v *RollingView) Notice(msg string) { fmt.Fprintln(v.out, msg) }

// RollingSummary is a rolling maintenance's last line.
func RollingSummary(o client.Operation) string {
	done, total := 0, 0
	if o.Rolling != nil {
		total = len(o.Rolling.Nodes)
		for _, n := range o.Rolling.Nodes {
			if n.Step == "done" {
				done++
			}
		}
	}
	line := fmt.Sprintf("operation %d (rolling maintenance): %s — %d of %d nodes done", o.ID, o.Status, done, total)
	if o.StartedAt != nil && o.EndedAt != nil {
		line += " in " + HumanDuration(o.EndedAt.Sub(*o.StartedAt))
	}
	return line
}

// RollingNodesTable is `vmgate op show` of a rolling maintenance: a row per
// node with its step, its reboot and why, and its child operations.
func RollingNodesTable(o client.Operation) TableOf {
	t := TableOf{Header: []string{"NODE", "STEP", "DRAIN", "RESTORE", "REBOOT", "WHY"}, Flex: []string{"NODE", "WHY"}}
	if o.Rolling == nil {
		return t
	}
	id := func(p *int64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatInt(*p, 10)
	}
	for _, n := range o.Rolling.Nodes {
		reboot, why := "", ""
		if n.Reboot != nil {
			reboot = map[bool]string{true: "yes", false: "no"}[*n.Reboot]
		}
		if n.RebootWhy != nil {
			why = *n.RebootWhy
		}
		if n.Error != nil {
			why = *n.Error
		}
		t.Add(n.Node, n.Step, id(n.EnterOperation), id(n.LeaveOperation), reboot, why)
	}
	return t
}
