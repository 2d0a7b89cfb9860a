package pvesim

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// route is one API method the emulator serves. Proxying, the permission check
// and token permission come from PVE's schema for the method; uses lists the
// parameters the handler acts on (every other schema parameter is validated
// and then ignored).
type route struct {
	method     string
	path       string // PVE's path, with {placeholders}
	parts      []string
	uses       []string // the parameters acted on that this release's schema has
	declared   []string // every parameter the handler may read (uses, in every release)
	handle     func(*request) response
	schema     *methodSchema
	proxy      bool
	allowToken bool
	permPath   string // "/vms/{vmid}"; empty when any authenticated user may call
	permPriv   string
}

func (rt *route) declares(name string) bool {
	for _, u := range rt.declared {
		if u == name {
			return true
		}
	}
	return false
}

func (rt *route) has(name string) bool {
	for _, u := range rt.uses {
		if u == name {
			return true
		}
	}
	return false
}

// routeSpecs is every method the emulator serves, in one place; each
// release's routes are built from it and the release's schema.
var routeSpecs = []route{
	{method: "GET", path: "/version", handle: hVersion},
	{method: "GET", path: "/access/ticket", handle: hTicketGet},
	{method: "POST", path: "/access/ticket", uses: []string{"username", "password", "realm", "path", "privs"}, handle: hTicketPost},
	{method: "GET", path: "/nodes", handle: hNodes},
	{method: "GET", path: "/cluster/status", handle: hClusterStatus},
	{method: "GET", path: "/cluster/resources", uses: []string{"type"}, handle: hClusterResources},
	{method: "GET", path: "/cluster/tasks", handle: hClusterTasks},
	{method: "GET", path: "/nodes/{node}/qemu", uses: []string{"node", "full"}, handle: hVMList},
	{method: "GET", path: "/nodes/{node}/qemu/{vmid}/status/current", uses: []string{"node", "vmid"}, handle: hVMStatus},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/start",
		uses:   []string{"node", "vmid", "skiplock", "stateuri", "migratedfrom", "migration_type", "migration_network", "targetstorage", "force-cpu", "with-conntrack-state", "nets-host-mtu"},
		handle: hStart},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/stop",
		uses:   []string{"node", "vmid", "skiplock", "keepActive", "migratedfrom", "timeout", "overrule-shutdown"},
		handle: hStop},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/shutdown",
		uses:   []string{"node", "vmid", "skiplock", "keepActive", "timeout", "forceStop"},
		handle: hShutdown},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/reboot", uses: []string{"node", "vmid", "timeout"}, handle: hReboot},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/reset", uses: []string{"node", "vmid", "skiplock"}, handle: hReset},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/suspend", uses: []string{"node", "vmid", "skiplock", "todisk", "statestorage"}, handle: hSuspend},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/status/resume", uses: []string{"node", "vmid", "skiplock", "nocheck"}, handle: hResume},
	{method: "GET", path: "/nodes/{node}/qemu/{vmid}/migrate", uses: []string{"node", "vmid", "target"}, handle: hMigratePrecondition},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/migrate",
		uses:   []string{"node", "vmid", "target", "online", "force", "migration_type", "migration_network", "with-local-disks", "targetstorage", "bwlimit", "with-conntrack-state"},
		handle: hMigrate},
	// Remote migration (remotemigrate.go, mtunnel.go, remote.go).
	{method: "GET", path: "/nodes/{node}/qemu/{vmid}/config", uses: []string{"node", "vmid"}, handle: hVMConfig},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/remote_migrate",
		uses:   []string{"node", "vmid", "target-vmid", "target-endpoint", "online", "delete", "target-storage", "target-bridge", "bwlimit"},
		handle: hRemoteMigrate},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/mtunnel", uses: []string{"node", "vmid", "storages", "bridges"}, handle: hMtunnel},
	{method: "GET", path: "/nodes/{node}/qemu/{vmid}/mtunnelwebsocket", uses: []string{"node", "vmid", "socket", "ticket"}, handle: hMtunnelWebsocket},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/remote_migrate",
		uses:   []string{"node", "vmid", "target-vmid", "target-endpoint", "online", "restart", "timeout", "delete", "target-storage", "target-bridge", "bwlimit"},
		handle: hCTRemoteMigrate},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/mtunnel", uses: []string{"node", "vmid", "storages", "bridges"}, handle: hCTMtunnel},
	{method: "GET", path: "/nodes/{node}/lxc/{vmid}/mtunnelwebsocket", uses: []string{"node", "vmid", "socket", "ticket"}, handle: hCTMtunnelWebsocket},
	{method: "GET", path: "/cluster/nextid", uses: []string{"vmid"}, handle: hNextID},
	{method: "GET", path: "/nodes/{node}/network", uses: []string{"node", "type"}, handle: hNetwork},
	{method: "GET", path: "/access/permissions", uses: []string{"path", "userid"}, handle: hPermissions},
	{method: "GET", path: "/nodes/{node}/lxc", uses: []string{"node"}, handle: hCTList},
	{method: "GET", path: "/nodes/{node}/lxc/{vmid}/status/current", uses: []string{"node", "vmid"}, handle: hCTStatus},
	{method: "GET", path: "/nodes/{node}/lxc/{vmid}/config", uses: []string{"node", "vmid", "current", "snapshot"}, handle: hCTConfig},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/status/start", uses: []string{"node", "vmid", "skiplock"}, handle: hCTStart},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/status/stop", uses: []string{"node", "vmid", "skiplock", "overrule-shutdown"}, handle: hCTStop},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/status/shutdown", uses: []string{"node", "vmid", "timeout", "forceStop"}, handle: hCTShutdown},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/status/reboot", uses: []string{"node", "vmid", "timeout"}, handle: hCTReboot},
	{method: "GET", path: "/nodes/{node}/lxc/{vmid}/migrate", uses: []string{"node", "vmid"}, handle: hCTMigratePrecondition},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/migrate",
		uses:   []string{"node", "vmid", "target", "online", "restart", "timeout", "target-storage", "bwlimit"},
		handle: hCTMigrate},
	// Node maintenance: power, packages, the HA stack and Ceph.
	{method: "GET", path: "/nodes/{node}/status", uses: []string{"node"}, handle: hNodeStatus},
	{method: "POST", path: "/nodes/{node}/status", uses: []string{"node", "command"}, handle: hNodeCmd},
	{method: "GET", path: "/nodes/{node}/apt/update", uses: []string{"node"}, handle: hAptUpdateList},
	{method: "POST", path: "/nodes/{node}/apt/update", uses: []string{"node", "notify", "quiet"}, handle: hAptUpdate},
	{method: "GET", path: "/nodes/{node}/apt/versions", uses: []string{"node"}, handle: hAptVersions},
	{method: "GET", path: "/cluster/ha/status/current", handle: hHAStatus},
	{method: "GET", path: "/cluster/ha/status/manager_status", handle: hHAManagerStatus},
	{method: "GET", path: "/cluster/ha/resources", uses: []string{"type"}, handle: hHAResources},
	{method: "GET", path: "/cluster/ha/resources/{sid}", uses: []string{"sid"}, handle: hHAResource},
	{method: "POST", path: "/cluster/ha/resources/{sid}/migrate", uses: []string{"sid", "node"}, handle: hHAMigrate},
	{method: "POST", path: "/cluster/ha/resources/{sid}/relocate", uses: []string{"sid", "node"}, handle: hHARelocate},
	{method: "GET", path: "/cluster/ha/rules", uses: []string{"type", "resource"}, handle: hHARules},
	{method: "GET", path: "/cluster/ha/rules/{rule}", uses: []string{"rule"}, handle: hHARule},
	{method: "GET", path: "/cluster/ceph/status", handle: hCephStatus},
	{method: "GET", path: "/cluster/ceph/flags", handle: hCephFlags},
	{method: "PUT", path: "/cluster/ceph/flags", uses: cephFlagNames(), handle: hCephSetFlags},
	{method: "GET", path: "/cluster/ceph/flags/{flag}", uses: []string{"flag"}, handle: hCephFlag},
	{method: "PUT", path: "/cluster/ceph/flags/{flag}", uses: []string{"flag", "value"}, handle: hCephUpdateFlag},
	// Consoles (console.go).
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/vncproxy", uses: []string{"node", "vmid", "websocket", "generate-password"}, handle: hQemuVNCProxy},
	{method: "POST", path: "/nodes/{node}/qemu/{vmid}/termproxy", uses: []string{"node", "vmid", "serial"}, handle: hQemuTermProxy},
	{method: "GET", path: "/nodes/{node}/qemu/{vmid}/vncwebsocket", uses: []string{"node", "vmid", "port", "vncticket"}, handle: hQemuVNCWebsocket},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/vncproxy", uses: []string{"node", "vmid", "websocket", "width", "height"}, handle: hLXCVNCProxy},
	{method: "POST", path: "/nodes/{node}/lxc/{vmid}/termproxy", uses: []string{"node", "vmid"}, handle: hLXCTermProxy},
	{method: "GET", path: "/nodes/{node}/lxc/{vmid}/vncwebsocket", uses: []string{"node", "vmid", "port", "vncticket"}, handle: hLXCVNCWebsocket},
	{method: "GET", path: "/nodes/{node}/tasks",
		uses:   []string{"node", "start", "limit", "userfilter", "typefilter", "vmid", "errors", "source", "since", "until", "statusfilter"},
		handle: hNodeTasks},
	{method: "GET", path: "/nodes/{node}/tasks/{upid}", uses: []string{"node", "upid"}, handle: hTaskIndex},
	{method: "DELETE", path: "/nodes/{node}/tasks/{upid}", uses: []string{"node", "upid"}, handle: hTaskStop},
	{method: "GET", path: "/nodes/{node}/tasks/{upid}/status", uses: []string{"node", "upid"}, handle: hTaskStatus},
	{method: "GET", path: "/nodes/{node}/tasks/{upid}/log", uses: []string{"node", "upid", "start", "limit", "download"}, handle: hTaskLog},
}

