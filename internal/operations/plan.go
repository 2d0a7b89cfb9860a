package operations

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The evacuation planner's rules (docs/decisions: the planner):
//
//   - Targets are the cluster's nodes other than the source, limited to the
//     request's targets when it names some, and online ones only, none that
//     another operation holds (an evacuation's node: holds.go), none in
//     maintenance (maintenance.go).
//   - A VM another operation acts on (its pending or running item) is skipped,
//     naming that operation.
//   - Each VM is placed after PVE's pre-check (GET migrate): a node PVE lists as
//     not allowed (storage or mapped resources missing, HA rules) is out; local
//     devices, local CD-ROM images, a lock and (without withLocalDisks) local
//     disks skip the VM, naming them.
//   - Containers are planned like VMs: a running one needs its configured
//     memory on the target and moves by a restart migration (PVE shuts it
//     down, moves it and starts it on the target), its expected downtime shown
//     (containerDowntime); a stopped one moves as it is.
//   - Memory: a running VM needs its configured memory on the target. A target
//     takes it only while its memory in use (PVE's figure) plus what the plan has
//     put there already stays at or below 90 % of its memory. A stopped VM needs
//     none now and is placed without this bound.
//   - Among the targets that fit, the one with the most memory left under the
//     bound wins (ties: by name), so VMs spread rather than fill one node first.
//     Running VMs are placed first, the largest first (so the big ones find room),
//     then stopped ones.
//   - A VM that fits nowhere is skipped with the reason; the rest go ahead.
//     Every reason names the guest and says what would move it, in a person's
//     words: the evacuation's end names each guest it left (View.Left).
//
// Items are listed, and started, in VMID order.

// memoryBound is the share of a target's memory the plan may fill.
const memoryBound = 0.9

// planVM is what the planner knows of one VM of the source node.
type planVM struct {
	res      pve.Resource
	kind     vmops.GuestKind
	check    pve.MigratePrecheck
	checkErr error  // the pre-check failed
	held     string // another operation holds the VM: why it is skipped
}

// planNode is a node as the planner sees it.
type planNode struct {
	name    string
	status  string
	mem     int64
	maxMem  int64
	allowed bool   // may be a target: online, not the source, among the request's targets, not held
	heldBy  string // another operation holds the node: who
	inMaint bool   // the node is in maintenance: no target
	planned int64
	vms     int
}

// room is how much memory the plan may still put on n.
func (n *planNode) room() int64 {
	return int64(float64(n.maxMem)*memoryBound) - n.mem - n.planned
}

// evacuationPlan places the VMs of source on the other nodes by the rules above;
// nodes that other operations hold (held) are no targets.
func evacuationPlan(source string, vms []planVM, nodes []pve.Node, req EvacuateRequest, held map[string]store.Holder,
	maint map[string]store.NodeMaintenance) Plan {
	var targets []*planNode
	only := map[string]bool{}
	for _, t := range req.Targets {
		only[t] = true
	}
	for _, n := range nodes {
		if n.Node == source {
			continue
		}
		pn := &planNode{name: n.Node, status: orUnknown(n.Status), mem: n.Mem, maxMem: n.MaxMem}
		if h, ok := held[n.Node]; ok {
			pn.heldBy = holderText(h)
		}
		_, pn.inMaint = maint[n.Node]
		pn.allowed = n.Status == "online" && (len(only) == 0 || only[n.Node]) && pn.heldBy == "" && !pn.inMaint
		targets = append(targets, pn)
	}
	slices.SortFunc(targets, func(a, b *planNode) int { return cmp.Compare(a.name, b.name) })

	order := make([]int, len(vms))
	for i := range order {
		order[i] = i
	}
	running := func(v planVM) bool { return v.res.Status == "running" || v.check.Running }
	slices.SortStableFunc(order, func(a, b int) int {
		va, vb := vms[a], vms[b]
		if ra, rb := running(va), running(vb); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		if running(va) && va.res.MaxMem != vb.res.MaxMem {
			return cmp.Compare(vb.res.MaxMem, va.res.MaxMem)
		}
		return cmp.Compare(va.res.VMID, vb.res.VMID)
	})

	items := make([]ItemView, len(vms))
	for _, i := range order {
		v := vms[i]
		on := running(v)
		it := ItemView{VMID: int64(v.res.VMID), Kind: v.kind, Name: v.res.Name, Node: source, Action: vmops.OpMigrate,
			Online: on, HA: v.res.HAState != "", MemBytes: v.res.MaxMem, State: ItemPending}
		if v.kind == vmops.GuestCT && on {
			it.Downtime = containerDowntime(req.Timeout)
		}
		if why := blockedFrom(v, req, on); why != "" {
			it.State, it.Error = ItemSkipped, why
			items[i] = it
			continue
		}
		need := int64(0)
		if on {
			need = v.res.MaxMem
		}
		var best *planNode
		var excluded []string
		fits := 0
		for _, n := range targets {
			if !n.allowed {
				switch {
				case len(only) > 0 && !only[n.name]:
				case n.heldBy != "" && n.status == "online":
					excluded = append(excluded, n.name+" is held by "+n.heldBy)
				case n.inMaint && n.status == "online":
					excluded = append(excluded, n.name+" is in maintenance")
				default:
					excluded = append(excluded, n.name+" is "+n.status)
				}
				continue
			}
			if na, ok := v.check.NotAllowedNodes[n.name]; ok {
				excluded = append(excluded, n.name+": "+notAllowedText(na))
				continue
			}
			fits++
			if need > 0 && n.room() < need {
				continue
			}
			if best == nil || n.room() > best.room() {
				best = n
			}
		}
		switch {
		case best != nil:
			best.planned += need
			best.vms++
			it.Target = best.name
		case fits == 0:
			it.State = ItemSkipped
			it.Error = "no node may take " + guestName(v)
			if len(excluded) > 0 {
				it.Error += ": " + strings.Join(excluded, "; ")
			}
		default:
			it.State = ItemSkipped
			it.Error = fmt.Sprintf("no target has room for %s's %s under %d %% of its memory", guestName(v), humanBytes(need),
				int(memoryBound*100))
			var rooms []string
			for _, n := range targets {
				if n.allowed {
					if _, no := v.check.NotAllowedNodes[n.name]; !no {
						rooms = append(rooms, fmt.Sprintf("%s %s free", n.name, humanBytes(max(n.room(), 0))))
					}
				}
			}
			it.Error += " (" + strings.Join(rooms, ", ") + ")"
		}
		items[i] = it
	}
	plan := Plan{Items: items}
	slices.SortStableFunc(plan.Items, func(a, b ItemView) int { return cmp.Compare(a.VMID, b.VMID) })
	for _, n := range targets {
		plan.Targets = append(plan.Targets, TargetView{Node: n.name, Status: n.status, Eligible: n.allowed,
			Mem: n.mem, MaxMem: n.maxMem, PlannedMem: n.planned, VMs: n.vms})
	}
	return plan
}

