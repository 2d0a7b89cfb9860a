package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// operationRoutes start, read, follow and cancel operations. Starting and
// cancelling need an operator grant on the cluster, reading a viewer grant.
func (s *Server) operationRoutes() []route {
	return append([]route{
		{"POST", "/api/v1/pve/clusters/{clusterId}/nodes/{node}/evacuate", authed, s.keyed(s.evacuate)},
		{"POST", "/api/v1/pve/clusters/{clusterId}/bulk/{action}", authed, s.keyed(s.bulk)},
		{"GET", "/api/v1/pve/operations", authed, s.listOperations},
		{"GET", "/api/v1/pve/operations/{id}", authed, s.getOperation},
		{"GET", "/api/v1/pve/operations/{id}/events", authed, s.operationEvents},
		{"DELETE", "/api/v1/pve/operations/{id}", authed, s.cancelOperation},
	}, s.maintenanceRoutes()...)
}

// operationPath is the API path of an operation.
func operationPath(id int64) string { return "/api/v1/pve/operations/" + strconv.FormatInt(id, 10) }

// The JSON shapes (api/openapi.yaml: Operation, OperationItem, Plan).

type operationJSON struct {
	ID              int64      `json:"id"`
	Kind            string     `json:"kind"`
	ClusterID       int64      `json:"clusterId"`
	Node            *string    `json:"node"`
	Status          string     `json:"status"`
	CreatedBy       string     `json:"createdBy"`
	CreatedAt       time.Time  `json:"createdAt"`
	StartedAt       *time.Time `json:"startedAt"`
	EndedAt         *time.Time `json:"endedAt"`
	MaxParallel     int        `json:"maxParallel"`
	CancelRequested bool       `json:"cancelRequested"`
	Abort           bool       `json:"abort"`
	Counts          countsJSON `json:"counts"`
	Items           []itemJSON `json:"items"`
	// Left: an evacuation's guests still on its node once it ended, and why.
	Left []leftJSON `json:"left"`
	// Rolling: a rolling maintenance's progress; null for other kinds.
	Rolling *rollingJSON `json:"rolling"`
}

type leftJSON struct {
	VMID int64  `json:"vmid"`
	Type string `json:"type"`
	Name string `json:"name"`
	Why  string `json:"why"`
}