// routeTable is the default release's routes.
var routeTable = buildRoutes(routeSpecs, apiSchema, true)

// buildRoutes binds the specs to a release's schema. With strict (the
// newest release) every method and parameter a spec names must be in the
// schema; for older releases the parameters they lack are left out of uses
// (the schema rejects them before a handler runs).
func buildRoutes(table []route, doc schemaDoc, strict bool) []*route {
	res := make([]*route, 0, len(table))
	for i := range table {
		rt := table[i]
		ms, ok := doc[rt.path][rt.method]
		if !ok {
			if strict {
				panic(fmt.Sprintf("pvesim: %s %s is not in PVE's schema", rt.method, rt.path))
			}
			continue
		}
		rt.schema = ms
		rt.parts = strings.Split(strings.TrimPrefix(rt.path, "/"), "/")
		rt.proxy = ms.Proxyto == "node"
		rt.allowToken = ms.AllowToken == nil || *ms.AllowToken != 0
		var perm struct {
			Check []json.RawMessage `json:"check"`
		}
		if len(ms.Permissions) > 0 {
			_ = json.Unmarshal(ms.Permissions, &perm)
		}
		if len(perm.Check) == 3 {
			var kind, path string
			var privs []string
			_ = json.Unmarshal(perm.Check[0], &kind)
			_ = json.Unmarshal(perm.Check[1], &path)
			_ = json.Unmarshal(perm.Check[2], &privs)
			if kind == "perm" && len(privs) == 1 {
				rt.permPath, rt.permPriv = path, privs[0]
			}
		}
		rt.declared = rt.uses
		rt.uses = nil
		for _, u := range rt.declared {
			if _, ok := ms.Parameters.Properties[u]; ok {
				rt.uses = append(rt.uses, u)
			} else if strict {
				panic(fmt.Sprintf("pvesim: %s %s uses %q, which PVE's schema does not have", rt.method, rt.path, u))
			}
		}
		res = append(res, &rt)
	}
	return res
}

