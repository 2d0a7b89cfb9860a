package httpapi

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The structs below are the documented shapes the hand encodings (answers.go)
// write; encoding/json's output for them is the reference.

// taskJSON is a task as docs/design.md §3.3 shows it. Every key is always present; what is
// not known (yet) is null.
type taskJSON struct {
	TaskID       *string       `json:"taskId"`
	TaskRef      *int64        `json:"taskRef"`
	ClusterID    int64         `json:"clusterId"`
	Node         string        `json:"node"`
	Type         string        `json:"type"`
	GuestKind    *string       `json:"guestKind"`
	Op           *string       `json:"op"`
	IsMigration  bool          `json:"isMigration"`
	VMID         *int64        `json:"vmid"`
	PVEUser      *string       `json:"pveUser"`
	StartedBy    *string       `json:"startedBy"`
	Status       string        `json:"status"`
	ExitStatus   *string       `json:"exitStatus"`
	Result       string        `json:"result"`
	Error        *string       `json:"error"`
	StartTime    time.Time     `json:"startTime"`
	EndTime      *time.Time    `json:"endTime"`
	Target       *string       `json:"target"`
	Progress     *progressJSON `json:"progress"`
	FollowTaskID *string       `json:"followTaskId"`
	Stale        bool          `json:"stale"`
	StaleSince   *time.Time    `json:"staleSince"`
}

type progressJSON struct {
	Percent          float64 `json:"percent"`
	TransferredBytes int64   `json:"transferredBytes"`
	TotalBytes       int64   `json:"totalBytes"`
	BytesPerSecond   int64   `json:"bytesPerSecond"`
	Phase            string  `json:"phase"`
	DowntimeSeconds  *int64  `json:"downtimeSeconds"`
}

func strOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toTaskJSON(v vmops.TaskView) taskJSON {
	out := taskJSON{TaskID: strOrNull(v.TaskID), ClusterID: v.ClusterID, Node: v.Node, Type: v.Type,
		GuestKind: strOrNull(v.GuestKind()), Op: strOrNull(v.Op()), IsMigration: v.IsMigration(),
		PVEUser: strOrNull(v.PVEUser), StartedBy: strOrNull(v.StartedBy), Status: v.Status,
		ExitStatus: strOrNull(v.ExitStatus), Result: v.Result, Error: strOrNull(v.Error), StartTime: v.StartTime.UTC(),
		Target: strOrNull(v.Target), FollowTaskID: strOrNull(v.FollowTaskID), Stale: v.Stale}
	if v.VMID != 0 {
		id := v.VMID
		out.VMID = &id
	}
	if v.TaskRef != 0 {
		id := v.TaskRef
		out.TaskRef = &id
	}
	if v.Stale {
		since := v.StaleSince.UTC()
		out.StaleSince = &since
	}
	if v.Finished() && !v.EndTime.IsZero() {
		end := v.EndTime.UTC()
		out.EndTime = &end
	}
	if p := v.Progress; p != nil {
		out.Progress = &progressJSON{Percent: p.Percent, TransferredBytes: p.TransferredBytes, TotalBytes: p.TotalBytes,
			BytesPerSecond: p.BytesPerSecond, Phase: p.Phase, DowntimeSeconds: p.DowntimeSeconds}
	}
	return out
}

// vmStatusJSON is a VM's status as docs/design.md §3.2 shows it.
type vmStatusJSON struct {
	VMID      int64    `json:"vmid"`
	Node      string   `json:"node"`
	Name      string   `json:"name"`
	Type      string   `json:"type"` // qemu
	Status    string   `json:"status"`
	QMPStatus string   `json:"qmpStatus"`
	Lock      string   `json:"lock"`
	HA        haJSON   `json:"ha"`
	Uptime    int64    `json:"uptime"`
	CPUs      float64  `json:"cpus"`
	MaxMem    int64    `json:"maxMem"`
	MaxDisk   int64    `json:"maxDisk"`
	Tags      []string `json:"tags"`
	// Stale: PVE could not be asked; this is what vmgate last read, at StaleSince.
	Stale      bool       `json:"stale"`
	StaleSince *time.Time `json:"staleSince"`
}

