package webui

import (
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/vmops"
)

// "Move to another cluster" (issue 22): a form that reads vmgate's pre-check of
// a remote migration — the cluster and node first, then each disk's storage
// and each network device's bridge as selects pre-filled from it, the target
// token's privileges and every blocker — and starts the move when nothing
// blocks it; then the task's live page.

// remoteView is the page's data.
type remoteView struct {
	VM       vmops.GuestRef
	Noun     string
	Name     string
	Clusters []clusterChoice // the other clusters the caller sees
	Target   string          // the chosen cluster's id, "" before the choice
	Node     string
	Check    *vmops.RemotePrecheck
	Disks    []remoteChoice
	NICs     []remoteChoice
	CheckErr string
	Ready    bool // nothing blocks: the button is enabled
}

type clusterChoice struct {
	ID   string
	Name string
}

// remoteChoice is one disk or NIC and its select.
type remoteChoice struct {
	Key, What, Source string
	Field             string // the form field: storage.SRC or bridge.SRC
	Options           []string
	Chosen            string
}

func (u *UI) remoteRoutes() []route {
	if _, ok := u.vms.(frontend.RemoteMigrations); !ok {
		return nil
	}
	var rs []route
	for _, k := range guestKinds {
		g := k.route()
		rs = append(rs,
			route{"GET", g + "/remote-migrate", authed, u.remotePage(k)},
			route{"POST", g + "/remote-migrate", authed, u.guestRemoteMigrate(k)},
		)
	}
	return rs
}

// remoteRequest reads the form (the query of a check, the body of a move).
func remoteRequest(form url.Values) vmops.RemoteMigrateRequest {
	req := vmops.RemoteMigrateRequest{TargetCluster: form.Get("targetCluster"), TargetNode: form.Get("targetNode"),
		TargetStorage: vmops.Mapping{Pairs: map[string]string{}}, TargetBridge: vmops.Mapping{Pairs: map[string]string{}},
		Delete: form.Get("delete") == "on"}
	if n, err := strconv.Atoi(form.Get("targetVmid")); err == nil {
		req.TargetVMID = n
	}
	for k, vs := range form {
		if len(vs) == 0 || vs[0] == "" {
			continue
		}
		if src, ok := strings.CutPrefix(k, "storage."); ok {
			req.TargetStorage.Pairs[src] = vs[0]
		}
		if src, ok := strings.CutPrefix(k, "bridge."); ok {
			req.TargetBridge.Pairs[src] = vs[0]
		}
	}
	return req
}

func (u *UI) remotePage(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		rm := u.vms.(frontend.RemoteMigrations)
		if err := u.vms.MayAct(r.Context(), vmActor(r), vm.ClusterID); err != nil {
			return err
		}
		v := remoteView{VM: vm, Noun: noun(vm)}
		if st, err := u.fleet.GuestStatus(r.Context(), actor(r), vm.ClusterID, string(vm.Kind), vm.Node, vm.VMID); err == nil {
			v.Name = st.Name
		} else if errs.KindOf(err) == errs.NotFound {
			return err
		}
		cs, err := u.fleet.Clusters(r.Context(), actor(r))
		if err != nil {
			return err
		}
		for _, c := range cs {
			if c.ID != vm.ClusterID {
				v.Clusters = append(v.Clusters, clusterChoice{ID: itoa(c.ID), Name: c.Name})
			}
		}
		q := r.URL.Query()
		req := remoteRequest(q)
		v.Target = req.TargetCluster
		if v.Target != "" {
			pc, err := rm.RemoteMigrateCheck(r.Context(), vmActor(r), vm, req)
			// Pre-fill what the check left open: a shared storage (else the first),
			// the first bridge, and check again with them.
			if err == nil && fillRemote(&req, pc) {
				pc, err = rm.RemoteMigrateCheck(r.Context(), vmActor(r), vm, req)
			}
			if err != nil {
				if k := errs.KindOf(err); k == errs.Internal {
					return err
				}
				v.CheckErr = errorText(err)
			} else {
				v.Check = &pc
				v.Node = pc.TargetNode
				v.Ready = len(pc.Blockers) == 0
				v.Disks, v.NICs = remoteChoices(pc)
			}
		}
		u.render(w, r, http.StatusOK, "remotemigrate", u.page(w, r, "Move "+guestName(vm)+" to another cluster", "vms", v))
		return nil
	}
}

