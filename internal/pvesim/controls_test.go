package pvesim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// control calls a test-only control with the env's token (or the headers
// given) and returns the status and the body.
func (e *env) control(node, method, path string, headers map[string]string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.eps[node].URL+ControlPrefix+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if headers == nil {
		req.Header.Set("Authorization", e.auth)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestControls: the test-only controls authenticate like the API and need
// Sys.Modify; each does what its name says.
func TestControls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 103, Node: "pve2", Running: true, HA: true, Disks: sharedDisk(103)})
		if err := c.AddToken("ro@pve!tk", "s3cret", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
	}})
	for _, tc := range []struct {
		name    string
		headers map[string]string
		method  string
		path    string
		status  int
		body    string
	}{
		{"no credentials", map[string]string{}, "POST", "nodes/pve1/apt/install", 401, `"message":"No ticket\n"`},
		{"a wrong secret", map[string]string{"Authorization": "PVEAPIToken=" + testTokenID + "=nope"}, "GET", "peaks", 401, `"message":"Authentication failed!\n"`},
		{"no Sys.Modify", map[string]string{"Authorization": "PVEAPIToken=ro@pve!tk=s3cret"}, "POST", "nodes/pve1/apt/install", 403,
			`"message":"Permission check failed (/, Sys.Modify)\n"`},
		{"unknown control", nil, "POST", "nodes/pve1/explode", 404, `"message":"no such control\n"`},
		{"unknown node", nil, "POST", "nodes/pve9/apt/install", 404, `"message":"no such node 'pve9'\n"`},
		{"unknown resource", nil, "POST", "ha/resources/vm:100/error", 404, "no such HA resource"},
		{"power on a running node", nil, "POST", "nodes/pve1/power-on", 409, "it is not powered off"},
	} {
		status, body := e.control("pve1", tc.method, tc.path, tc.headers)
		if status != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %s", tc.name, status, body)
		}
	}

	status, body := e.control("pve2", "POST", "nodes/pve1/apt/install", nil)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if status != 200 || lines[len(lines)-1] != "reboot-required" || lines[0] != "Reading package lists..." {
		t.Fatalf("install: %d %q", status, lines)
	}
	status, body = e.control("pve1", "GET", "nodes/pve1", nil)
	var info struct{ Data NodeInfo }
	if err := json.Unmarshal([]byte(body), &info); status != 200 || err != nil || info.Data.NewestKernel != e.c.rel.apt.update.release || info.Data.Power != "up" {
		t.Fatalf("node info: %d %s", status, body)
	}

	if status, _ := e.control("pve1", "POST", "nodes/pve3/boot-failure", nil); status != 200 {
		t.Fatalf("boot-failure: %d", status)
	}
	e.nodeCmd("pve1", "pve3", "reboot")
	e.c.Advance(10*time.Second + DefaultBootTime)
	if info := e.nodeInfo("pve3"); !info.Hung {
		t.Fatalf("pve3 %+v", info)
	}
	if status, _ := e.control("pve1", "DELETE", "nodes/pve3/boot-failure", nil); status != 200 {
		t.Fatalf("clear boot-failure: %d", status)
	}
	e.c.Advance(DefaultBootTime)
	if info := e.nodeInfo("pve3"); info.Power != "up" || info.Boots != 1 {
		t.Fatalf("pve3 %+v", info)
	}

	if status, _ := e.control("pve1", "POST", "nodes/pve2/ha-maintenance", nil); status != 200 {
		t.Fatalf("ha-maintenance: %d", status)
	}
	e.c.Advance(30 * time.Second)
	if v := e.vmState(103); v.Node == "pve2" || e.nodeInfo("pve2").LRMMode != "maintenance" {
		t.Fatalf("103 %+v", v)
	}
	if status, _ := e.control("pve1", "DELETE", "nodes/pve2/ha-maintenance", nil); status != 200 {
		t.Fatalf("ha-maintenance off: %d", status)
	}
	e.c.Advance(30 * time.Second)
	if v := e.vmState(103); v.Node != "pve2" {
		t.Fatalf("103 %+v", v)
	}

	if status, _ := e.control("pve1", "POST", "ha/resources/vm:103/error", nil); status != 200 || e.vmState(103).HAState != "error" {
		t.Fatalf("error: %d %+v", status, e.vmState(103))
	}
	if status, _ := e.control("pve1", "DELETE", "ha/resources/vm:103/error", nil); status != 200 || e.vmState(103).HAState != "started" {
		t.Fatalf("error cleared: %d %+v", status, e.vmState(103))
	}
	if status, body := e.control("pve1", "GET", "journal", nil); status != 200 || !strings.Contains(body, `"Kind":"node-boot-hung"`) {
		t.Fatalf("journal: %d %s", status, body)
	}
	if status, body := e.control("pve1", "GET", "peaks", nil); status != 200 || !strings.Contains(body, `"NodesDown":1`) {
		t.Fatalf("peaks: %d %s", status, body)
	}
}

