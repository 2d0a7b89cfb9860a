package webui

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Operations is what the UI needs of vmops' operations on many VMs (issue 13 (docs/history.md)):
// the node page's evacuation, the operation's page and its live view.
// *operations.Service is one.
type Operations interface {
	Evacuate(ctx context.Context, a vmops.Actor, clusterID int64, node string, req operations.EvacuateRequest) (operations.Launched, error)
	OperationCluster(ctx context.Context, id int64) (int64, error)
	Operation(ctx context.Context, id int64) (operations.View, error)
	ListOperations(ctx context.Context, f operations.Filter) ([]operations.View, error)
	CancelOperation(ctx context.Context, a vmops.Actor, id int64, abort bool) (operations.View, error)
	OperationEvents(ctx context.Context, id int64, emit func(operations.View) error) error
}

var _ Operations = (*operations.Service)(nil)

// nodeURL is the UI page of a node.
func nodeURL(clusterID int64, node string) string {
	return "/nodes/" + strconv.FormatInt(clusterID, 10) + "/" + url.PathEscape(node)
}

// operationURL is the UI page of an operation.
func operationURL(id int64) string { return "/operations/" + strconv.FormatInt(id, 10) }

// pathNode reads and validates {clusterId}/{node}.
func pathNode(r *http.Request) (int64, string, error) {
	id, err := strconv.ParseInt(r.PathValue("clusterId"), 10, 64)
	if err != nil || id < 1 {
		return 0, "", errVMPath("cluster")
	}
	node := r.PathValue("node")
	if !validNode(node) {
		return 0, "", errVMPath("node")
	}
	return id, node, nil
}

// nodeView is the node page's data.
type nodeView struct {
	ClusterID   int64
	ClusterName string
	Node        fleet.NodeView
	VMs         []fleet.VMView
	Others      []fleet.NodeView // the other nodes: the evacuation's possible targets
	CanAct      bool             // operator: the evacuation form
	Form        evacuateForm
	Plan        *operations.Plan // a preview (dry run), when asked for
	PlanErr     string
	Operations  []operations.View // recent operations on this node
}

// evacuateForm is the evacuation form's values.
type evacuateForm struct {
	Targets        []string
	MaxParallel    int
	WithLocalDisks bool
	IncludeStopped bool
	StopOnError    bool
	Type           vmops.GuestKind // only VMs (qemu) or containers (lxc); "" both
}

// Has says whether target was chosen.
func (f evacuateForm) Has(target string) bool { return slices.Contains(f.Targets, target) }

// readEvacuateForm reads the form (a preview's query or the POST's body).
func readEvacuateForm(v url.Values) (evacuateForm, operations.EvacuateRequest) {
	f := evacuateForm{MaxParallel: operations.DefaultEvacParallel, IncludeStopped: true}
	if n, err := strconv.Atoi(v.Get("maxParallel")); err == nil {
		f.MaxParallel = n
	}
	for _, t := range v["target"] {
		if validNode(t) && !slices.Contains(f.Targets, t) {
			f.Targets = append(f.Targets, t)
		}
	}
	f.WithLocalDisks = v.Get("withLocalDisks") != ""
	f.StopOnError = v.Get("stopOnError") != ""
	if v.Has("maxParallel") { // a sent form: an unticked box is absent
		f.IncludeStopped = v.Get("includeStopped") != ""
	}
	if k := vmops.GuestKind(v.Get("type")); k == vmops.GuestVM || k == vmops.GuestCT {
		f.Type = k
	}
	include := f.IncludeStopped
	return f, operations.EvacuateRequest{Targets: f.Targets, MaxParallel: f.MaxParallel, WithLocalDisks: f.WithLocalDisks,
		IncludeStopped: &include, StopOnError: f.StopOnError, Type: f.Type}
}