// ctStatusJSON is a container's status as docs/design.md §3.2a shows it.
type ctStatusJSON struct {
	VMID       int64      `json:"vmid"`
	Node       string     `json:"node"`
	Name       string     `json:"name"`
	Type       string     `json:"type"` // lxc
	Status     string     `json:"status"`
	Lock       string     `json:"lock"`
	HA         haJSON     `json:"ha"`
	Uptime     int64      `json:"uptime"`
	CPUs       float64    `json:"cpus"`
	MaxMem     int64      `json:"maxMem"`
	MaxSwap    int64      `json:"maxSwap"`
	MaxDisk    int64      `json:"maxDisk"`
	Tags       []string   `json:"tags"`
	Stale      bool       `json:"stale"`
	StaleSince *time.Time `json:"staleSince"`
}

// guestJSON is a guest of a cluster's guest list (docs/design.md §3.4).
type guestJSON struct {
	VMID    int64    `json:"vmid"`
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	Status  string   `json:"status"`
	Lock    string   `json:"lock"`
	Tags    []string `json:"tags"`
	HAState string   `json:"haState"`
	Pool    string   `json:"pool"`
	MaxMem  int64    `json:"maxMem"`
	MaxCPU  float64  `json:"maxCpu"`
	Mem     int64    `json:"mem"`
	CPU     float64  `json:"cpu"`
	Uptime  int64    `json:"uptime"`
}

// fleetGuestJSON is a guest of the fleet's guest list: its cluster first.
type fleetGuestJSON struct {
	ClusterID   int64  `json:"clusterId"`
	ClusterName string `json:"clusterName"`
	guestJSON
}

type haJSON struct {
	Managed bool   `json:"managed"`
	State   string `json:"state,omitempty"`
}

// nodeJSON is a node as docs/design.md §3.4 shows it.
type nodeJSON struct {
	Node   string  `json:"node"`
	Status string  `json:"status"`
	CPU    float64 `json:"cpu"`
	MaxCPU int64   `json:"maxCpu"`
	Mem    int64   `json:"mem"`
	MaxMem int64   `json:"maxMem"`
	Uptime int64   `json:"uptime"`
	// Maintenance is null, or the node's maintenance mark.
	Maintenance *struct {
		Since       time.Time `json:"since"`
		By          string    `json:"by"`
		OperationID int64     `json:"operationId"`
	} `json:"maintenance"`
}

// vmJSON is a VM of a cluster's list as docs/design.md §3.4 shows it.
type vmJSON struct {
	VMID    int64    `json:"vmid"`
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	Status  string   `json:"status"`
	Lock    string   `json:"lock"`
	Tags    []string `json:"tags"`
	HAState string   `json:"haState"`
	MaxMem  int64    `json:"maxMem"`
	MaxCPU  float64  `json:"maxCpu"`
}

// awkward are strings encoding/json escapes in every way it knows.
var awkward = []string{"", "plain", `quote " and \\ backslash`, "<script>&amp;</script>", "tab\tnew\nline\rret\bbs\fff",
	"\x00\x01\x1f\x7f", "é ü 日本", "\u2028 and \u2029", "bad \xff utf-8 \xc3", "UPID:pve1:0001:0002:0003:qmstart:100:root@pam!t:"}