// TestRollingRebootOverHTTPS drives the dev cluster with Ceph the way a
// rolling maintenance would, through PVE's API alone, on a running clock
// (Speed 1000) over HTTPS: noout set, then for each node the updates
// "installed" through the control a hook would use, a reboot, the wait for
// the node to go and come back with a new uptime and the new kernel, and
// Ceph's health OK but for noout, then noout cleared. Every guest ends where
// it was, running as before; the cluster never has two nodes down.
func TestRollingRebootOverHTTPS(t *testing.T) {
	t.Parallel()
	c := DevCluster(Options{Speed: 1000, Ceph: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := c.Serve(ctx, ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	urls := map[string]string{}
	for _, ep := range srv.Endpoints() {
		urls[ep.Node] = ep.URL
	}
	token := "PVEAPIToken=" + c.DevToken()
	call := func(node, method, path string, form url.Values) (int, json.RawMessage, error) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, urls[node]+path, body)
		req.Header.Set("Authorization", token)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var env struct{ Data json.RawMessage }
		json.Unmarshal(raw, &env)
		return resp.StatusCode, env.Data, nil
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		testkit.Until(t, what, cond)
	}
	type placement struct {
		node, status string
	}
	before := map[int]placement{}
	for _, id := range []int{100, 101, 102, 103, 104, 105} {
		v, _ := c.VM(id)
		before[id] = placement{v.Node, v.Status}
	}
	for _, id := range []int{200, 201, 202, 203} {
		k, _ := c.CT(id)
		before[id] = placement{k.Node, k.Status}
	}
	if status, _, err := call("pve1", "PUT", "/api2/json/cluster/ceph/flags", url.Values{"noout": {"1"}}); err != nil || status != 200 {
		t.Fatalf("set noout: %d %v", status, err)
	}
	wait("noout", func() bool { return len(c.CephFlags()) == 1 })
	for i, node := range []string{"pve1", "pve2", "pve3"} {
		other := []string{"pve2", "pve3", "pve1"}[i]
		status, raw, err := call(other, "GET", "/api2/json/nodes/"+node+"/status", nil)
		var st struct {
			Uptime float64 `json:"uptime"`
		}
		if err != nil || status != 200 || json.Unmarshal(raw, &st) != nil {
			t.Fatalf("status of %s: %d %v", node, status, err)
		}
		req, _ := http.NewRequest("POST", urls[node]+ControlPrefix+"nodes/"+node+"/apt/install", nil)
		req.Header.Set("Authorization", token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(out), "reboot-required\n") {
			t.Fatalf("install on %s: %s", node, out)
		}
		if status, _, err := call(other, "POST", "/api2/json/nodes/"+node+"/status", url.Values{"command": {"reboot"}}); err != nil || status != 200 {
			t.Fatalf("reboot %s: %d %v", node, status, err)
		}
		// The node is away for 120 ms of real time: a poll could miss it, so
		// the test waits for what lasts (a new uptime) and reads the absence
		// from the journal.
		wait(node+" to come back with a new uptime", func() bool {
			status, raw, err := call(node, "GET", "/api2/json/nodes/"+node+"/status", nil)
			var now struct {
				Uptime float64           `json:"uptime"`
				Kernel map[string]string `json:"current-kernel"`
			}
			return err == nil && status == 200 && json.Unmarshal(raw, &now) == nil && now.Uptime < st.Uptime &&
				now.Kernel["release"] == c.rel.apt.update.release
		})
		wait("Ceph to recover from "+node, func() bool {
			status, raw, err := call(other, "GET", "/api2/json/cluster/ceph/status", nil)
			var cs struct {
				Health struct {
					Checks map[string]any `json:"checks"`
				} `json:"health"`
			}
			if err != nil || status != 200 || json.Unmarshal(raw, &cs) != nil {
				return false
			}
			_, flag := cs.Health.Checks["OSDMAP_FLAGS"]
			return flag && len(cs.Health.Checks) == 1
		})
		wait("the guests of "+node+" to be back", func() bool {
			for id, p := range before {
				if v, ok := c.VM(id); ok && (v.Node != p.node || v.Status != p.status || v.HA && v.HAState != "started" && v.HAState != "stopped") {
					return false
				}
				if k, ok := c.CT(id); ok && (k.Node != p.node || k.Status != p.status) {
					return false
				}
			}
			return true
		})
	}
	if status, _, err := call("pve3", "PUT", "/api2/json/cluster/ceph/flags/noout", url.Values{"value": {"0"}}); err != nil || status != 200 {
		t.Fatalf("clear noout: %d %v", status, err)
	}
	if h := c.CephHealth(); h != "HEALTH_OK" {
		t.Fatalf("health %s", h)
	}
	if p := c.Peaks(); p.NodesDown != 1 {
		t.Fatalf("peaks %+v", p)
	}
	var away []string
	for _, j := range c.Journal() {
		if j.Kind == JournalNodeDown || j.Kind == JournalNodeUp {
			away = append(away, j.Kind+" "+j.Node)
		}
	}
	if want := []string{"node-down pve1", "node-up pve1", "node-down pve2", "node-up pve2", "node-down pve3", "node-up pve3"}; !reflect.DeepEqual(away, want) {
		t.Fatalf("journal %v", away)
	}
	for _, node := range []string{"pve1", "pve2", "pve3"} {
		if info, _ := c.Node(node); info.Boots != 1 || info.Kernel != c.rel.apt.update.release {
			t.Errorf("%s %+v", node, info)
		}
	}
}