// nodePage shows a node: its figures, its VMs, the recent operations on it and,
// for an operator, the evacuation form; with ?preview=1 the plan of the form's
// evacuation (a dry run: nothing moves).
func (u *UI) nodePage(w http.ResponseWriter, r *http.Request) error {
	clusterID, name, err := pathNode(r)
	if err != nil {
		return err
	}
	if err := u.fleet.Require(r.Context(), actor(r), clusterID, fleet.GrantViewer, attempt(r)); err != nil {
		return err
	}
	nodes, err := u.fleet.Nodes(r.Context(), clusterID)
	if err != nil {
		return err
	}
	v := nodeView{ClusterID: clusterID}
	found := false
	for _, n := range nodes {
		if n.Node == name {
			v.Node, found = n, true
		} else {
			v.Others = append(v.Others, n)
		}
	}
	if !found {
		return errs.E(errs.NotFound, "the cluster has no node %s", name)
	}
	if cs, err := u.fleet.Clusters(r.Context(), actor(r)); err == nil {
		if i := slices.IndexFunc(cs, func(c fleet.ClusterView) bool { return c.ID == clusterID }); i >= 0 {
			v.ClusterName = cs[i].Name
		}
	}
	if vms, err := u.fleet.VMs(r.Context(), clusterID); err == nil {
		for _, vm := range vms {
			if vm.Node == name {
				v.VMs = append(v.VMs, vm)
			}
		}
	}
	v.CanAct = u.ops != nil && u.canAct(r.Context(), r, clusterID)
	var req operations.EvacuateRequest
	v.Form, req = readEvacuateForm(r.URL.Query())
	if v.CanAct && r.URL.Query().Get("preview") == "1" {
		req.DryRun = true
		l, err := u.ops.Evacuate(r.Context(), vmActor(r), clusterID, name, req)
		if err != nil {
			if _, ok := errs.As(err); !ok {
				return err
			}
			v.PlanErr = errorText(err)
		} else {
			v.Plan = &l.Plan
		}
	}
	if u.ops != nil {
		if ops, err := u.ops.ListOperations(r.Context(), operations.Filter{ClusterID: clusterID, Limit: 50}); err == nil {
			for _, op := range ops {
				if op.Node == name && len(v.Operations) < 8 {
					v.Operations = append(v.Operations, op)
				}
			}
		}
	}
	u.render(w, r, http.StatusOK, "node", u.page(w, r, "Node "+name, "fleet", v))
	return nil
}

// evacuate starts the evacuation of a node and goes to the operation's page; a
// refusal (the node offline, a bad form) goes back to the node's page with the
// reason.
func (u *UI) evacuate(w http.ResponseWriter, r *http.Request) error {
	clusterID, name, err := pathNode(r)
	if err != nil {
		return err
	}
	if err := u.fleet.Require(r.Context(), actor(r), clusterID, fleet.GrantOperator, attempt(r)); err != nil {
		return err
	}
	_, req := readEvacuateForm(r.PostForm)
	l, err := u.ops.Evacuate(r.Context(), vmActor(r), clusterID, name, req)
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence("The evacuation of " + name + " was refused: " + e.Message)})
		redirect(w, r, nodeURL(clusterID, name))
		return nil
	}
	u.setNotice(w, r, notice{Kind: "ok", Message: "The evacuation of " + name + " has started."})
	redirect(w, r, operationURL(l.OperationID))
	return nil
}

// pathOperation reads {id} and checks the caller's grant on the operation's
// cluster; an operation on a cluster without a grant is "no such operation".
func (u *UI) pathOperation(r *http.Request, need string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, errs.E(errs.NotFound, "there is no operation at this address")
	}
	clusterID, err := u.ops.OperationCluster(r.Context(), id)
	if err != nil {
		return 0, err
	}
	if err := u.fleet.Require(r.Context(), actor(r), clusterID, need, attempt(r)); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return 0, errs.E(errs.NotFound, "operation %d not found", id)
		}
		return 0, err
	}
	return id, nil
}

// operationView is an operation page's data.
type operationView struct {
	Op     operations.View
	Live   liveOperation
	Events string // the page's event stream while it runs
	CanAct bool   // operator: the cancel buttons
}

// liveOperation is an operation as its page and event stream show it.
type liveOperation struct {
	Status   string     `json:"status"`
	Finished bool       `json:"finished"`
	Counts   string     `json:"counts"`
	Ended    string     `json:"ended,omitempty"`
	Cancel   bool       `json:"cancelRequested"`
	Items    []liveItem `json:"items"`
}

// liveItem is one VM of an operation as its row shows it.
type liveItem struct {
	VMID        int64   `json:"vmid"`
	Name        string  `json:"name"`
	Node        string  `json:"node"`
	Target      string  `json:"target,omitempty"`
	Action      string  `json:"action"`
	State       string  `json:"state"`
	Badge       string  `json:"badge"` // the badge's class
	Percent     float64 `json:"percent"`
	PercentText string  `json:"percentText"`
	Phase       string  `json:"phase,omitempty"`
	Rate        string  `json:"rate,omitempty"`
	TaskURL     string  `json:"taskUrl,omitempty"`
	VMURL       string  `json:"vmUrl"`
	Error       string  `json:"error,omitempty"`
}