// TestHandEncodingMatchesEncodingJSON: each hand encoding writes byte for byte
// what encoding/json writes for the documented struct.
func TestHandEncodingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	marshal := func(v any) string {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	hand := func(a appender) string {
		t.Helper()
		b, err := encode(a)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	floats := []float64{0, 1, -1, 0.5, 42.1, 1e-7, 1.5e-9, 123456789, 1e21, 3.4e38, 1.0 / 3, math.SmallestNonzeroFloat64, -2e-7}
	start := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	for i, s := range awkward {
		f := floats[i%len(floats)]
		views := []vmops.TaskView{
			{TaskID: s, ClusterID: int64(i), Node: s, Type: s, PVEUser: s, Status: vmops.StatusRunning, Result: s, StartTime: start,
				Stale: i%2 == 1, StaleSince: start.Add(time.Second)},
			{TaskID: s, TaskRef: int64(i), VMID: 100 + int64(i), StartedBy: s, Status: vmops.StatusStopped, ExitStatus: s, Error: s, Target: s,
				StartTime: start, EndTime: start.Add(time.Duration(i) * time.Second), FollowTaskID: s,
				Progress: &vmops.Progress{Percent: f, TransferredBytes: int64(i), TotalBytes: 1 << 40, BytesPerSecond: -1, Phase: s}},
		}
		for _, v := range views {
			if got, want := hand((*taskAnswer)(&v)), marshal(toTaskJSON(v)); got != want {
				t.Errorf("task:\n got %s\nwant %s", got, want)
			}
		}
		if got, want := hand(taskList(views)), marshal([]taskJSON{toTaskJSON(views[0]), toTaskJSON(views[1])}); got != want {
			t.Errorf("task list:\n got %s\nwant %s", got, want)
		}
		if got, want := hand(taskList(nil)), "[]"; got != want {
			t.Errorf("empty task list: %s", got)
		}
		tags := strings.Fields(s)
		if tags == nil {
			tags = []string{}
		}
		st := fleet.VMStatusView{VMID: int64(i), Node: s, Name: s, Status: s, QMPStatus: s, Lock: s,
			HA: fleet.HAView{Managed: i%2 == 0, State: strings.Repeat(s, i%2)}, Uptime: int64(i) << 33, CPUs: f, MaxMem: 1 << 33,
			MaxDisk: int64(i) << 30, MaxSwap: int64(i) << 20, Tags: tags, Stale: i%3 == 0, StaleSince: start.Add(-time.Minute)}
		ref := vmStatusJSON{VMID: st.VMID, Node: st.Node, Name: st.Name, Type: "qemu", Status: st.Status, QMPStatus: st.QMPStatus,
			Lock: st.Lock, HA: haJSON{Managed: st.HA.Managed, State: st.HA.State}, Uptime: st.Uptime, CPUs: st.CPUs, MaxMem: st.MaxMem,
			MaxDisk: st.MaxDisk, Tags: tags, Stale: st.Stale}
		if st.Stale {
			since := st.StaleSince.UTC()
			ref.StaleSince = &since
		}
		want := marshal(ref)
		if got := hand((*vmStatusAnswer)(&st)); got != want {
			t.Errorf("vm status:\n got %s\nwant %s", got, want)
		}
		ctRef := ctStatusJSON{VMID: st.VMID, Node: st.Node, Name: st.Name, Type: "lxc", Status: st.Status, Lock: st.Lock,
			HA: ref.HA, Uptime: st.Uptime, CPUs: st.CPUs, MaxMem: st.MaxMem, MaxSwap: st.MaxSwap, MaxDisk: st.MaxDisk, Tags: tags,
			Stale: st.Stale, StaleSince: ref.StaleSince}
		if got, want := hand((*ctStatusAnswer)(&st)), marshal(ctRef); got != want {
			t.Errorf("ct status:\n got %s\nwant %s", got, want)
		}
	}
	var vms []fleet.VMView
	var refVMs []vmJSON
	var nodes []fleet.NodeView
	var refNodes []nodeJSON
	for i, s := range awkward {
		f := floats[i%len(floats)]
		tags := strings.Fields(s)
		if tags == nil {
			tags = []string{}
		}
		vms = append(vms, fleet.VMView{VMID: int64(i), Name: s, Node: s, Status: s, Lock: s, Tags: tags, HAState: s,
			MaxMem: int64(i) << 30, MaxCPU: f})
		refVMs = append(refVMs, vmJSON{VMID: int64(i), Name: s, Node: s, Status: s, Lock: s, Tags: tags, HAState: s,
			MaxMem: int64(i) << 30, MaxCPU: f})
		nodes = append(nodes, fleet.NodeView{Node: s, Status: s, CPU: f, MaxCPU: int64(i), Mem: int64(i), MaxMem: 1 << 36, Uptime: 7})
		refNodes = append(refNodes, nodeJSON{Node: s, Status: s, CPU: f, MaxCPU: int64(i), Mem: int64(i), MaxMem: 1 << 36, Uptime: 7})
		if i%2 == 1 {
			since := time.Date(2026, 11, 28, 5, 0, 0, int(i)*1e6, time.UTC)
			nodes[len(nodes)-1].Maintenance = &fleet.NodeMaintenance{Since: since, By: s, OperationID: int64(i)}
			m := &refNodes[len(refNodes)-1].Maintenance
			*m = &struct {
				Since       time.Time `json:"since"`
				By          string    `json:"by"`
				OperationID int64     `json:"operationId"`
			}{since, s, int64(i)}
		}
	}
	if got, want := hand(vmList(vms)), marshal(refVMs); got != want {
		t.Errorf("vm list:\n got %s\nwant %s", got, want)
	}
	var guests []fleet.VMView
	var refGuests []guestJSON
	var refFleet []fleetGuestJSON
	for i, v := range vms {
		v.Type, v.Pool, v.Mem, v.CPU, v.Uptime = "lxc", v.Name, v.MaxMem/2, v.MaxCPU/3, int64(i)*7
		guests = append(guests, v)
		g := guestJSON{VMID: v.VMID, Type: "lxc", Name: v.Name, Node: v.Node, Status: v.Status, Lock: v.Lock, Tags: v.Tags,
			HAState: v.HAState, Pool: v.Pool, MaxMem: v.MaxMem, MaxCPU: v.MaxCPU, Mem: v.Mem, CPU: v.CPU, Uptime: v.Uptime}
		refGuests = append(refGuests, g)
		refFleet = append(refFleet, fleetGuestJSON{ClusterID: int64(1 + i/3), ClusterName: awkward[i/3], guestJSON: g})
	}
	if got, want := hand(guestItems{{Guests: guests}}), marshal(refGuests); got != want {
		t.Errorf("guest list:\n got %s\nwant %s", got, want)
	}
	var parts guestItems
	for i := 0; i < len(guests); i += 3 {
		parts = append(parts, fleet.ClusterGuests{ClusterID: int64(1 + i/3), Name: awkward[i/3], Guests: guests[i:min(i+3, len(guests))]})
	}
	if got, want := hand(parts), marshal(refFleet); got != want {
		t.Errorf("fleet guest list:\n got %s\nwant %s", got, want)
	}
	// Through a snapshot's Memo: each guest's JSON encoded once, then spliced,
	// byte for byte the same for the whole snapshot and for a page of some of it.
	memo := new(fleet.Memo)
	var some []fleet.VMView
	var refSome []guestJSON
	for i := 1; i < len(guests); i += 2 {
		some, refSome = append(some, guests[i]), append(refSome, refGuests[i])
	}
	for _, round := range []string{"encoding", "spliced"} {
		if got, want := hand(guestItems{{Guests: guests, All: guests, Memo: memo}}), marshal(refGuests); got != want {
			t.Errorf("guest list from the memo (%s):\n got %s\nwant %s", round, got, want)
		}
		if got, want := hand(guestItems{{Guests: some, All: guests, Memo: memo}}), marshal(refSome); got != want {
			t.Errorf("a page from the memo (%s):\n got %s\nwant %s", round, got, want)
		}
	}
	if enc, _ := memo.Do(func() any { return nil }).(*encodedGuests); enc == nil || len(enc.offs) != len(guests)+1 {
		t.Errorf("the memo holds %+v, want every guest's JSON", enc)
	}
	if got := hand(guestItems(nil)); got != "[]" {
		t.Errorf("empty guest list: %s", got)
	}
	if got, want := hand(nodeList(nodes)), marshal(refNodes); got != want {
		t.Errorf("node list:\n got %s\nwant %s", got, want)
	}
	if got := hand(vmList(nil)); got != "[]" {
		t.Errorf("empty vm list: %s", got)
	}
	if _, err := encode((*vmStatusAnswer)(&fleet.VMStatusView{CPUs: math.NaN()})); err == nil {
		t.Error("NaN encoded without an error")
	}
}

// FuzzJSONString: the hand encoding of a string is encoding/json's.
func FuzzJSONString(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var e jsonEnc
		e.str(s)
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(e.b) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, e.b, want)
		}
	})
}
