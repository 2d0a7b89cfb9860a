package pvesim

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
)

// readReference reads one of the project's PVE schema files
// (shared/reference), or skips the test where they are not available.
func readReference(t *testing.T, name string) map[string]json.RawMessage {
	t.Helper()
	var raw []byte
	var err error
	for _, dir := range []string{"../../../shared/reference/", "../../../../shared/reference/"} {
		if raw, err = os.ReadFile(dir + name); err == nil {
			break
		}
	}
	if err != nil {
		t.Skipf("reference not available here: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestEmbeddedSchemaIsTheReference: the embedded 9.1 schema holds PVE's
// schema as the project keeps it (shared/reference/pve-api-schema-9.1.json),
// method for method, plus status/suspend and status/resume extracted from the
// same pve-docs commit, plus the container, node power, package and HA
// methods the emulator serves, each as
// shared/reference/pve-api-schema-9.x-more.json has it (the same commit),
// plus the Ceph methods, which neither reference file holds (extracted from
// the same commit; schema/README.md).
func TestEmbeddedSchemaIsTheReference(t *testing.T) {
	t.Parallel()
	ref := readReference(t, "pve-api-schema-9.1.json")
	more := readReference(t, "pve-api-schema-9.x-more.json")
	var emb map[string]json.RawMessage
	if err := json.Unmarshal(SchemaJSON(), &emb); err != nil {
		t.Fatal(err)
	}
	for path, want := range ref {
		if path == "_source" {
			continue
		}
		if !jsonEqual(t, want, emb[path]) {
			t.Errorf("%s differs from the reference", path)
		}
	}
	lxc := 0
	for path, got := range emb {
		if _, ok := ref[path]; ok || path == "_source" || strings.HasSuffix(path, "/qemu/{vmid}/status/suspend") || strings.HasSuffix(path, "/qemu/{vmid}/status/resume") {
			continue
		}
		if strings.HasPrefix(path, "/cluster/ceph/") {
			continue // in neither reference file
		}
		if path == "/access/permissions" || path == "/nodes/{node}/network" {
			continue // in neither reference file: from the same pve-docs commit (schema/README.md)
		}
		if _, ok := more[path]; !ok {
			t.Errorf("%s is not in the reference", path)
			continue
		}
		var gotMethods, wantMethods map[string]json.RawMessage
		if err := json.Unmarshal(got, &gotMethods); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(more[path], &wantMethods); err != nil {
			t.Fatalf("%s is not in pve-api-schema-9.x-more.json: %v", path, err)
		}
		for method, schema := range gotMethods {
			if !jsonEqual(t, wantMethods[method], schema) {
				t.Errorf("%s %s differs from pve-api-schema-9.x-more.json", method, path)
			}
			lxc++
		}
	}
	if lxc == 0 {
		t.Error("no methods of pve-api-schema-9.x-more.json embedded")
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// TestRoutesConformToSchema: every route and parameter the emulator serves
// exists in PVE 9.1's schema, and every method of the schema is served.
func TestRoutesConformToSchema(t *testing.T) {
	t.Parallel()
	var doc map[string]map[string]struct {
		Parameters struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"parameters"`
	}
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(SchemaJSON(), &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "_source")
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, r := range Routes() {
		key := r.Method + " " + r.Path
		if served[key] {
			t.Errorf("%s served twice", key)
		}
		served[key] = true
		m, ok := doc[r.Path][r.Method]
		if !ok {
			t.Errorf("%s is not a PVE method", key)
			continue
		}
		all := append(append([]string{}, r.Params...), r.Ignored...)
		sort.Strings(all)
		var schema []string
		for p := range m.Parameters.Properties {
			schema = append(schema, p)
		}
		sort.Strings(schema)
		if strings.Join(all, ",") != strings.Join(schema, ",") {
			t.Errorf("%s: params+ignored %v, schema %v", key, all, schema)
		}
		for _, p := range r.Params {
			if _, ok := m.Parameters.Properties[p]; !ok {
				t.Errorf("%s acts on %q, which PVE does not have", key, p)
			}
		}
	}
	for path, methods := range doc {
		for method := range methods {
			if !served[method+" "+path] {
				t.Errorf("%s %s is in the schema but not served", method, path)
			}
		}
	}
}

// TestVMGateNeeds lists what vmgate calls (docs/design.md §3, §5) and will call
// for containers (issue 18, docs/history.md) and node maintenance (issue 20, docs/history.md): each method
// must be served and each parameter acted on.
func TestVMGateNeeds(t *testing.T) {
	t.Parallel()
	needs := map[string][]string{
		"GET /version":                                   nil,
		"GET /nodes":                                     nil,
		"GET /cluster/status":                            nil,
		"GET /cluster/resources":                         {"type"},
		"GET /cluster/tasks":                             nil,
		"POST /access/ticket":                            {"username", "password"},
		"GET /nodes/{node}/qemu":                         {"node"},
		"GET /nodes/{node}/qemu/{vmid}/status/current":   {"node", "vmid"},
		"POST /nodes/{node}/qemu/{vmid}/status/start":    {"node", "vmid"},
		"POST /nodes/{node}/qemu/{vmid}/status/stop":     {"node", "vmid", "overrule-shutdown", "timeout"},
		"POST /nodes/{node}/qemu/{vmid}/status/shutdown": {"node", "vmid", "timeout", "forceStop"},
		"POST /nodes/{node}/qemu/{vmid}/status/reboot":   {"node", "vmid", "timeout"},
		"POST /nodes/{node}/qemu/{vmid}/status/reset":    {"node", "vmid"},
		"GET /nodes/{node}/qemu/{vmid}/migrate":          {"node", "vmid", "target"},
		"POST /nodes/{node}/qemu/{vmid}/migrate":         {"node", "vmid", "target", "online", "with-local-disks", "targetstorage", "bwlimit"},
		"GET /nodes/{node}/tasks": {"node", "source", "vmid", "typefilter", "userfilter", "since", "until",
			"start", "limit", "errors", "statusfilter"},
		"GET /nodes/{node}/tasks/{upid}":        {"node", "upid"},
		"DELETE /nodes/{node}/tasks/{upid}":     {"node", "upid"},
		"GET /nodes/{node}/tasks/{upid}/status": {"node", "upid"},
		"GET /nodes/{node}/tasks/{upid}/log":    {"node", "upid", "start", "limit"},
		// Containers, as issue 18 (docs/history.md) will call them.
		"GET /nodes/{node}/lxc":                         {"node"},
		"GET /nodes/{node}/lxc/{vmid}/status/current":   {"node", "vmid"},
		"GET /nodes/{node}/lxc/{vmid}/config":           {"node", "vmid"},
		"POST /nodes/{node}/lxc/{vmid}/status/start":    {"node", "vmid"},
		"POST /nodes/{node}/lxc/{vmid}/status/stop":     {"node", "vmid", "overrule-shutdown"},
		"POST /nodes/{node}/lxc/{vmid}/status/shutdown": {"node", "vmid", "timeout", "forceStop"},
		"POST /nodes/{node}/lxc/{vmid}/status/reboot":   {"node", "vmid", "timeout"},
		"GET /nodes/{node}/lxc/{vmid}/migrate":          {"node", "vmid"},
		"POST /nodes/{node}/lxc/{vmid}/migrate":         {"node", "vmid", "target", "restart", "timeout", "target-storage", "bwlimit"},
		// Node maintenance, as issue 20 (docs/history.md) will call it.
		"GET /nodes/{node}/status":                  {"node"},
		"POST /nodes/{node}/status":                 {"node", "command"},
		"GET /nodes/{node}/apt/update":              {"node"},
		"POST /nodes/{node}/apt/update":             {"node", "quiet"},
		"GET /nodes/{node}/apt/versions":            {"node"},
		"GET /cluster/ha/status/current":            nil,
		"GET /cluster/ha/status/manager_status":     nil,
		"GET /cluster/ha/resources":                 {"type"},
		"GET /cluster/ha/resources/{sid}":           {"sid"},
		"POST /cluster/ha/resources/{sid}/migrate":  {"sid", "node"},
		"POST /cluster/ha/resources/{sid}/relocate": {"sid", "node"},
		"GET /cluster/ha/rules":                     {"type", "resource"},
		"GET /cluster/ha/rules/{rule}":              {"rule"},
		"GET /cluster/ceph/status":                  nil,
		"GET /cluster/ceph/flags":                   nil,
		"PUT /cluster/ceph/flags":                   {"noout"},
		"GET /cluster/ceph/flags/{flag}":            {"flag"},
		"PUT /cluster/ceph/flags/{flag}":            {"flag", "value"},
	}
	routes := map[string]Route{}
	for _, r := range Routes() {
		routes[r.Method+" "+r.Path] = r
	}
	for key, params := range needs {
		r, ok := routes[key]
		if !ok {
			t.Errorf("%s is not served", key)
			continue
		}
		for _, p := range params {
			found := false
			for _, q := range r.Params {
				found = found || q == p
			}
			if !found {
				t.Errorf("%s does not act on %q", key, p)
			}
		}
	}
}

// sampleValue is a valid value for a schema parameter.
func sampleValue(name string, p *paramSchema) string {
	switch {
	case p.formatName == "pve-node":
		return "pve1"
	case p.formatName == "pve-vmid":
		return "100"
	case p.formatName == "CIDR":
		return "10.0.0.0/24"
	case p.formatName == "storage-pair-list":
		return "local-lvm"
	case p.formatName == "pve-task-status-type-list":
		return "ok"
	case p.formatName == "pve-realm":
		return "pam"
	case p.formatName == "pve-priv-list":
		return "VM.Audit"
	case p.formatName == "pve-configid":
		return "snap1"
	case p.propFormat != nil:
		return "q35"
	case p.Pattern != "":
		return "net0=1500"
	case len(p.Enum) > 0:
		return p.Enum[0]
	case p.Type == "boolean":
		return "0"
	case p.Type == "integer" || p.Type == "number":
		if p.minText != "" {
			return p.minText
		}
		return "1"
	case name == "upid":
		return ""
	}
	return "x"
}

// TestWalkEveryRoute calls every served method with every parameter of its
// schema set to a valid value (as root, so root-only parameters pass): no
// parameter is refused as unknown, no method is missing, and an unknown
// parameter is refused everywhere.
func TestWalkEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true, Disks: sharedDisk(100)})
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Running: true, RootFS: sharedRootFS(200)})
	}})
	login := decodeData[map[string]any](t, e.do(call{method: "POST", path: "/access/ticket", noAuth: true,
		form: url.Values{"username": {"root@pam"}, "password": {"rootpw"}}}))
	root := map[string]string{
		"Cookie":              "PVEAuthCookie=" + url.QueryEscape(login["ticket"].(string)),
		"CSRFPreventionToken": login["CSRFPreventionToken"].(string),
	}
	upid := e.post("pve1", vmPath("pve1", 100, "/status/start"), nil)
	for _, rt := range routeTable {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			vmid := "100"
			if strings.Contains(rt.path, "/lxc/") {
				vmid = "200"
			}
			path := strings.NewReplacer("{node}", "pve1", "{vmid}", vmid, "{upid}", url.PathEscape(upid),
				"{sid}", "vm:100", "{rule}", "rule1", "{flag}", "noout").Replace(rt.path)
			form := url.Values{}
			for name, p := range rt.schema.Parameters.Properties {
				if name == "node" && strings.Contains(rt.path, "{node}") || name == "vmid" || name == "upid" ||
					name == "sid" || name == "rule" || name == "flag" {
					continue
				}
				if name == "download" {
					continue // cannot be combined with start/limit
				}
				form.Set(name, sampleValue(name, p))
			}
			c := call{method: rt.method, path: path, noAuth: true, headers: root}
			if rt.method == "POST" || rt.method == "PUT" {
				c.form = form
			} else {
				c.query = form
			}
			r := e.do(c)
			if r.status == 501 || strings.Contains(string(r.body), "property is not defined in schema") {
				t.Fatalf("%s with %v: %s %s", rt.path, form, r.line, r.body)
			}
			form.Set("bogus", "1")
			r = e.do(c)
			if r.status != 400 || r.errors["bogus"] != "property is not defined in schema and the schema does not allow additional properties" {
				t.Fatalf("unknown parameter: %s %s", r.line, r.body)
			}
		})
	}
}
