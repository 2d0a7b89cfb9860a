package httpapi

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/fleet"
)

// clusterBody is the create body for an emulated cluster, with changes.
func clusterBody(s *envSim, name string, mod func(map[string]any)) string {
	m := map[string]any{"name": name, "endpoints": []string{s.eps[0].URL}, "tokenId": s.tokenID,
		"tokenSecret": s.secret, "tlsFingerprint": s.eps[0].Fingerprint}
	if mod != nil {
		mod(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

type clusterOut struct {
	ID        int64 `json:"id"`
	Name      string
	Endpoints []struct {
		URL         string `json:"url"`
		Node        string `json:"node"`
		Fingerprint string `json:"fingerprint"`
	}
	TokenID            string `json:"tokenId"`
	Trust              string `json:"trust"`
	HasCACert          bool   `json:"hasCaCert"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
}

func TestClusterAdminRoutes(t *testing.T) {
	e := newTestEnv(t)
	a := e.addSim("A") // registered through the fleet; the route registers a second name
	e.addUser("admin", accounts.RoleAdmin)

	w := e.do("admin", "POST", "/api/v1/clusters", clusterBody(a, "second", nil))
	if w.Code != 200 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), a.secret) || strings.Contains(w.Body.String(), "tokenSecret") {
		t.Fatalf("the answer shows the secret: %s", w.Body)
	}
	var c clusterOut
	json.Unmarshal(envelopeOf(t, w).Data, &c)
	if c.Name != "second" || c.Trust != "fingerprint" || c.TokenID != a.tokenID || len(c.Endpoints) != 3 {
		t.Fatalf("created %+v", c)
	}
	for i, ep := range c.Endpoints {
		if ep.URL != a.eps[i].URL || ep.Node != a.eps[i].Node || ep.Fingerprint != a.eps[i].Fingerprint {
			t.Errorf("endpoint %d = %+v, want %s %s", i, ep, a.eps[i].URL, a.eps[i].Fingerprint)
		}
	}
	rec := e.lastAudit()
	if rec.Action != "cluster.create" || rec.Result != "ok" || rec.ClusterID != c.ID || rec.UserID != e.users["admin"].ID ||
		rec.Address == "" || strings.Contains(rec.Params, a.secret) {
		t.Fatalf("create audited as %+v", rec)
	}
	id := strconv.FormatInt(c.ID, 10)

	for _, path := range []string{"/api/v1/clusters", "/api/v1/clusters/" + id} {
		w = e.do("admin", "GET", path, "")
		if w.Code != 200 || strings.Contains(w.Body.String(), a.secret) || !strings.Contains(w.Body.String(), a.eps[2].Fingerprint) {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
	}

	// Registration failures name what is wrong, with fields a client can use.
	wrongFP := e.do("admin", "POST", "/api/v1/clusters", clusterBody(a, "bad", func(m map[string]any) { m["tlsFingerprint"] = a.eps[1].Fingerprint }))
	var tlsErr struct {
		Reason, Message, Endpoint, Expected, Presented string
	}
	json.Unmarshal(wrongFP.Body.Bytes(), &tlsErr)
	if wrongFP.Code != 400 || tlsErr.Reason != "tls_mismatch" || tlsErr.Endpoint != a.eps[0].URL ||
		tlsErr.Expected != a.eps[1].Fingerprint || tlsErr.Presented != a.eps[0].Fingerprint {
		t.Fatalf("wrong fingerprint: %d %s", wrongFP.Code, wrongFP.Body)
	}
	if rec := e.lastAudit(); rec.Action != "cluster.create" || rec.Result != "tls_mismatch" {
		t.Fatalf("failed create audited as %+v", rec)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "https://" + ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		name   string
		mod    func(map[string]any)
		status int
		reason string
	}{
		{"wrong secret", func(m map[string]any) { m["tokenSecret"] = "0f3b2c4d-5e6f-4a7b-8c9d-000000000000" }, 400, "token_rejected"},
		{"unreachable", func(m map[string]any) { m["endpoints"] = []string{closed} }, 400, "cluster_unreachable"},
		{"two trusts", func(m map[string]any) { m["insecureSkipVerify"] = true }, 400, "invalid_request"},
		{"unknown field", func(m map[string]any) { m["password"] = "x" }, 400, "invalid_request"},
		{"wrong type", func(m map[string]any) { m["endpoints"] = "https://x" }, 400, "invalid_request"},
		{"taken name", func(m map[string]any) { m["name"] = "A" }, 409, "name_taken"},
	} {
		w := e.do("admin", "POST", "/api/v1/clusters", clusterBody(a, "bad", c.mod))
		env := envelopeOf(t, w)
		if w.Code != c.status || env.Reason != c.reason {
			t.Errorf("%s: %d %s, want %d %s", c.name, w.Code, w.Body, c.status, c.reason)
		}
		if strings.Contains(w.Body.String(), a.secret) {
			t.Errorf("%s: the answer shows the secret", c.name)
		}
	}

	// PATCH: a rename alone does not reach PVE; endpoints re-learn.
	before := e.simRequests()
	w = e.do("admin", "PATCH", "/api/v1/clusters/"+id, `{"name":"renamed"}`)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"renamed"`) || e.simRequests() != before {
		t.Fatalf("rename: %d %s (%d PVE requests)", w.Code, w.Body, e.simRequests()-before)
	}
	if rec := e.lastAudit(); rec.Action != "cluster.update" || rec.Params != `{"name":"renamed"}` || rec.Result != "ok" {
		t.Fatalf("update audited as %+v", rec)
	}
	w = e.do("admin", "PATCH", "/api/v1/clusters/"+id, fmt.Sprintf(`{"endpoints":[%q],"tokenSecret":%q}`, a.eps[2].URL, a.secret))
	json.Unmarshal(envelopeOf(t, w).Data, &c)
	if w.Code != 200 || c.Endpoints[0].URL != a.eps[2].URL || len(c.Endpoints) != 3 || e.simRequests() == before {
		t.Fatalf("re-learn: %d %s", w.Code, w.Body)
	}
	if rec := e.lastAudit(); strings.Contains(rec.Params, a.secret) || !strings.Contains(rec.Params, "(changed)") {
		t.Fatalf("update audit params %s", rec.Params)
	}
	if w = e.do("admin", "PATCH", "/api/v1/clusters/"+id, `{}`); w.Code != 400 {
		t.Fatalf("empty patch: %d", w.Code)
	}

	// Grants, then DELETE takes them along.
	u := e.addUser("user", accounts.RoleUser)
	uid := strconv.FormatInt(u.ID, 10)
	w = e.do("admin", "PUT", "/api/v1/clusters/"+id+"/grants/"+uid, `{"role":"operator"}`)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"role":"operator"`) {
		t.Fatalf("put grant: %d %s", w.Code, w.Body)
	}
	if rec := e.lastAudit(); rec.Action != "grant.put" || rec.ClusterID != c.ID || rec.Target != "user:"+uid || rec.Result != "ok" {
		t.Fatalf("grant audited as %+v", rec)
	}
	for _, bad := range []struct{ path, body, reason string }{
		{"/api/v1/clusters/" + id + "/grants/" + uid, `{"role":"admin"}`, "invalid_request"},
		{"/api/v1/clusters/" + id + "/grants/9999", `{"role":"viewer"}`, "not_found"},
		{"/api/v1/clusters/" + id + "/grants/0", `{"role":"viewer"}`, "invalid_request"},
		{"/api/v1/clusters/9999/grants/" + uid, `{"role":"viewer"}`, "not_found"},
	} {
		if w := e.do("admin", "PUT", bad.path, bad.body); envelopeOf(t, w).Reason != bad.reason {
			t.Errorf("PUT %s %s: %d %s, want %s", bad.path, bad.body, w.Code, w.Body, bad.reason)
		}
	}
	if w = e.do("user", "GET", "/api/v1/pve/clusters/"+id+"/vms", ""); w.Code != 200 {
		t.Fatalf("granted user reads VMs: %d %s", w.Code, w.Body)
	}
	w = e.do("admin", "DELETE", "/api/v1/clusters/"+id, "")
	if w.Code != 200 || e.lastAudit().Action != "cluster.delete" {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if w = e.do("admin", "GET", "/api/v1/clusters/"+id, ""); w.Code != 404 {
		t.Fatalf("GET after delete: %d", w.Code)
	}
	if w = e.do("user", "GET", "/api/v1/pve/clusters/"+id+"/vms", ""); w.Code != 404 {
		t.Fatalf("grant survived its cluster: %d", w.Code)
	}
	if w = e.do("admin", "DELETE", "/api/v1/clusters/"+id+"/grants/"+uid, ""); w.Code != 404 {
		t.Fatalf("delete grant of a deleted cluster: %d", w.Code)
	}
}

// TestClusterChecksOrder: authenticate (401) → validate (400) → authorize (404/403)
// → PVE. A caller without a grant learns about bad input before anything else, and
// nothing reaches PVE.
func TestClusterChecksOrder(t *testing.T) {
	e := newTestEnv(t)
	a := e.addSim("A")
	e.addUser("carol", accounts.RoleUser)
	id := strconv.FormatInt(a.id, 10)
	cases := []struct {
		user, path string
		status     int
	}{
		{"", "/api/v1/pve/clusters/abc/nodes", 401},
		{"", "/api/v1/pve/vm/" + id + "/pve1/100", 401},
		{"carol", "/api/v1/pve/clusters/0/nodes", 400},
		{"carol", "/api/v1/pve/clusters/-1/vms", 400},
		{"carol", "/api/v1/pve/clusters/abc/vms", 400},
		{"carol", "/api/v1/pve/clusters/+1/vms", 400},
		{"carol", "/api/v1/pve/clusters/" + id + "/vms?full=1", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve1%2F../100", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve_1/100", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/-pve1/100", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/" + strings.Repeat("a", 64) + "/100", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve1/99", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve1/1000000000", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve1/abc", 400},
		{"carol", "/api/v1/pve/vm/0/pve1/100", 400},
		{"carol", "/api/v1/pve/vm/" + id + "/pve1/100", 404},
		{"carol", "/api/v1/clusters/abc", 403}, // admin routes: the role first, so nothing about clusters leaks
	}
	before := e.simRequests()
	for _, c := range cases {
		if w := e.do(c.user, "GET", c.path, ""); w.Code != c.status {
			t.Errorf("GET %s as %q: %d %s, want %d", c.path, c.user, w.Code, w.Body, c.status)
		}
	}
	if n := e.simRequests() - before; n != 0 {
		t.Fatalf("PVE received %d requests", n)
	}
}

func TestClusterInventoryRoutes(t *testing.T) {
	e := newTestEnv(t)
	a := e.addSim("A")
	e.addUser("bob", accounts.RoleUser)
	e.grant("bob", "A", fleet.GrantViewer)
	id := strconv.FormatInt(a.id, 10)

	w := e.do("bob", "GET", "/api/v1/pve/clusters/"+id+"/vms", "")
	var vms []struct {
		VMID    int64    `json:"vmid"`
		Name    string   `json:"name"`
		Node    string   `json:"node"`
		Tags    []string `json:"tags"`
		HAState string   `json:"haState"`
	}
	json.Unmarshal(envelopeOf(t, w).Data, &vms)
	if w.Code != 200 || len(vms) != 6 || vms[0].VMID != 100 || strings.Join(vms[0].Tags, ",") != "web,prod" ||
		vms[1].Tags == nil || vms[3].HAState != "started" {
		t.Fatalf("vms: %d %s", w.Code, w.Body)
	}
	w = e.do("bob", "GET", "/api/v1/pve/clusters/"+id+"/nodes", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"node":"pve3"`) || !strings.Contains(w.Body.String(), `"maxCpu":16`) {
		t.Fatalf("nodes: %d %s", w.Code, w.Body)
	}
	w = e.do("bob", "GET", "/api/v1/pve/vm/"+id+"/pve2/103", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"ha":{"managed":true,"state":"started"}`) ||
		!strings.Contains(w.Body.String(), `"qmpStatus":"running"`) {
		t.Fatalf("vm status: %d %s", w.Code, w.Body)
	}
	w = e.do("bob", "GET", "/api/v1/pve/vm/"+id+"/pve3/101", "")
	var notHere struct {
		Code                  int
		Message, Reason, Node string
	}
	json.Unmarshal(w.Body.Bytes(), &notHere)
	if w.Code != 404 || notHere.Node != "pve1" || !strings.Contains(notHere.Message, "on node pve1") {
		t.Fatalf("VM on another node: %d %s", w.Code, w.Body)
	}

	// A node that goes offline: its VMs answer 503 cluster_unavailable naming the
	// node (a read is never 409), the rest fails over.
	a.c.SetNodeOnline("pve1", false)
	if w = e.do("bob", "GET", "/api/v1/pve/vm/"+id+"/pve1/100", ""); w.Code != 503 || envelopeOf(t, w).Reason != "cluster_unavailable" {
		t.Fatalf("VM on an offline node: %d %s", w.Code, w.Body)
	}
	if w = e.do("bob", "GET", "/api/v1/pve/clusters/"+id+"/vms", ""); w.Code != 200 {
		t.Fatalf("no failover: %d %s", w.Code, w.Body)
	}
}

// BenchmarkVMList10kHTTP is BenchmarkVMList10k (internal/fleet) as a client sees it:
// GET /pve/clusters/:id/vms of a 10 000-VM emulated cluster, through authentication,
// authorization and the JSON envelope.
func BenchmarkVMList10kHTTP(b *testing.B) {
	e := newTestEnv(b)
	a := e.addSim("A")
	for i := range 10000 - 6 {
		if err := a.c.AddVM(pvesimVM(1000+i, fmt.Sprintf("pve%d", i%3+1))); err != nil {
			b.Fatal(err)
		}
	}
	e.addUser("bob", accounts.RoleUser)
	e.grant("bob", "A", fleet.GrantViewer)
	path := "/api/v1/pve/clusters/" + strconv.FormatInt(a.id, 10) + "/vms"
	if w := e.doWith(e.api, "bob", "GET", path, ""); w.Code != 200 || strings.Count(w.Body.String(), `"vmid"`) != 10000 {
		b.Fatalf("%d, %d VMs", w.Code, strings.Count(w.Body.String(), `"vmid"`))
	}
	b.ReportAllocs()
	for b.Loop() {
		if w := e.doWith(e.api, "bob", "GET", path, ""); w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
