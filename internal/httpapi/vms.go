package httpapi

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// guestKindRoutes are the kinds of guest the API serves, each under its own path
// segment: /api/v1/pve/vm/… for QEMU VMs (the seed API), /api/v1/pve/lxc/… for
// LXC containers. A kind is a row here; the handlers are the same for every kind
// and the use cases apply the kind's rules (docs/decisions/0080).
var guestKindRoutes = []struct {
	segment string
	kind    vmops.GuestKind
	suspend bool // suspend and resume: QEMU only (PVE's container suspend is experimental)
}{
	{"vm", vmops.GuestVM, true},
	{"lxc", vmops.GuestCT, false},
}

// vmRoutes are the guest operations and the task queries. Every one needs a
// token; each use case checks the caller's grant on the cluster (operator for
// writes, viewer for reads) after judging the request and before anything
// touches PVE. Every write takes an Idempotency-Key (keyed).
func (s *Server) vmRoutes() []route {
	var out []route
	for _, k := range guestKindRoutes {
		g := "/api/v1/pve/" + k.segment + "/{clusterId}/{node}/{vmid}"
		out = append(out,
			route{"POST", g + "/start", authed, s.keyed(s.vmStart(k.kind))},
			route{"POST", g + "/stop", authed, s.keyed(s.vmStop(k.kind))},
			route{"POST", g + "/reboot", authed, s.keyed(s.vmReboot(k.kind))},
		)
		if k.suspend {
			out = append(out,
				route{"POST", g + "/suspend", authed, s.keyed(s.vmSuspend(k.kind))}, // suspend.go
				route{"POST", g + "/resume", authed, s.keyed(s.vmResume(k.kind))},
			)
		} else {
			// Keyed like every write under /pve/: a client sends its key with
			// each, and the refusal releases it.
			why := "PVE marks a container's suspend experimental (CRIU); stop it instead"
			out = append(out,
				route{"POST", g + "/suspend", authed, s.keyed(notOffered(k.kind, "suspend", why))}, // guests.go
				route{"POST", g + "/resume", authed, s.keyed(notOffered(k.kind, "resume", why))},
			)
		}
		out = append(out,
			route{"POST", g + "/migrate", authed, s.keyed(s.vmMigrate(k.kind))},
			route{"GET", g + "/migrate", authed, s.vmMigrateCheck(k.kind)},
		)
	}
	return append(out,
		route{"GET", "/api/v1/pve/task/{taskId}", authed, s.task},
		route{"DELETE", "/api/v1/pve/task/{taskId}", authed, s.abortTask}, // abort.go
		route{"GET", "/api/v1/pve/task/{taskId}/log", authed, s.taskLog},
		route{"GET", "/api/v1/pve/task/{taskId}/events", authed, s.taskEvents},
		route{"GET", "/api/v1/pve/tasks", authed, s.tasks},
	)
}

// pathVM reads and validates {clusterId}/{node}/{vmid} of a VM's route.
func pathVM(r *http.Request) (vmops.GuestRef, error) { return pathGuest(r, vmops.GuestVM) }

// pathGuest reads and validates {clusterId}/{node}/{vmid} of a route of kind's.
func pathGuest(r *http.Request, kind vmops.GuestKind) (vmops.GuestRef, error) {
	id, err := pathClusterID(r)
	if err != nil {
		return vmops.GuestRef{}, err
	}
	node := r.PathValue("node")
	if !vmops.ValidNode(node) {
		return vmops.GuestRef{}, errs.E(errs.Invalid, "node %q is not a PVE node name", safeText(node))
	}
	vmid, err := parseIntParam("vmid", r.PathValue("vmid"), vmops.MinVMID, vmops.MaxVMID)
	if err != nil {
		return vmops.GuestRef{}, err
	}
	return vmops.GuestRef{ClusterID: id, Node: node, Kind: kind, VMID: vmid}, nil
}

// queryOne returns a query parameter given at most once ("" when absent).
func queryOne(r *http.Request, name string) (string, error) {
	vs := query(r)[name]
	if len(vs) > 1 {
		return "", errs.E(errs.Invalid, "%s given more than once", name)
	}
	if len(vs) == 0 {
		return "", nil
	}
	return vs[0], nil
}

// taskPath is the API path of a task.
func taskPath(upid string) string { return "/api/v1/pve/task/" + url.PathEscape(upid) }

// powerQuery is what the power routes read from the query string.
type powerQuery struct {
	wait    time.Duration
	timeout *int
	force   bool
	toDisk  bool // suspend
}

