package webui

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// migrateView is the migrate page's data: PVE's pre-check as a form.
type migrateView struct {
	VM       vmops.GuestRef
	Noun     string // VM or CT
	CT       bool   // a container: restart migration, never live
	Name     string
	Check    vmops.Precheck
	Target   string // the node chosen, when the page was asked for one
	Blocked  []blockedNode
	Disks    []vmops.LocalDisk // local disks that would move with the VM
	CanGo    bool              // at least one node is allowed
	Online   bool              // the VM runs, so an online (live) migration is possible
	CheckErr string
	// Running is a running container: it moves only by a restart (PVE shuts it
	// down, moves it, starts it on the target), within ShutdownTimeout seconds.
	Running         bool
	ShutdownTimeout int
}

// ctShutdownTimeout is PVE's default shutdown timeout of a container's restart
// migration, in seconds (pve-container's migrate: timeout, default 180).
const ctShutdownTimeout = 180

// blockedNode is a node PVE's pre-check refuses, with its reasons in words.
type blockedNode struct {
	Node    string
	Reasons []string
}

// migratePage shows where the VM may go, from PVE's own pre-check: the allowed
// target nodes, the others with PVE's reasons, the local disks (and the choice to
// copy them), online or offline.
func (u *UI) migratePage(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		return u.showMigrate(w, r, k)
	}
}

func (u *UI) showMigrate(w http.ResponseWriter, r *http.Request, k guestKind) error {
	vm, err := pathGuest(r, k.kind)
	if err != nil {
		return err
	}
	target := r.URL.Query().Get("target")
	if target != "" && (!validNode(target) || target == vm.Node) {
		target = "" // only preselects a node in the form
	}
	// The form is a step of the migration: it is offered to whoever may migrate.
	if err := u.vms.MayAct(r.Context(), vmActor(r), vm.ClusterID); err != nil {
		return err
	}
	v := migrateView{VM: vm, Noun: noun(vm), CT: vm.Kind == vmops.GuestCT, Target: target, ShutdownTimeout: ctShutdownTimeout}
	if st, err := u.fleet.GuestStatus(r.Context(), actor(r), vm.ClusterID, string(vm.Kind), vm.Node, vm.VMID); err == nil {
		v.Name = st.Name
		v.Running = v.CT && st.Status == "running"
	} else if errs.KindOf(err) == errs.NotFound {
		if to := movedTo(vm, err); to != "" {
			redirect(w, r, to+"/migrate")
			return nil
		}
		return err
	}
	pc, err := u.vms.MigrateCheck(r.Context(), vmActor(r), vm, "")
	if err != nil {
		if k := errs.KindOf(err); k == errs.Internal || k == errs.NotFound {
			return err
		}
		v.CheckErr = errorText(err)
	}
	v.Check = pc
	v.Online = pc.Running && !v.CT
	v.Running = v.Running || v.CT && pc.Running
	v.CanGo = len(pc.AllowedNodes) > 0
	for _, node := range sortedKeysOf(pc.NotAllowedNodes) {
		na := pc.NotAllowedNodes[node]
		b := blockedNode{Node: node}
		for _, s := range na.UnavailableStorages {
			b.Reasons = append(b.Reasons, "storage "+s+" is not available there")
		}
		for _, s := range na.UnavailableResources {
			b.Reasons = append(b.Reasons, "resource "+s+" is not available there")
		}
		for _, h := range na.BlockingHAResources {
			b.Reasons = append(b.Reasons, "HA resource "+h.SID+" keeps it off ("+h.Cause+")")
		}
		if len(b.Reasons) == 0 {
			b.Reasons = []string{"PVE does not allow it"}
		}
		v.Blocked = append(v.Blocked, b)
	}
	for _, d := range pc.LocalDisks {
		if !d.CDROM {
			v.Disks = append(v.Disks, d)
		}
	}
	u.render(w, r, http.StatusOK, "migrate", u.page(w, r, "Migrate "+guestName(vm), "vms", v))
	return nil
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// guestMigrate starts a migration (vmops.Migrate: the request, the grant,
// pre-check, task, audit) and goes to its live view; a refusal goes back to the
// form with the reason (a refused grant is the error page). A
// VM's form says online or offline and whether to copy local disks; a
// container's whether to restart it (the only way a running one moves) and the
// restart's shutdown timeout.
func (u *UI) guestMigrate(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		back := refURL(vm) + "/migrate"
		target := r.PostFormValue("target")
		if target == "" {
			return u.backWith(w, r, back, "Choose a target node.")
		}
		// The form again, the node still chosen (the page ignores one that is
		// not a node name; vmops judges it).
		back += "?target=" + url.QueryEscape(target)
		var req vmops.MigrateRequest
		if vm.Kind == vmops.GuestCT {
			req = vmops.MigrateRequest{Target: target, Restart: r.PostFormValue("restart") == "on"}
			if t := strings.TrimSpace(r.PostFormValue("timeout")); t != "" { // empty: not given, as in PVE
				n, err := strconv.Atoi(t)
				if err != nil {
					return u.backWith(w, r, back, "The shutdown timeout must be a number of seconds.")
				}
				req.Timeout = &n
			}
		} else {
			online := r.PostFormValue("mode") != "offline"
			req = vmops.MigrateRequest{Target: target, Online: &online, WithLocalDisks: r.PostFormValue("withLocalDisks") == "on"}
		}
		upid, err := u.vms.Migrate(r.Context(), vmActor(r), vm, req)
		if ref, ok := vmops.TaskRefOf(err); ok {
			// The outcome is unknown: the task page follows vmgate's task row until
			// PVE's task is found (or known never to have started).
			return u.backWith(w, r, taskURL(itoa(ref)), sentence(errorText(err)))
		}
		if err != nil {
			return u.refusedAs(w, r, back, "The migration", err)
		}
		redirect(w, r, taskURL(upid))
		return nil
	}
}

func (u *UI) backWith(w http.ResponseWriter, r *http.Request, to, msg string) error {
	u.setNotice(w, r, notice{Kind: "error", Message: msg})
	redirect(w, r, to)
	return nil
}