var itemBadge = map[string]string{operations.ItemPending: "badge-stopped", operations.ItemRunning: "badge-running",
	operations.ItemOK: "badge-ok", operations.ItemFailed: "badge-bad", operations.ItemSkipped: "badge-warn"}

func liveOp(op operations.View) liveOperation {
	c := op.Counts
	l := liveOperation{Status: op.Status, Finished: op.Finished(), Cancel: op.CancelRequested,
		Counts: strconv.Itoa(c.OK) + " ok · " + strconv.Itoa(c.Running) + " running · " + strconv.Itoa(c.Pending) +
			" waiting · " + strconv.Itoa(c.Failed) + " failed · " + strconv.Itoa(c.Skipped) + " skipped, of " + strconv.Itoa(c.Total)}
	if op.Finished() && !op.EndedAt.IsZero() {
		l.Ended = when(op.EndedAt)
	}
	for _, it := range op.Items {
		li := liveItem{VMID: it.VMID, Name: it.Name, Node: it.Node, Target: it.Target, Action: it.Action, State: it.State,
			Badge: itemBadge[it.State], Error: it.Error, VMURL: vmURL(op.ClusterID, it.Node, it.VMID)}
		if it.State == operations.ItemOK && it.Target != "" {
			li.VMURL = vmURL(op.ClusterID, it.Target, it.VMID)
		}
		if it.TaskID != "" {
			li.TaskURL = taskURL(it.TaskID)
		}
		if p := it.Progress; p != nil {
			li.Percent = math.Min(100, math.Max(0, math.Floor(p.Percent)))
			li.Phase = p.Phase
			if p.BytesPerSecond > 0 && it.State == operations.ItemRunning {
				li.Rate = humanBytes(p.BytesPerSecond) + "/s"
			}
		}
		if it.State == operations.ItemOK {
			li.Percent = 100
		}
		li.PercentText = strconv.FormatFloat(li.Percent, 'f', 0, 64) + "%"
		l.Items = append(l.Items, li)
	}
	return l
}

// operationPage shows an operation: its status, counts and one row per VM with
// its state, target, progress and task; while it runs the page's script follows
// it on the UI's own event stream.
func (u *UI) operationPage(w http.ResponseWriter, r *http.Request) error {
	id, err := u.pathOperation(r, fleet.GrantViewer)
	if err != nil {
		return err
	}
	op, err := u.ops.Operation(r.Context(), id)
	if err != nil {
		return err
	}
	v := operationView{Op: op, Live: liveOp(op), CanAct: u.canAct(r.Context(), r, op.ClusterID)}
	if !op.Finished() {
		v.Events = operationURL(id) + "/events"
	}
	title := "Operation " + itoa(id)
	if op.Kind == operations.KindEvacuate {
		title = "Evacuation of " + op.Node
	}
	u.render(w, r, http.StatusOK, "operation", u.page(w, r, title, "fleet", v))
	return nil
}

// cancelOperation cancels an operation (with abort=1 its running migrations are
// stopped too) and goes back to its page.
func (u *UI) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := u.pathOperation(r, fleet.GrantOperator)
	if err != nil {
		return err
	}
	abort := r.PostForm.Get("abort") == "1"
	if _, err := u.ops.CancelOperation(r.Context(), vmActor(r), id, abort); err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence(e.Message)})
	} else if abort {
		u.setNotice(w, r, notice{Kind: "info", Message: "Cancelled: nothing more starts, and the running migrations are being stopped."})
	} else {
		u.setNotice(w, r, notice{Kind: "info", Message: "Cancelled: nothing more starts; the running items finish."})
	}
	redirect(w, r, operationURL(id))
	return nil
}

// operationEvents is the operation page's event stream, on the UI's cookie
// session: an "operation" event with the operation as the page shows it each time
// it changes, until it ends ("end"), the session does ("session") or vmgate shuts
// down ("shutdown").
func (u *UI) operationEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := u.pathOperation(r, fleet.GrantViewer)
	if err != nil {
		return err
	}
	follow := func(ctx context.Context, emit func(operations.View) error) error {
		return u.ops.OperationEvents(ctx, id, emit)
	}
	return sessionStream(u, w, r, "operation", follow, func(_ context.Context, op operations.View) any {
		return liveOp(op)
	})
}
