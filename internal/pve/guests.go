package pve

import (
	"fmt"
	"net/url"
	"strconv"
)

// GuestKind is what PVE runs a guest as: a QEMU virtual machine or an LXC
// container. It is the path segment of the guest's API (/nodes/{node}/qemu/…,
// /nodes/{node}/lxc/…) and the type /cluster/resources gives the guest. The
// two share one vmid space in a cluster.
type GuestKind string

const (
	Qemu GuestKind = "qemu"
	LXC  GuestKind = "lxc"
)

// GuestKinds are the kinds vmgate manages, in the order they are listed.
var GuestKinds = []GuestKind{Qemu, LXC}

// Valid reports whether k is a kind PVE has.
func (k GuestKind) Valid() bool { return k == Qemu || k == LXC }

// Noun is how a person names a guest of the kind: "VM" or "CT", as PVE's own
// task log and UI do ("VM 100", "CT 200").
func (k GuestKind) Noun() string {
	if k == LXC {
		return "CT"
	}
	return "VM"
}

// Guest names one guest at PVE: its kind, the node it is on and its vmid.
type Guest struct {
	Kind GuestKind
	Node string
	VMID int
}

// VMOn is the QEMU VM vmid on node.
func VMOn(node string, vmid int) Guest { return Guest{Kind: Qemu, Node: node, VMID: vmid} }

// CTOn is the LXC container vmid on node.
func CTOn(node string, vmid int) Guest { return Guest{Kind: LXC, Node: node, VMID: vmid} }

func (g Guest) String() string { return g.Kind.Noun() + " " + strconv.Itoa(g.VMID) + " on " + g.Node }

// Action is a write PVE offers on a guest; each is a path below the guest and
// starts one task.
type Action string

const (
	ActStart    Action = "start"
	ActShutdown Action = "shutdown"
	ActStop     Action = "stop"
	ActReboot   Action = "reboot"
	ActSuspend  Action = "suspend" // a pause; for QEMU with todisk a hibernation (ActHibernate's task)
	ActResume   Action = "resume"
	ActMigrate  Action = "migrate"

	// ActHibernate is QEMU's status/suspend with todisk: the same path as
	// ActSuspend, another task type.
	ActHibernate Action = "hibernate"
)

// guestActions are the sub-paths below /nodes/{node}/{kind}/{vmid} the client
// uses, for each kind. PVE serves both kinds the same paths today; a kind that
// lacks one is refused here, before anything is sent.
var guestActions = map[GuestKind]map[string]bool{
	Qemu: {
		"status/current": true, "status/start": true, "status/stop": true,
		"status/shutdown": true, "status/reboot": true, "migrate": true,
		"status/suspend": true, "status/resume": true,
	},
	LXC: {
		"status/current": true, "status/start": true, "status/stop": true,
		"status/shutdown": true, "status/reboot": true, "migrate": true,
		"status/suspend": true, "status/resume": true,
	},
}

// guestPath builds /nodes/{node}/{kind}/{vmid}/{sub}.
func guestPath(g Guest, sub string) (apiPath, error) {
	if !g.Kind.Valid() {
		return apiPath{}, fmt.Errorf("%w: unknown guest kind %q", ErrInvalidArgument, truncate(string(g.Kind), 20))
	}
	if err := checkNode("node", g.Node); err != nil {
		return apiPath{}, err
	}
	if err := checkVMID(g.VMID); err != nil {
		return apiPath{}, err
	}
	if !guestActions[g.Kind][sub] {
		return apiPath{}, fmt.Errorf("%w: unknown %s action %q", ErrInvalidArgument, g.Kind, sub)
	}
	return apiPath{
		escaped: "/nodes/" + url.PathEscape(g.Node) + "/" + string(g.Kind) + "/" + strconv.Itoa(g.VMID) + "/" + sub,
		node:    g.Node,
	}, nil
}