// fillRemote maps each disk and NIC the pre-check left without a target;
// it reports whether it mapped any.
func fillRemote(req *vmops.RemoteMigrateRequest, pc vmops.RemotePrecheck) bool {
	changed := false
	stores := append([]vmops.RemoteStorage(nil), pc.Storages...)
	sort.SliceStable(stores, func(i, j int) bool { return stores[i].Shared && !stores[j].Shared })
	for _, d := range pc.Disks {
		if d.Target == "" && len(stores) > 0 {
			req.TargetStorage.Pairs[d.Storage] = stores[0].Storage
			changed = true
		}
	}
	for _, n := range pc.NICs {
		if n.Target == "" && len(pc.Bridges) > 0 {
			req.TargetBridge.Pairs[n.Bridge] = pc.Bridges[0]
			changed = true
		}
	}
	if req.TargetNode == "" && pc.TargetNode != "" {
		req.TargetNode = pc.TargetNode
	}
	return changed
}

func remoteChoices(pc vmops.RemotePrecheck) (disks, nics []remoteChoice) {
	var stores []string
	for _, s := range pc.Storages {
		stores = append(stores, s.Storage)
	}
	seen := map[string]bool{}
	for _, d := range pc.Disks {
		if seen[d.Storage] {
			continue // one select per source storage: PVE maps storages, not disks
		}
		seen[d.Storage] = true
		disks = append(disks, remoteChoice{Key: d.Key, What: d.Volid + ", " + humanBytes(d.Size), Source: d.Storage,
			Field: "storage." + d.Storage, Options: stores, Chosen: d.Target})
	}
	seen = map[string]bool{}
	for _, n := range pc.NICs {
		if seen[n.Bridge] {
			continue
		}
		seen[n.Bridge] = true
		nics = append(nics, remoteChoice{Key: n.Key, What: "bridge " + n.Bridge, Source: n.Bridge,
			Field: "bridge." + n.Bridge, Options: pc.Bridges, Chosen: n.Target})
	}
	return disks, nics
}

// guestRemoteMigrate starts the move (vmops.RemoteMigrate: the grants on both
// clusters, the refusals, the task, the audit) and goes to the task's page.
func (u *UI) guestRemoteMigrate(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		if err := r.ParseForm(); err != nil {
			return errs.E(errs.Invalid, "the form does not parse")
		}
		req := remoteRequest(r.PostForm)
		back := refURL(vm) + "/remote-migrate?" + url.Values{"targetCluster": {req.TargetCluster}, "targetNode": {req.TargetNode}}.Encode()
		if req.TargetCluster == "" {
			return u.backWith(w, r, refURL(vm)+"/remote-migrate", "Choose the target cluster.")
		}
		if r.PostForm.Get("action") == "check" {
			// The form again with the mappings chosen (and no CSRF token in the URL).
			q := url.Values{}
			for k, vs := range r.PostForm {
				if k == "targetCluster" || k == "targetNode" || k == "targetVmid" || k == "delete" ||
					strings.HasPrefix(k, "storage.") || strings.HasPrefix(k, "bridge.") {
					q[k] = vs
				}
			}
			redirect(w, r, refURL(vm)+"/remote-migrate?"+q.Encode())
			return nil
		}
		upid, err := u.vms.(frontend.RemoteMigrations).RemoteMigrate(r.Context(), vmActor(r), vm, req)
		if ref, ok := vmops.TaskRefOf(err); ok {
			return u.backWith(w, r, taskURL(itoa(ref)), sentence(errorText(err)))
		}
		if err != nil {
			return u.refusedAs(w, r, back, "The move", err)
		}
		redirect(w, r, taskURL(upid))
		return nil
	}
}

// tunnelWorker finds the target's tunnel task in a remote migration's log
// (PVE::Tunnel's "remote: started tunnel worker 'UPID:…'").
var tunnelWorker = regexp.MustCompile(`remote: started tunnel worker '(UPID:[^']+)'`)

// remoteTargetTask is, for a move to another cluster ("CLUSTER/NODE" target),
// the target's tunnel task and its page, read from the first lines of the
// source's log; "" for any other task or when it is not known yet.
func (u *UI) remoteTargetTask(r *http.Request, t vmops.TaskView, upid string, hint int64) (string, string) {
	name, _, remote := strings.Cut(t.Target, "/")
	if !remote || !t.IsMigration() {
		return "", ""
	}
	lg, err := u.vms.TaskLog(r.Context(), vmActor(r), upid, hint, 0, 10)
	if err != nil {
		return "", ""
	}
	for _, l := range lg.Lines {
		m := tunnelWorker.FindStringSubmatch(l.T)
		if m == nil {
			continue
		}
		cs, err := u.fleet.Clusters(r.Context(), actor(r))
		if err != nil {
			return m[1], ""
		}
		for _, c := range cs {
			if c.Name == name {
				return m[1], taskURL(m[1]) + "?cluster=" + itoa(c.ID)
			}
		}
		return m[1], "" // the caller does not see the target cluster
	}
	return "", ""
}