// matchRoute is PVE's find_handler: every path component must match, a
// {placeholder} matches any one component.
func matchRoute(routes []*route, method, relURI string) (*route, map[string]string) {
	var parts []string
	for _, p := range strings.Split(relURI, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	for _, rt := range routes {
		if rt.method != method || len(rt.parts) != len(parts) {
			continue
		}
		uri := map[string]string{}
		match := true
		for i, p := range rt.parts {
			if strings.HasPrefix(p, "{") {
				uri[strings.Trim(p, "{}")] = parts[i]
				continue
			}
			if p != parts[i] {
				match = false
				break
			}
		}
		if match {
			return rt, uri
		}
	}
	return nil, nil
}

// Route describes one method the emulator serves.
type Route struct {
	Method string
	Path   string // PVE's path, e.g. "/nodes/{node}/qemu/{vmid}/status/start"
	// Params are the parameters the emulator acts on. Every parameter of
	// PVE's schema for the method is accepted and validated; the others are
	// ignored (see Ignored).
	Params []string
	// Ignored are the schema's parameters the emulator accepts but does not
	// act on (e.g. "machine" of start).
	Ignored []string
}

// Routes lists every method the emulator serves as the default release,
// for conformance tests.
func Routes() []Route { return routesOf(routeTable) }

// RoutesFor lists every method the emulator serves as a release.
func RoutesFor(release string) ([]Route, error) {
	r, err := lookupRelease(release)
	if err != nil {
		return nil, err
	}
	return routesOf(r.routes), nil
}

func routesOf(routes []*route) []Route {
	res := make([]Route, 0, len(routes))
	for _, rt := range routes {
		r := Route{Method: rt.method, Path: rt.path, Params: append([]string(nil), rt.uses...)}
		for name := range rt.schema.Parameters.Properties {
			if !rt.has(name) {
				r.Ignored = append(r.Ignored, name)
			}
		}
		sort.Strings(r.Ignored)
		res = append(res, r)
	}
	return res
}