// TaskType is one of PVE's task types that vmgate starts or follows: which
// kind of guest it acts on, which action it is, and whether it moves the guest.
// HA stand-ins (hastart, hastop, hamigrate) are the tasks PVE answers with when
// the guest is HA-managed: the request to the HA manager, not the work; they
// have no kind (the same for both).
type TaskType struct {
	Type      string
	Kind      GuestKind // empty for the HA stand-ins
	Action    Action
	HA        bool
	Migration bool
}

// taskTypes is the one table of PVE's task types (qemu-server's and
// pve-container's fork_worker names; pve-ha-manager's stand-ins).
var taskTypes = []TaskType{
	{Type: "qmstart", Kind: Qemu, Action: ActStart},
	{Type: "qmshutdown", Kind: Qemu, Action: ActShutdown},
	{Type: "qmstop", Kind: Qemu, Action: ActStop},
	{Type: "qmreboot", Kind: Qemu, Action: ActReboot},
	{Type: "qmpause", Kind: Qemu, Action: ActSuspend},
	{Type: "qmsuspend", Kind: Qemu, Action: ActHibernate},
	{Type: "qmresume", Kind: Qemu, Action: ActResume},
	{Type: "qmigrate", Kind: Qemu, Action: ActMigrate, Migration: true},

	{Type: "vzstart", Kind: LXC, Action: ActStart},
	{Type: "vzshutdown", Kind: LXC, Action: ActShutdown},
	{Type: "vzstop", Kind: LXC, Action: ActStop},
	{Type: "vzreboot", Kind: LXC, Action: ActReboot},
	{Type: "vzsuspend", Kind: LXC, Action: ActSuspend},
	{Type: "vzresume", Kind: LXC, Action: ActResume},
	{Type: "vzmigrate", Kind: LXC, Action: ActMigrate, Migration: true},

	{Type: "hastart", Action: ActStart, HA: true},
	{Type: "hastop", Action: ActStop, HA: true}, // PVE answers a shutdown of an HA guest with hastop too
	{Type: "hamigrate", Action: ActMigrate, HA: true, Migration: true},
}

// LookupTaskType finds PVE's task type typ in the table.
func LookupTaskType(typ string) (TaskType, bool) {
	for _, t := range taskTypes {
		if t.Type == typ {
			return t, true
		}
	}
	return TaskType{}, false
}

// IsMigration reports whether a task of type typ moves a guest.
func IsMigration(typ string) bool {
	t, ok := LookupTaskType(typ)
	return ok && t.Migration
}

// TaskTypesFor are the task types PVE may answer action on a guest of kind
// with: the kind's own and, where PVE hands the action to the HA manager for an
// HA-managed guest, the stand-in. A shutdown of an HA guest is an hastop.
func TaskTypesFor(kind GuestKind, action Action) []string {
	var out []string
	for _, t := range taskTypes {
		if t.Kind == kind && t.Action == action {
			out = append(out, t.Type)
		}
	}
	if len(out) == 0 {
		return nil
	}
	switch action {
	case ActStart:
		out = append(out, "hastart")
	case ActShutdown, ActStop:
		out = append(out, "hastop")
	case ActMigrate:
		out = append(out, "hamigrate")
	}
	return out
}

// RealTaskTypes are the tasks that does the work an HA stand-in asked for, for a
// guest of kind: hastart's qmstart (or vzstart), ...; for a task that is not a
// stand-in, typ itself.
func RealTaskTypes(kind GuestKind, typ string) []string {
	t, ok := LookupTaskType(typ)
	if !ok || !t.HA {
		return []string{typ}
	}
	switch typ {
	case "hastop":
		return []string{kindType(kind, ActShutdown), kindType(kind, ActStop)}
	default:
		return []string{kindType(kind, t.Action)}
	}
}

func kindType(kind GuestKind, a Action) string {
	for _, t := range taskTypes {
		if t.Kind == kind && t.Action == a {
			return t.Type
		}
	}
	return ""
}