func readPowerQuery(r *http.Request, withForce bool) (powerQuery, error) {
	allowed := []string{"wait", "timeout"}
	if withForce {
		allowed = append(allowed, "force")
	}
	if err := checkQuery(r, allowed...); err != nil {
		return powerQuery{}, err
	}
	var q powerQuery
	wait, err := queryInt(r, "wait", int64(vmops.DefaultWait/time.Second), 0, int64(vmops.MaxPowerWait/time.Second))
	if err != nil {
		return q, err
	}
	q.wait = time.Duration(wait) * time.Second
	if _, ok := query(r)["timeout"]; ok {
		t, err := queryInt(r, "timeout", 0, 0, 86400)
		if err != nil {
			return q, err
		}
		n := int(t)
		q.timeout = &n
	}
	if withForce {
		f, err := queryOne(r, "force")
		if err != nil {
			return q, err
		}
		if q.force, err = parseBool("force", f, false); err != nil {
			return q, err
		}
	}
	return q, nil
}

func (s *Server) vmStart(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.power(w, r, kind, true, func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, q powerQuery) (vmops.Outcome, error) {
			return s.vms.Start(ctx, a, vm, vmops.PowerOptions{Timeout: q.timeout, Wait: q.wait, Force: q.force})
		})
	}
}

func (s *Server) vmStop(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.power(w, r, kind, true, func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, q powerQuery) (vmops.Outcome, error) {
			return s.vms.Stop(ctx, a, vm, vmops.StopOptions{Force: q.force, Timeout: q.timeout, Wait: q.wait})
		})
	}
}

func (s *Server) vmReboot(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.power(w, r, kind, false, func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, q powerQuery) (vmops.Outcome, error) {
			return s.vms.Reboot(ctx, a, vm, vmops.PowerOptions{Timeout: q.timeout, Wait: q.wait})
		})
	}
}

// power is the common handler of start, stop and reboot: decode, run the use case
// (which checks the operator grant) once per Idempotency-Key, answer 200 when the task ended well,
// 202 with Location while it runs, the mapped error when it failed. Every answer
// that started a task carries X-Task-Id.
func (s *Server) power(w http.ResponseWriter, r *http.Request, kind vmops.GuestKind, withForce bool,
	op func(context.Context, vmops.Actor, vmops.GuestRef, powerQuery) (vmops.Outcome, error)) error {
	return s.powerWith(w, r, kind, func(r *http.Request) (powerQuery, error) { return readPowerQuery(r, withForce) }, op)
}

// powerWith is power with the route's own reading of the query string.
func (s *Server) powerWith(w http.ResponseWriter, r *http.Request, kind vmops.GuestKind, read func(*http.Request) (powerQuery, error),
	op func(context.Context, vmops.Actor, vmops.GuestRef, powerQuery) (vmops.Outcome, error)) error {
	vm, err := pathGuest(r, kind)
	if err != nil {
		return err
	}
	q, err := read(r)
	if err != nil {
		return err
	}
	if err := requireNoBody(w, r); err != nil {
		return err
	}
	out, err := op(r.Context(), vmActor(r), vm, q)
	return renderPower(w, out, withRightPath(r, vm, err))
}

// renderPower answers a power operation: 200 when its task ended well, 202 with
// Location while it runs, the mapped error when it failed. Every answer that
// started a task carries X-Task-Id; one whose outcome is unknown X-Operation-Id
// and Location (outcomeHeaders).
func renderPower(w http.ResponseWriter, out vmops.Outcome, err error) error {
	if out.TaskID != "" {
		w.Header().Set("X-Task-Id", out.TaskID)
	}
	if err != nil {
		outcomeHeaders(w, err)
		return err
	}
	if out.Running {
		w.Header().Set("Location", taskPath(out.TaskID))
		writeAccepted(w, "accepted: the task is still running", nil)
		return nil
	}
	writeOK(w)
	return nil
}

// clampInt is n as an int, saturated where int is narrower than int64, so that
// the use case's range check sees a number out of range as one.
func clampInt(n int64) int { return int(max(min(n, math.MaxInt), math.MinInt)) }

// renderMigrate answers a migration: its task id at once.
func renderMigrate(w http.ResponseWriter, upid string, err error) error {
	if err != nil {
		outcomeHeaders(w, err)
		return err
	}
	w.Header().Set("X-Task-Id", upid)
	writeData(w, map[string]string{"taskId": upid})
	return nil
}

// outcomeHeaders names, on an outcome_unknown answer, vmgate's task row and where
// to follow it (Location): vmgate keeps looking for the task and fills the row
// (issue 10 (docs/history.md)). The header is X-Operation-Id because issue 10 (docs/history.md) names it so; its
// value is the row's task reference, the body's and every task view's
// `taskRef` (not the `operationId` of an operation on many VMs).
func outcomeHeaders(w http.ResponseWriter, err error) {
	if id, ok := vmops.TaskRefOf(err); ok {
		w.Header().Set("X-Operation-Id", strconv.FormatInt(id, 10))
		w.Header().Set("Location", taskPath(strconv.FormatInt(id, 10)))
	}
}