// blockedFrom says why a guest cannot leave its node at all, "" when it may, in
// a person's words: the guest, the cause, and what would move it.
func blockedFrom(v planVM, req EvacuateRequest, running bool) string {
	name := guestName(v)
	if v.held != "" {
		return v.held
	}
	if v.checkErr != nil {
		return "PVE's migration pre-check of " + name + " failed: " + v.checkErr.Error()
	}
	if !running && req.IncludeStopped != nil && !*req.IncludeStopped {
		return name + " is stopped and stopped guests were left out; include stopped guests (includeStopped) to move it"
	}
	if v.res.Lock != "" {
		return name + " is locked (" + v.res.Lock + "); it can move once the lock is released"
	}
	if len(v.check.LocalResources) > 0 {
		return name + " uses local devices (" + strings.Join(v.check.LocalResources, ", ") +
			"); remove them from its configuration to move it"
	}
	disks, cdroms := vmops.LocalDiskNames(v.check.LocalDisks)
	if len(cdroms) > 0 {
		return name + " has a local CD-ROM image (" + strings.Join(cdroms, ", ") + "); eject it to move the VM"
	}
	if len(disks) > 0 && !req.WithLocalDisks {
		what := "a local disk"
		if len(disks) > 1 {
			what = "local disks"
		}
		if st := localStorages(v.check.LocalDisks); st != "" {
			what += " on " + st
		}
		return name + " has " + what + " (" + strings.Join(driveNames(v.check.LocalDisks), ", ") +
			"); tick 'copy local disks' (withLocalDisks) to move it"
	}
	return ""
}

// driveNames names a guest's local disks by their drive (scsi0), an unused
// volume by its volume id.
func driveNames(ds []pve.LocalDisk) []string {
	var out []string
	for _, d := range ds {
		switch {
		case d.CDROM:
		case d.DriveName != "":
			out = append(out, d.DriveName)
		default:
			out = append(out, d.Volid)
		}
	}
	return out
}

// guestName is "VM 102" or "CT 202".
func guestName(v planVM) string {
	return v.kind.Noun() + " " + strconv.Itoa(v.res.VMID)
}

// localStorages names the storages of a guest's local disks (the volume id's
// storage: "local-lvm" of "local-lvm:vm-102-disk-0"), each once, in order.
func localStorages(ds []pve.LocalDisk) string {
	var out []string
	for _, d := range ds {
		if d.CDROM {
			continue
		}
		if st, _, ok := strings.Cut(d.Volid, ":"); ok && !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return strings.Join(out, ", ")
}

// defaultCTShutdown is PVE's shutdown timeout of a container's restart
// migration when none is given (pve-container's migrate: 180 s).
const defaultCTShutdown = 180

// ctStartAllowance is what the estimate adds for the container's start on the
// target and the move of its configuration, which take seconds.
const ctStartAllowance = 10

// containerDowntime is a running container's expected downtime in a restart
// migration: at most its shutdown timeout (PVE waits that long, then stops it)
// plus its start on the target. Its local volumes, if any, are copied while it
// is down too; PVE's pre-check for containers does not list them, so the plan
// cannot add their copy, and says so.
func containerDowntime(timeout *int) *Downtime {
	t := defaultCTShutdown
	basis := "PVE's default shutdown timeout of 180 s"
	if timeout != nil {
		t = *timeout
		basis = fmt.Sprintf("the shutdown timeout of %d s", t)
	}
	return &Downtime{Seconds: int64(t + ctStartAllowance), Basis: fmt.Sprintf(
		"at most %s plus about %d s to start it on the target; local volumes, if any, are copied while it is down "+
			"and add their copy time (PVE's pre-check for containers does not list them)", basis, ctStartAllowance)}
}

// notAllowedText says why PVE does not allow a node as a target.
func notAllowedText(na pve.NotAllowed) string {
	var why []string
	for _, st := range na.UnavailableStorages {
		why = append(why, "storage "+st+" not available")
	}
	for _, r := range na.UnavailableResources {
		why = append(why, "resource "+r+" not available")
	}
	for _, h := range na.BlockingHAResources {
		why = append(why, "HA resource "+h.SID+" ("+h.Cause+")")
	}
	if len(why) == 0 {
		return "not allowed by PVE"
	}
	return strings.Join(why, ", ")
}

// humanBytes writes a size in binary units with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