type countsJSON struct {
	Total   int `json:"total"`
	Pending int `json:"pending"`
	Running int `json:"running"`
	OK      int `json:"ok"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

type itemJSON struct {
	VMID     int64             `json:"vmid"`
	Type     string            `json:"type"`
	Name     string            `json:"name"`
	Node     string            `json:"node"`
	Target   *string           `json:"target"`
	Action   string            `json:"action"`
	Online   bool              `json:"online"`
	HA       bool              `json:"ha"`
	MemBytes int64             `json:"memBytes"`
	State    string            `json:"state"`
	TaskID   *string           `json:"taskId"`
	Error    *string           `json:"error"`
	Progress *itemProgressJSON `json:"progress"`
	Downtime *downtimeJSON     `json:"downtime"`
	Warning  *string           `json:"warning"`
}

// downtimeJSON is a running container's expected downtime in its restart
// migration.
type downtimeJSON struct {
	Seconds int64  `json:"seconds"`
	Basis   string `json:"basis"`
}

type planJSON struct {
	Items   []itemJSON   `json:"items"`
	Targets []targetJSON `json:"targets"`
}

type targetJSON struct {
	Node       string `json:"node"`
	Status     string `json:"status"`
	Eligible   bool   `json:"eligible"`
	Mem        int64  `json:"mem"`
	MaxMem     int64  `json:"maxMem"`
	PlannedMem int64  `json:"plannedMem"`
	VMs        int    `json:"vms"`
}

// itemProgressJSON is a migration's progress, as a task shows it.
type itemProgressJSON struct {
	Percent          float64 `json:"percent"`
	TransferredBytes int64   `json:"transferredBytes"`
	TotalBytes       int64   `json:"totalBytes"`
	BytesPerSecond   int64   `json:"bytesPerSecond"`
	Phase            string  `json:"phase"`
	DowntimeSeconds  *int64  `json:"downtimeSeconds"`
}

// nullStr is s, or null when empty.
func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toItemsJSON(items []operations.ItemView) []itemJSON {
	out := make([]itemJSON, 0, len(items))
	for _, it := range items {
		j := itemJSON{VMID: it.VMID, Type: kindName(it.Kind), Name: it.Name, Node: it.Node, Target: nullStr(it.Target),
			Action: it.Action, Online: it.Online, HA: it.HA, MemBytes: it.MemBytes, State: it.State,
			TaskID: nullStr(it.TaskID), Error: nullStr(it.Error), Warning: nullStr(it.Warning)}
		if d := it.Downtime; d != nil {
			j.Downtime = &downtimeJSON{Seconds: d.Seconds, Basis: d.Basis}
		}
		if p := it.Progress; p != nil {
			j.Progress = &itemProgressJSON{Percent: p.Percent, TransferredBytes: p.TransferredBytes, TotalBytes: p.TotalBytes,
				BytesPerSecond: p.BytesPerSecond, Phase: p.Phase, DowntimeSeconds: p.DowntimeSeconds}
		}
		out = append(out, j)
	}
	return out
}

func toOperationJSON(v operations.View) operationJSON {
	c := v.Counts
	return operationJSON{ID: v.ID, Kind: v.Kind, ClusterID: v.ClusterID, Node: nullStr(v.Node), Status: v.Status,
		CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt.UTC(), StartedAt: timeOrNull(v.StartedAt), EndedAt: timeOrNull(v.EndedAt),
		MaxParallel: v.MaxParallel, CancelRequested: v.CancelRequested, Abort: v.Abort,
		Counts: countsJSON{Total: c.Total, Pending: c.Pending, Running: c.Running, OK: c.OK, Failed: c.Failed, Skipped: c.Skipped},
		Items:  toItemsJSON(v.Items), Left: toLeftJSON(v.Left), Rolling: toRollingJSON(v.Rolling)}
}

func toLeftJSON(left []operations.LeftGuest) []leftJSON {
	out := make([]leftJSON, 0, len(left))
	for _, g := range left {
		out = append(out, leftJSON{VMID: g.VMID, Type: kindName(g.Kind), Name: g.Name, Why: g.Why})
	}
	return out
}

// kindName is a guest kind as the API writes it: qemu or lxc.
func kindName(k vmops.GuestKind) string {
	if k == "" {
		return string(vmops.GuestVM)
	}
	return string(k)
}

// guestType reads an optional guest type (qemu or lxc) of a request body.
func guestType(name string, v *string) (vmops.GuestKind, error) {
	if v == nil {
		return "", nil
	}
	if k := vmops.GuestKind(*v); k == vmops.GuestVM || k == vmops.GuestCT {
		return k, nil
	}
	return "", errs.E(errs.Invalid, "%s must be qemu or lxc", name)
}

func toPlanJSON(p operations.Plan) planJSON {
	out := planJSON{Items: toItemsJSON(p.Items), Targets: make([]targetJSON, 0, len(p.Targets))}
	for _, t := range p.Targets {
		out.Targets = append(out.Targets, targetJSON{Node: t.Node, Status: t.Status, Eligible: t.Eligible, Mem: t.Mem,
			MaxMem: t.MaxMem, PlannedMem: t.PlannedMem, VMs: t.VMs})
	}
	return out
}

// launched answers a started operation 202 with its id and plan (Location: the
// operation), a dry run 200 with the plan alone.
func launched(w http.ResponseWriter, l operations.Launched, err error) error {
	if err != nil {
		return err
	}
	if l.OperationID == 0 {
		writeData(w, map[string]any{"plan": toPlanJSON(l.Plan)})
		return nil
	}
	w.Header().Set("Location", operationPath(l.OperationID))
	writeAccepted(w, "accepted: the operation runs; follow it at its Location",
		map[string]any{"operationId": l.OperationID, "plan": toPlanJSON(l.Plan)})
	return nil
}

func (s *Server) evacuate(w http.ResponseWriter, r *http.Request) error {
	clusterID, err := pathClusterID(r)
	if err != nil {
		return err
	}
	node := r.PathValue("node")
	if !vmops.ValidNode(node) {
		return errs.E(errs.Invalid, "node %q is not a PVE node name", safeText(node))
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	var in struct {
		Targets        []string `json:"targets"`
		MaxParallel    *int64   `json:"maxParallel"`
		WithLocalDisks *bool    `json:"withLocalDisks"`
		IncludeStopped *bool    `json:"includeStopped"`
		StopOnError    *bool    `json:"stopOnError"`
		DryRun         *bool    `json:"dryRun"`
		Type           *string  `json:"type"`
		Timeout        *int64   `json:"timeout"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := operations.EvacuateRequest{IncludeStopped: in.IncludeStopped, WithLocalDisks: deref(in.WithLocalDisks),
		StopOnError: deref(in.StopOnError), DryRun: deref(in.DryRun)}
	if req.Type, err = guestType("type", in.Type); err != nil {
		return err
	}
	if in.Timeout != nil {
		if *in.Timeout < 0 || *in.Timeout > 3600 {
			return errs.E(errs.Invalid, "timeout must be from 0 to 3600 seconds")
		}
		t := int(*in.Timeout)
		req.Timeout = &t
	}
	if len(in.Targets) > 64 {
		return errs.E(errs.Invalid, "targets lists at most 64 nodes")
	}
	for _, t := range in.Targets {
		if !vmops.ValidNode(t) {
			return errs.E(errs.Invalid, "target %q is not a PVE node name", safeText(t))
		}
	}
	req.Targets = in.Targets
	if req.MaxParallel, err = maxParallel(in.MaxParallel); err != nil {
		return err
	}
	l, err := s.ops.Evacuate(r.Context(), vmActor(r), clusterID, node, req)
	return launched(w, l, err)
}