func (s *Server) vmMigrate(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error { return s.migrate(w, r, kind) }
}

// migrate decodes a migration request; the use case judges it (vmops.Migrate).
func (s *Server) migrate(w http.ResponseWriter, r *http.Request, kind vmops.GuestKind) error {
	vm, err := pathGuest(r, kind)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	var in struct {
		Target         *string `json:"target"`
		Online         *bool   `json:"online"`
		WithLocalDisks *bool   `json:"withLocalDisks"`
		TargetStorage  *string `json:"targetStorage"`
		BWLimit        *int64  `json:"bwlimit"`
		Restart        *bool   `json:"restart"` // containers
		Timeout        *int64  `json:"timeout"` // containers: the restart's shutdown timeout
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := vmops.MigrateRequest{Online: in.Online}
	if in.Target != nil {
		req.Target = *in.Target
	}
	req.Restart = in.Restart
	if in.Timeout != nil {
		n := clampInt(*in.Timeout)
		req.Timeout = &n
	}
	if in.WithLocalDisks != nil {
		req.WithLocalDisks = *in.WithLocalDisks
	}
	if in.TargetStorage != nil {
		req.TargetStorage = *in.TargetStorage
	}
	if in.BWLimit != nil {
		n := clampInt(*in.BWLimit)
		req.BWLimit = &n
	}
	upid, err := s.vms.Migrate(r.Context(), vmActor(r), vm, req)
	return renderMigrate(w, upid, withRightPath(r, vm, err))
}

// precheckJSON is PVE's migration pre-check as vmgate shows it. The node lists are
// null, with a note, when PVE did not say (a running VM on PVE before 8.4): unknown
// must never read as "no node allowed".
type precheckJSON struct {
	Running         bool                      `json:"running"`
	AllowedNodes    []string                  `json:"allowedNodes"`
	NotAllowedNodes map[string]notAllowedJSON `json:"notAllowedNodes"`
	LocalDisks      []localDiskJSON           `json:"localDisks"`
	LocalResources  []string                  `json:"localResources"`
	Note            *string                   `json:"note"`
}

type notAllowedJSON struct {
	UnavailableStorages  []string `json:"unavailableStorages"`
	UnavailableResources []string `json:"unavailableResources"`
	BlockingHAResources  []string `json:"blockingHaResources"`
}

type localDiskJSON struct {
	Volid     string `json:"volid"`
	DriveName string `json:"driveName"`
	Size      int64  `json:"size"`
	CDROM     bool   `json:"cdrom"`
	Unused    bool   `json:"unused"`
}

func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func toPrecheckJSON(pc vmops.Precheck) precheckJSON {
	out := precheckJSON{Running: pc.Running, LocalDisks: []localDiskJSON{}, LocalResources: strs(pc.LocalResources),
		Note: nullIfEmpty(pc.Note)}
	if pc.NodesKnown {
		out.AllowedNodes, out.NotAllowedNodes = strs(pc.AllowedNodes), map[string]notAllowedJSON{}
	}
	for node, na := range pc.NotAllowedNodes {
		ha := []string{}
		for _, h := range na.BlockingHAResources {
			ha = append(ha, h.SID+" ("+h.Cause+")")
		}
		out.NotAllowedNodes[node] = notAllowedJSON{UnavailableStorages: strs(na.UnavailableStorages),
			UnavailableResources: strs(na.UnavailableResources), BlockingHAResources: ha}
	}
	for _, d := range pc.LocalDisks {
		out.LocalDisks = append(out.LocalDisks, localDiskJSON{Volid: d.Volid, DriveName: d.DriveName, Size: d.Size,
			CDROM: d.CDROM, Unused: d.Unused})
	}
	return out
}

func (s *Server) vmMigrateCheck(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error { return s.migrateCheck(w, r, kind) }
}

func (s *Server) migrateCheck(w http.ResponseWriter, r *http.Request, kind vmops.GuestKind) error {
	vm, err := pathGuest(r, kind)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "target"); err != nil {
		return err
	}
	target, err := queryOne(r, "target")
	if err != nil {
		return err
	}
	pc, err := s.vms.MigrateCheck(r.Context(), vmActor(r), vm, target)
	if err != nil {
		return withRightPath(r, vm, err)
	}
	writeData(w, toPrecheckJSON(pc))
	return nil
}
