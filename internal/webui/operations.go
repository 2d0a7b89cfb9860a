package webui

import (
	"context"
	"errors"
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
	CTs         []fleet.VMView   // the node's containers
	Others      []fleet.NodeView // the other nodes: the evacuation's possible targets
	CanAct      bool             // operator: the evacuation form
	Form        evacuateForm
	Plan        *operations.Plan // a preview (dry run), when asked for
	PlanErr     string
	Operations  []operations.View // recent operations on this node
	// NotEmpty: the node's last evacuation ended and guests are still on the
	// node (issue 19 item 6); LastEvacuation is that operation.
	NotEmpty       bool
	LastEvacuation *operations.View
	// Maint is the maintenance form; PlanOf says which preview Plan is
	// ("maintenance" for entering or leaving it, else the evacuation's).
	Maint  maintenanceForm
	PlanOf string
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
	nodes, err := u.fleet.Nodes(r.Context(), actor(r), clusterID)
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
	if vms, err := u.fleet.GuestList(r.Context(), actor(r), clusterID, string(vmops.GuestVM), fleet.VMQuery{Node: name}); err == nil {
		v.VMs = vms.VMs
	}
	if cts, err := u.fleet.GuestList(r.Context(), actor(r), clusterID, string(vmops.GuestCT), fleet.VMQuery{Node: name}); err == nil {
		v.CTs = cts.VMs
	}
	v.CanAct = u.ops != nil && u.canAct(r.Context(), r, clusterID)
	var req operations.EvacuateRequest
	v.Form, req = readEvacuateForm(r.URL.Query())
	v.Maint = readMaintenanceForm(r.URL.Query())
	if v.CanAct && r.URL.Query().Get("preview") == "maintenance" {
		if err := u.maintenancePreview(r, &v, clusterID, name); err != nil {
			return err
		}
	}
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
		if ops, err := u.ops.ListOperations(r.Context(), vmActor(r), operations.Filter{ClusterID: clusterID, Limit: 50}); err == nil {
			for _, op := range ops {
				if op.Node == name && len(v.Operations) < 8 {
					v.Operations = append(v.Operations, op)
				}
			}
		}
	}
	if len(v.Operations) > 0 && v.Operations[0].Kind == operations.KindEvacuate && v.Operations[0].Finished() {
		v.LastEvacuation = &v.Operations[0]
		v.NotEmpty = len(v.VMs)+len(v.CTs) > 0
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
	_, req := readEvacuateForm(r.PostForm)
	l, err := u.ops.Evacuate(r.Context(), vmActor(r), clusterID, name, req)
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
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

// pathOperation reads {id}; the use cases check the caller's grant on the
// operation's cluster.
func pathOperation(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, errs.E(errs.NotFound, "there is no operation at this address")
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
	Status string `json:"status"`
	// StatusText and StatusClass are the status's badge: an operation that ended
	// with guests left is amber "done with skips", whatever word the view carries
	// (done_with_skips, or done with skipped items).
	StatusText  string     `json:"statusText"`
	StatusClass string     `json:"statusClass"`
	Finished    bool       `json:"finished"`
	Counts      string     `json:"counts"`
	Ended       string     `json:"ended,omitempty"`
	Cancel      bool       `json:"cancelRequested"`
	Items       []liveItem `json:"items"`
	// Left names, once the operation ended, each guest it did not act on (skipped
	// or failed) and why, in a sentence.
	Left []string `json:"left,omitempty"`
	// Rolling is a rolling maintenance's nodes and log (maintenance.go).
	Rolling *liveRolling `json:"rolling,omitempty"`
}

// opBadge is the badge of an operation's status.
func opBadge(op operations.View) (text, class string) {
	switch {
	case op.Status == operations.StatusDoneWithSkips, op.Status == operations.StatusDone && op.Counts.Skipped > 0:
		return "done with skips", "badge-warn"
	case op.Status == operations.StatusDone:
		return "done", "badge-ok"
	case op.Status == operations.StatusPartial:
		return "partial", "badge-warn"
	case op.Status == operations.StatusFailed:
		return "failed", "badge-bad"
	case op.Status == operations.StatusCancelled:
		return "cancelled", "badge-stopped"
	}
	return op.Status, "badge-running"
}

// leftSentence says why an operation left a guest where it was.
func leftSentence(op operations.View, it operations.ItemView) string {
	who := "VM " + itoa(it.VMID)
	if it.Name != "" {
		who += " (" + it.Name + ")"
	}
	where := ""
	if op.Kind == operations.KindEvacuate && it.Node != "" {
		where = " is still on " + it.Node
	}
	why := it.Error
	if why == "" {
		why = "no reason was given"
	}
	if it.State == operations.ItemFailed {
		return sentence(who + where + ": it failed: " + why)
	}
	return sentence(who + where + ": skipped, " + why)
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
	l.StatusText, l.StatusClass = opBadge(op)
	l.Rolling = liveRoll(op)
	if l.Rolling != nil && l.Rolling.Paused != "" && !l.Finished {
		l.StatusText, l.StatusClass = "paused", "badge-warn"
	}
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
		if op.Finished() && (it.State == operations.ItemSkipped || it.State == operations.ItemFailed) {
			l.Left = append(l.Left, leftSentence(op, it))
		}
	}
	return l
}

// operationPage shows an operation: its status, counts and one row per VM with
// its state, target, progress and task; while it runs the page's script follows
// it on the UI's own event stream.
func (u *UI) operationPage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	op, err := u.ops.Operation(r.Context(), vmActor(r), id)
	if err != nil {
		return err
	}
	v := operationView{Op: op, Live: liveOp(op), CanAct: u.canAct(r.Context(), r, op.ClusterID)}
	if !op.Finished() {
		v.Events = operationURL(id) + "/events"
	}
	title := "Operation " + itoa(id)
	switch op.Kind {
	case operations.KindEvacuate:
		title = "Evacuation of " + op.Node
	case operations.KindMaintenanceEnter:
		title = op.Node + " entering maintenance"
	case operations.KindMaintenanceLeave:
		title = op.Node + " leaving maintenance"
	case operations.KindRolling:
		title = "Rolling maintenance"
	}
	u.render(w, r, http.StatusOK, "operation", u.page(w, r, title, "fleet", v))
	return nil
}

// cancelOperation cancels an operation (with abort=1 its running migrations are
// stopped too) and goes back to its page.
func (u *UI) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	abort := r.PostForm.Get("abort") == "1"
	if _, err := u.ops.CancelOperation(r.Context(), vmActor(r), id, abort); err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
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
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	a := vmActor(r)
	follow := func(ctx context.Context, emit func(operations.View) error) error {
		return u.ops.OperationEvents(ctx, a, id, emit)
	}
	return sessionStream(u, w, r, "operation", follow, func(_ context.Context, op operations.View) any {
		return liveOp(op)
	})
}