func (s *Server) bulk(w http.ResponseWriter, r *http.Request) error {
	clusterID, err := pathClusterID(r)
	if err != nil {
		return err
	}
	action := r.PathValue("action")
	known := false
	for _, a := range operations.BulkActions {
		known = known || a == action
	}
	if !known {
		return errs.E(errs.Invalid, "action must be start, stop, reboot, suspend or resume")
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	var in struct {
		VMIDs    []int64 `json:"vmids"`
		Selector *struct {
			Type   *string `json:"type"`
			Node   *string `json:"node"`
			Tag    *string `json:"tag"`
			Status *string `json:"status"`
		} `json:"selector"`
		Force       *bool  `json:"force"`
		ToDisk      *bool  `json:"toDisk"`
		MaxParallel *int64 `json:"maxParallel"`
		StopOnError *bool  `json:"stopOnError"`
		DryRun      *bool  `json:"dryRun"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := operations.BulkRequest{VMIDs: in.VMIDs, Force: deref(in.Force), ToDisk: deref(in.ToDisk),
		StopOnError: deref(in.StopOnError), DryRun: deref(in.DryRun)}
	if sel := in.Selector; sel != nil {
		req.Selector = &operations.Selector{Node: deref(sel.Node), Tag: deref(sel.Tag), Status: deref(sel.Status)}
		if req.Selector.Type, err = guestType("selector type", sel.Type); err != nil {
			return err
		}
	}
	if req.MaxParallel, err = maxParallel(in.MaxParallel); err != nil {
		return err
	}
	l, err := s.ops.Bulk(r.Context(), vmActor(r), clusterID, action, req)
	return launched(w, l, err)
}

// maxParallel reads an operation's optional maxParallel: 1 to
// operations.MaxParallelLimit, or 0 (the default) when absent.
func maxParallel(p *int64) (int, error) {
	if p == nil {
		return 0, nil
	}
	if *p < 1 || *p > operations.MaxParallelLimit {
		return 0, errs.E(errs.Invalid, "maxParallel must be from 1 to %d", operations.MaxParallelLimit)
	}
	return int(*p), nil
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// pathOperation reads {id}.
func pathOperation(r *http.Request) (int64, error) {
	return parseIntParam("id", r.PathValue("id"), 1, 1<<53)
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	v, err := s.ops.Operation(r.Context(), vmActor(r), id)
	if err != nil {
		return err
	}
	writeData(w, toOperationJSON(v))
	return nil
}

func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "clusterId", "limit", "before"); err != nil {
		return err
	}
	clusterID, err := queryInt(r, "clusterId", 0, 1, 1<<53)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 50, 1, 200)
	if err != nil {
		return err
	}
	before, err := queryInt(r, "before", 0, 1, 1<<53)
	if err != nil {
		return err
	}
	f := operations.Filter{ClusterID: clusterID, BeforeID: before, Limit: int(limit)}
	list, err := s.ops.ListOperations(r.Context(), vmActor(r), f)
	if err != nil {
		return err
	}
	out := make([]operationJSON, 0, len(list))
	for _, v := range list {
		out = append(out, toOperationJSON(v))
	}
	writeData(w, out)
	return nil
}

func (s *Server) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "abort"); err != nil {
		return err
	}
	v, err := queryOne(r, "abort")
	if err != nil {
		return err
	}
	abort, err := parseBool("abort", v, false)
	if err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	op, err := s.ops.CancelOperation(r.Context(), vmActor(r), id, abort)
	if err != nil {
		return err
	}
	writeData(w, toOperationJSON(op))
	return nil
}

// operationEvents streams the operation as server-sent events ("event:
// operation") each time it changes, until it ends ("event: end"), the client
// goes away, or vmgate drains ("event: shutdown" with a retry hint; the
// operation goes on). Errors found before the first event are answered as usual.
func (s *Server) operationEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := pathOperation(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	a := vmActor(r)
	follow := func(ctx context.Context, emit func(operations.View) error) error {
		return s.ops.OperationEvents(ctx, a, id, emit)
	}
	return eventStream(w, r, s.streams, "operation", follow, func(v operations.View) ([]byte, error) {
		return json.Marshal(toOperationJSON(v))
	})
}

// operationsCollector exposes the operations' figures of this process: how many
// ended, by kind and final status, and how many items are at PVE now.
type operationsCollector struct {
	stats func() operations.Stats
}

var (
	operationsTotal = prometheus.NewDesc("vmgate_operations_total",
		"Operations on many VMs this process brought to an end, by kind and final status.", []string{"kind", "status"}, nil)
	operationItemsInFlight = prometheus.NewDesc("vmgate_operation_items_in_flight",
		"Items of operations this process has started at PVE and not yet seen end.", nil, nil)
)

func (c operationsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- operationsTotal
	ch <- operationItemsInFlight
}

func (c operationsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for k, n := range st.Ended {
		ch <- prometheus.MustNewConstMetric(operationsTotal, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(operationItemsInFlight, prometheus.GaugeValue, float64(st.InFlight))
}
