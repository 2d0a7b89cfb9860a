package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The JSON of a rolling maintenance (api/openapi.yaml: RollingProgress,
// RollingPlan).

type rollingJSON struct {
	Reboot         string            `json:"reboot"`
	Hook           *string           `json:"hook"`
	Restore        bool              `json:"restore"`
	PauseOnFailure bool              `json:"pauseOnFailure"`
	PauseRequested bool              `json:"pauseRequested"`
	Paused         *string           `json:"paused"`
	NooutSet       bool              `json:"nooutSet"`
	Nodes          []rollingNodeJSON `json:"nodes"`
	Log            []rollingLogJSON  `json:"log"`
}

type rollingNodeJSON struct {
	Node           string     `json:"node"`
	Step           string     `json:"step"`
	StepSince      *time.Time `json:"stepSince"`
	EnterOperation *int64     `json:"enterOperation"`
	LeaveOperation *int64     `json:"leaveOperation"`
	Reboot         *bool      `json:"reboot"`
	RebootWhy      *string    `json:"rebootWhy"`
	RebootAskedAt  *time.Time `json:"rebootAskedAt"`
	BackAt         *time.Time `json:"backAt"`
	StartedAt      *time.Time `json:"startedAt"`
	EndedAt        *time.Time `json:"endedAt"`
	Error          *string    `json:"error"`
}

type rollingLogJSON struct {
	At   time.Time `json:"at"`
	Node *string   `json:"node"`
	Text string    `json:"text"`
}

type rollingPlanJSON struct {
	Nodes []rollingPlanNodeJSON `json:"nodes"`
}

type rollingPlanNodeJSON struct {
	Node           string   `json:"node"`
	Reboot         bool     `json:"reboot"`
	RebootWhy      string   `json:"rebootWhy"`
	PendingUpdates int      `json:"pendingUpdates"`
	Drain          planJSON `json:"drain"`
}

// nullID is id, or null when 0.
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

func toRollingJSON(v *operations.RollingView) *rollingJSON {
	if v == nil {
		return nil
	}
	out := &rollingJSON{Reboot: v.Reboot, Hook: nullStr(v.Hook), Restore: v.Restore, PauseOnFailure: v.PauseOnFailure,
		PauseRequested: v.PauseRequested, Paused: nullStr(v.Paused), NooutSet: v.NooutSet,
		Nodes: make([]rollingNodeJSON, 0, len(v.Nodes)), Log: make([]rollingLogJSON, 0, len(v.Log))}
	for _, n := range v.Nodes {
		out.Nodes = append(out.Nodes, rollingNodeJSON{Node: n.Node, Step: n.Step, StepSince: timeOrNull(n.StepSince),
			EnterOperation: nullID(n.EnterOperation), LeaveOperation: nullID(n.LeaveOperation), Reboot: n.Reboot,
			RebootWhy: nullStr(n.RebootWhy), RebootAskedAt: timeOrNull(n.RebootAskedAt), BackAt: timeOrNull(n.BackAt),
			StartedAt: timeOrNull(n.StartedAt), EndedAt: timeOrNull(n.EndedAt), Error: nullStr(n.Error)})
	}
	for _, l := range v.Log {
		out.Log = append(out.Log, rollingLogJSON{At: l.At.UTC(), Node: nullStr(l.Node), Text: l.Text})
	}
	return out
}

func toRollingPlanJSON(p operations.RollingPlan) rollingPlanJSON {
	out := rollingPlanJSON{Nodes: make([]rollingPlanNodeJSON, 0, len(p.Nodes))}
	for _, n := range p.Nodes {
		out.Nodes = append(out.Nodes, rollingPlanNodeJSON{Node: n.Node, Reboot: n.Reboot, RebootWhy: n.RebootWhy,
			PendingUpdates: n.PendingUpdates, Drain: toPlanJSON(n.Drain)})
	}
	return out
}

func (s *Server) rollingMaintenance(w http.ResponseWriter, r *http.Request) error {
	clusterID, err := pathClusterID(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	var in struct {
		Nodes          []string `json:"nodes"`
		Reboot         *string  `json:"reboot"`
		Hook           *string  `json:"hook"`
		MaxParallel    *int64   `json:"maxParallel"`
		Restore        *bool    `json:"restore"`
		PauseOnFailure *bool    `json:"pauseOnFailure"`
		WithLocalDisks *bool    `json:"withLocalDisks"`
		DryRun         *bool    `json:"dryRun"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	if len(in.Nodes) > 64 {
		return errs.E(errs.Invalid, "nodes lists at most 64 nodes")
	}
	for _, n := range in.Nodes {
		if !vmops.ValidNode(n) {
			return errs.E(errs.Invalid, "node %q is not a PVE node name", safeText(n))
		}
	}
	req := operations.RollingRequest{Nodes: in.Nodes, Reboot: deref(in.Reboot), Hook: deref(in.Hook), Restore: in.Restore,
		PauseOnFailure: in.PauseOnFailure, WithLocalDisks: deref(in.WithLocalDisks), DryRun: deref(in.DryRun)}
	if req.MaxParallel, err = maxParallel(in.MaxParallel); err != nil {
		return err
	}
	l, err := s.ops.RollingMaintenance(r.Context(), vmActor(r), clusterID, req)
	if err != nil {
		return err
	}
	if l.OperationID == 0 {
		writeData(w, map[string]any{"plan": toRollingPlanJSON(l.Plan)})
		return nil
	}
	w.Header().Set("Location", operationPath(l.OperationID))
	writeAccepted(w, "accepted: the operation runs; follow it at its Location",
		map[string]any{"operationId": l.OperationID, "plan": toRollingPlanJSON(l.Plan)})
	return nil
}

func (s *Server) pauseOperation(w http.ResponseWriter, r *http.Request) error {
	return s.setPause(w, r, s.ops.PauseOperation)
}

func (s *Server) resumeOperation(w http.ResponseWriter, r *http.Request) error {
	return s.setPause(w, r, s.ops.ResumeOperation)
}

func (s *Server) setPause(w http.ResponseWriter, r *http.Request,
	act func(context.Context, vmops.Actor, int64) (operations.View, error)) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	v, err := act(r.Context(), vmActor(r), id)
	if err != nil {
		return err
	}
	writeData(w, toOperationJSON(v))
	return nil
}

func (s *Server) nodeUpdates(w http.ResponseWriter, r *http.Request) error {
	clusterID, node, err := pathNode(r)
	if err != nil {
		return err
	}
	ups, err := s.ops.NodeUpdates(r.Context(), vmActor(r), clusterID, node)
	if err != nil {
		return err
	}
	type updateJSON struct {
		Package   string `json:"package"`
		Installed string `json:"installed"`
		Candidate string `json:"candidate"`
		Title     string `json:"title"`
	}
	out := make([]updateJSON, 0, len(ups))
	for _, u := range ups {
		out = append(out, updateJSON(u))
	}
	writeData(w, out)
	return nil
}

func (s *Server) refreshNodeUpdates(w http.ResponseWriter, r *http.Request) error {
	clusterID, node, err := pathNode(r)
	if err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	upid, err := s.ops.RefreshNodeUpdates(r.Context(), vmActor(r), clusterID, node)
	if err != nil {
		return err
	}
	w.Header().Set("X-Task-Id", upid)
	w.Header().Set("Location", taskPath(upid)+"?clusterId="+strconv.FormatInt(clusterID, 10))
	writeAccepted(w, "accepted: PVE's apt update runs; follow its task at Location", map[string]string{"taskId": upid})
	return nil
}
