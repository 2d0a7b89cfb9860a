package webui

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Node maintenance in the web UI (issue 20 (docs/history.md)): the node page's
// Enter / Leave maintenance with the plan's preview, and the cluster's rolling
// maintenance wizard (a plan per node, then the operation's live page with each
// node's steps, Pause, Resume and Cancel). Each calls one use case of
// internal/operations, which checks the grant.

// maintenanceForm is the node page's maintenance form.
type maintenanceForm struct {
	MaxParallel    int
	StopUnmovable  bool
	WithLocalDisks bool
}

func readMaintenanceForm(v url.Values) maintenanceForm {
	f := maintenanceForm{MaxParallel: operations.DefaultEvacParallel}
	if n, err := strconv.Atoi(v.Get("maxParallel")); err == nil {
		f.MaxParallel = n
	}
	f.StopUnmovable = v.Get("stopUnmovable") != ""
	f.WithLocalDisks = v.Get("withLocalDisks") != ""
	return f
}

// maintenancePreview fills the node page's plan with the preview of entering
// (or, for a node in maintenance, leaving) maintenance.
func (u *UI) maintenancePreview(r *http.Request, v *nodeView, clusterID int64, node string) error {
	var (
		l   operations.Launched
		err error
	)
	v.PlanOf = "maintenance"
	if v.Node.Maintenance != nil {
		l, err = u.ops.LeaveMaintenance(r.Context(), vmActor(r), clusterID, node, operations.LeaveRequest{
			MaxParallel: v.Maint.MaxParallel, DryRun: true})
	} else {
		l, err = u.ops.EnterMaintenance(r.Context(), vmActor(r), clusterID, node, operations.MaintenanceRequest{
			MaxParallel: v.Maint.MaxParallel, StopUnmovable: v.Maint.StopUnmovable, WithLocalDisks: v.Maint.WithLocalDisks,
			DryRun: true})
	}
	if err != nil {
		if _, ok := errs.As(err); !ok {
			return err
		}
		v.PlanErr = errorText(err)
		return nil
	}
	v.Plan = &l.Plan
	return nil
}

// enterMaintenance puts a node in maintenance and goes to the operation's page.
func (u *UI) enterMaintenance(w http.ResponseWriter, r *http.Request) error {
	clusterID, name, err := pathNode(r)
	if err != nil {
		return err
	}
	f := readMaintenanceForm(r.PostForm)
	l, err := u.ops.EnterMaintenance(r.Context(), vmActor(r), clusterID, name, operations.MaintenanceRequest{
		MaxParallel: f.MaxParallel, StopUnmovable: f.StopUnmovable, WithLocalDisks: f.WithLocalDisks})
	return u.launched(w, r, clusterID, name, "Entering maintenance on "+name, l.OperationID, err)
}

// leaveMaintenance takes a node out of maintenance and goes to the operation's page.
func (u *UI) leaveMaintenance(w http.ResponseWriter, r *http.Request) error {
	clusterID, name, err := pathNode(r)
	if err != nil {
		return err
	}
	f := readMaintenanceForm(r.PostForm)
	l, err := u.ops.LeaveMaintenance(r.Context(), vmActor(r), clusterID, name, operations.LeaveRequest{MaxParallel: f.MaxParallel})
	return u.launched(w, r, clusterID, name, "Leaving maintenance on "+name, l.OperationID, err)
}

// launched goes to a started operation's page, or back to the node's page with
// the refusal.
func (u *UI) launched(w http.ResponseWriter, r *http.Request, clusterID int64, node, what string, id int64, err error) error {
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence(what + " was refused: " + e.Message)})
		redirect(w, r, nodeURL(clusterID, node))
		return nil
	}
	u.setNotice(w, r, notice{Kind: "ok", Message: what + " has started."})
	redirect(w, r, operationURL(id))
	return nil
}

// rollingURL is the rolling maintenance wizard of a cluster.
func rollingURL(clusterID int64) string {
	return "/clusters/" + strconv.FormatInt(clusterID, 10) + "/rolling"
}

// rollingForm is the wizard's form.
type rollingForm struct {
	Nodes          []string
	Reboot         string
	Hook           string
	MaxParallel    int
	Restore        bool
	PauseOnFailure bool
}

// Has says whether node was ticked.
func (f rollingForm) Has(node string) bool { return slices.Contains(f.Nodes, node) }

func readRollingForm(v url.Values) (rollingForm, operations.RollingRequest) {
	f := rollingForm{Reboot: operations.RebootIfNeeded, MaxParallel: operations.DefaultEvacParallel, Restore: true, PauseOnFailure: true}
	for _, n := range v["node"] {
		if validNode(n) && !slices.Contains(f.Nodes, n) {
			f.Nodes = append(f.Nodes, n)
		}
	}
	switch r := v.Get("reboot"); r {
	case operations.RebootAlways, operations.RebootIfNeeded, operations.RebootNever:
		f.Reboot = r
	}
	if len(v.Get("hook")) <= 64 {
		f.Hook = v.Get("hook")
	}
	if n, err := strconv.Atoi(v.Get("maxParallel")); err == nil {
		f.MaxParallel = n
	}
	if v.Has("maxParallel") { // a sent form: an unticked box is absent
		f.Restore = v.Get("restore") != ""
		f.PauseOnFailure = v.Get("pauseOnFailure") != ""
	}
	restore, pause := f.Restore, f.PauseOnFailure
	return f, operations.RollingRequest{Nodes: f.Nodes, Reboot: f.Reboot, Hook: f.Hook, MaxParallel: f.MaxParallel,
		Restore: &restore, PauseOnFailure: &pause}
}

