package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
)

func opEvent(status string, items ...client.OperationItem) string {
	o := client.Operation{ID: 7, Kind: "evacuate", Node: ptr("pve1"), Status: status, Items: items}
	for _, it := range items {
		switch it.State {
		case "ok":
			o.Counts.OK++
		case "running":
			o.Counts.Running++
		case "pending":
			o.Counts.Pending++
		}
		o.Counts.Total++
	}
	b, _ := json.Marshal(o)
	return "event: operation\ndata: " + string(b) + "\n\n"
}

func migrating(vmid int64, state string, percent float64) client.OperationItem {
	it := client.OperationItem{VMID: vmid, Name: fmt.Sprintf("vm%d", vmid), Node: "pve1", Target: ptr("pve2"), Action: "migrate", Online: true, State: state}
	if state != "pending" {
		it.Progress = &client.Progress{Percent: percent, Phase: "memory", BytesPerSecond: 300 << 20}
	}
	return it
}

// TestWatchOperation: an operation's stream, ended by vmgate's shutdown, is
// opened again; the plain view prints a line when an item starts, per tenth of a
// migration, and when it ends; the last snapshot is the final one.
func TestWatchOperation(t *testing.T) {
	var conns atomic.Int32
	srv := newSSEServer(t, func(w http.ResponseWriter, n int32) {
		switch n {
		case 1:
			fmt.Fprint(w, opEvent("running", migrating(100, "running", 5), migrating(101, "pending", 0)))
			fmt.Fprint(w, opEvent("running", migrating(100, "running", 55), migrating(101, "pending", 0)))
			fmt.Fprint(w, "event: shutdown\nretry: 20\ndata: {\"reason\":\"shutdown\",\"retryMs\":20}\n\n")
		default:
			fmt.Fprint(w, opEvent("running", migrating(100, "ok", 100), migrating(101, "running", 20)))
			fmt.Fprint(w, opEvent("done", migrating(100, "ok", 100), migrating(101, "ok", 100)))
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
		}
	}, &conns)
	var out syncBuffer
	view := NewOperationView(&out, false)
	c := client.New(srv, client.WithToken("tok"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op, err := WatchOperation(ctx, c, 7, WatchOptions{}, view.Notice, view.Show)
	if err != nil || op.Status != "done" || conns.Load() != 2 {
		t.Fatalf("watch: %+v %v after %d connections", op, err, conns.Load())
	}
	got := out.String()
	for _, want := range []string{
		"started  VM 100 vm100 pve1 → pve2\n",
		"         VM 100 vm100 pve1 → pve2:   5% memory, 300.0 MiB/s\n",
		"         VM 100 vm100 pve1 → pve2:  55% memory, 300.0 MiB/s\n",
		NoticeRestarted + "\n", NoticeReconnected + "\n",
		"ok       VM 100 vm100 pve1 → pve2\n",
		"started  VM 101 vm101 pve1 → pve2\n",
		"ok       VM 101 vm101 pve1 → pve2\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the view lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "ok       VM 100"); n != 1 {
		t.Errorf("VM 100's end printed %d times:\n%s", n, got)
	}
	if s := OperationSummary(op); s != "operation 7 (evacuation of pve1): done — 2 ok, 0 failed, 0 skipped of 2" {
		t.Errorf("summary %q", s)
	}
}

// TestOperationViewTerminal: on a terminal the running items and the counts are
// one block redrawn in place; an item's end is printed once above it.
func TestOperationViewTerminal(t *testing.T) {
	var out strings.Builder
	v := NewOperationView(&out, true)
	v.Show(client.Operation{Status: "running", Counts: client.OperationCounts{Total: 2, Running: 1, Pending: 1},
		Items: []client.OperationItem{migrating(100, "running", 40), migrating(101, "pending", 0)}})
	first := out.String()
	if strings.Contains(first, "\x1b[") || !strings.Contains(first, "running  VM 100 vm100 pve1 → pve2  40% memory") ||
		!strings.Contains(first, "running: 0 ok, 1 running, 1 waiting") {
		t.Fatalf("first drawing %q", first)
	}
	out.Reset()
	v.Show(client.Operation{Status: "running", Counts: client.OperationCounts{Total: 2, OK: 1, Running: 1},
		Items: []client.OperationItem{migrating(100, "ok", 100), migrating(101, "running", 10)}})
	second := out.String()
	if !strings.HasPrefix(second, strings.Repeat("\x1b[1A\x1b[2K", 2)) || !strings.Contains(second, "ok       VM 100") ||
		!strings.Contains(second, "running  VM 101") {
		t.Fatalf("second drawing %q", second)
	}
}

// TestSkipNotesWrap: a skipped guest's reason, cut short in the plan's table,
// is told whole below it, in the CLI's words, in lines that fit the table's width.
func TestSkipNotesWrap(t *testing.T) {
	why := "local disk needs withLocalDisks=true: local-lvm:vm-102-disk-0 (scsi0), local-lvm:vm-102-disk-1 (scsi1), local-lvm:vm-102-disk-2 (scsi2)"
	notes := SkipNotes(client.Plan{Items: []client.OperationItem{
		{VMID: 102, State: "skipped", Error: &why}, {VMID: 100, State: "pending"}}})
	all := strings.Join(notes, "\n")
	if len(notes) < 2 || !strings.HasPrefix(notes[0], "VM 102 skipped: local disk needs --with-local-disks: ") ||
		!strings.Contains(all, "local-lvm:vm-102-disk-2 (scsi2)") {
		t.Fatalf("notes:\n%s", all)
	}
	for _, n := range notes {
		if len([]rune(n)) > TableWidth {
			t.Errorf("a note of %d columns: %q", len([]rune(n)), n)
		}
	}
}