// rollingView is the wizard's data.
type rollingView struct {
	ClusterID   int64
	ClusterName string
	Nodes       []fleet.NodeView
	CanAct      bool
	Form        rollingForm
	Plan        *operations.RollingPlan
	PlanErr     string
}

// rollingPage is the rolling maintenance wizard: the form, and with ?preview=1
// its plan, a table per node.
func (u *UI) rollingPage(w http.ResponseWriter, r *http.Request) error {
	clusterID, err := strconv.ParseInt(r.PathValue("clusterId"), 10, 64)
	if err != nil || clusterID < 1 {
		return errVMPath("cluster")
	}
	nodes, err := u.fleet.Nodes(r.Context(), actor(r), clusterID)
	if err != nil {
		return err
	}
	v := rollingView{ClusterID: clusterID, Nodes: nodes, CanAct: u.canAct(r.Context(), r, clusterID)}
	if cs, err := u.fleet.Clusters(r.Context(), actor(r)); err == nil {
		if i := slices.IndexFunc(cs, func(c fleet.ClusterView) bool { return c.ID == clusterID }); i >= 0 {
			v.ClusterName = cs[i].Name
		}
	}
	var req operations.RollingRequest
	v.Form, req = readRollingForm(r.URL.Query())
	if v.CanAct && r.URL.Query().Get("preview") == "1" {
		req.DryRun = true
		l, err := u.ops.RollingMaintenance(r.Context(), vmActor(r), clusterID, req)
		if err != nil {
			if _, ok := errs.As(err); !ok {
				return err
			}
			v.PlanErr = errorText(err)
		} else {
			v.Plan = &l.Plan
		}
	}
	u.render(w, r, http.StatusOK, "rolling", u.page(w, r, "Rolling maintenance", "fleet", v))
	return nil
}

// rollingStart starts a rolling maintenance and goes to its live page.
func (u *UI) rollingStart(w http.ResponseWriter, r *http.Request) error {
	clusterID, err := strconv.ParseInt(r.PathValue("clusterId"), 10, 64)
	if err != nil || clusterID < 1 {
		return errVMPath("cluster")
	}
	_, req := readRollingForm(r.PostForm)
	l, err := u.ops.RollingMaintenance(r.Context(), vmActor(r), clusterID, req)
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence("The rolling maintenance was refused: " + e.Message)})
		redirect(w, r, rollingURL(clusterID))
		return nil
	}
	u.setNotice(w, r, notice{Kind: "ok", Message: "The rolling maintenance has started."})
	redirect(w, r, operationURL(l.OperationID))
	return nil
}

// pauseOperation and resumeOperation hold and release a rolling maintenance.
func (u *UI) pauseOperation(w http.ResponseWriter, r *http.Request) error {
	return u.setPause(w, r, true)
}

func (u *UI) resumeOperation(w http.ResponseWriter, r *http.Request) error {
	return u.setPause(w, r, false)
}

func (u *UI) setPause(w http.ResponseWriter, r *http.Request, pause bool) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	act, msg := u.ops.ResumeOperation, "Resumed: it goes on at the step it stopped at."
	if pause {
		act, msg = u.ops.PauseOperation, "Pausing: it stops before its next step; its node stays in maintenance."
	}
	if _, err := act(r.Context(), vmActor(r), id); err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || errors.Is(err, vmops.ErrDenied) {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), Message: sentence(e.Message)})
	} else {
		u.setNotice(w, r, notice{Kind: "info", Message: msg})
	}
	redirect(w, r, operationURL(id))
	return nil
}

// liveRolling is a rolling maintenance as its page and event stream show it.
type liveRolling struct {
	PauseRequested bool              `json:"pauseRequested"`
	Paused         string            `json:"paused,omitempty"`
	Nodes          []liveRollingNode `json:"nodes"`
	Log            []string          `json:"log"`
}

// liveRollingNode is one node's row.
type liveRollingNode struct {
	Node   string `json:"node"`
	Step   string `json:"step"`
	Badge  string `json:"badge"`
	Reboot string `json:"reboot"`
	Enter  int64  `json:"enter,omitempty"`
	Leave  int64  `json:"leave,omitempty"`
	Error  string `json:"error,omitempty"`
}

// liveRoll renders a rolling maintenance's progress; nil for other kinds.
func liveRoll(op operations.View) *liveRolling {
	rv := op.Rolling
	if rv == nil {
		return nil
	}
	l := &liveRolling{PauseRequested: rv.PauseRequested, Paused: rv.Paused, Nodes: []liveRollingNode{}, Log: []string{}}
	for _, n := range rv.Nodes {
		row := liveRollingNode{Node: n.Node, Step: n.Step, Badge: "badge-running", Enter: n.EnterOperation, Leave: n.LeaveOperation,
			Error: n.Error, Reboot: "–"}
		switch {
		case n.Step == "done":
			row.Badge = "badge-ok"
		case n.Step == "pending":
			row.Badge = "badge-stopped"
		case n.Error != "":
			row.Badge = "badge-bad"
		}
		if n.Reboot != nil {
			row.Reboot = "no: " + n.RebootWhy
			if *n.Reboot {
				row.Reboot = "yes: " + n.RebootWhy
			}
		}
		l.Nodes = append(l.Nodes, row)
	}
	for _, line := range rv.Log {
		text := when(line.At) + " "
		if line.Node != "" {
			text += line.Node + ": "
		}
		l.Log = append(l.Log, text+line.Text)
	}
	return l
}
