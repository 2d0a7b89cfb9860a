package pvesim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pinnedClient trusts exactly one certificate fingerprint, as vmgate does.
func pinnedClient(fingerprint string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if Fingerprint(cs.PeerCertificates[0].Raw) != fingerprint {
				return errors.New("fingerprint mismatch")
			}
			return nil
		},
	}}}
}

func TestTLSEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{serve: ServeOptions{TLS: true}})
	eps := e.srv.Endpoints()
	if len(eps) != 3 {
		t.Fatalf("endpoints %+v", eps)
	}
	port := ""
	seen := map[string]bool{}
	for i, ep := range eps {
		u, err := url.Parse(ep.URL)
		if err != nil || u.Scheme != "https" {
			t.Fatalf("endpoint %s", ep.URL)
		}
		if u.Hostname() != "127.0.0."+strconv.Itoa(11+i) {
			t.Fatalf("node %s on %s", ep.Node, u.Hostname())
		}
		if port == "" {
			port = u.Port()
		} else if u.Port() != port {
			t.Fatalf("ports differ: %s vs %s", u.Port(), port)
		}
		if seen[ep.Fingerprint] || len(ep.Fingerprint) != 95 || strings.ToUpper(ep.Fingerprint) != ep.Fingerprint {
			t.Fatalf("fingerprint %q", ep.Fingerprint)
		}
		seen[ep.Fingerprint] = true
		// The served certificate is the one the endpoint names.
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		got := Fingerprint(conn.ConnectionState().PeerCertificates[0].Raw)
		if proto := conn.ConnectionState().NegotiatedProtocol; proto == "h2" {
			t.Fatal("HTTP/2 negotiated")
		}
		conn.Close()
		if got != ep.Fingerprint {
			t.Fatalf("served %s, endpoint says %s", got, ep.Fingerprint)
		}
	}
	// A client pinned to pve2's fingerprint works with pve2 only.
	req := func(client *http.Client, ep Endpoint, path string) (*http.Response, []byte, error) {
		r, _ := http.NewRequest("GET", ep.URL+"/api2/json"+path, nil)
		r.Header.Set("Authorization", e.auth)
		resp, err := client.Do(r)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b, nil
	}
	pinned := pinnedClient(eps[1].Fingerprint)
	if _, _, err := req(pinned, eps[0], "/version"); err == nil {
		t.Fatal("pinned client accepted another node's certificate")
	}
	resp, body, err := req(pinned, eps[1], "/cluster/status")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Proto != "HTTP/1.1" {
		t.Fatalf("proto %s", resp.Proto)
	}
	// Learning the other endpoints: /cluster/status gives the addresses,
	// /nodes the fingerprints.
	var status struct {
		Data []map[string]any `json:"data"`
	}
	json.Unmarshal(body, &status)
	want := `[{"id":"cluster","name":"pvesim","nodes":3,"quorate":1,"type":"cluster","version":5},` +
		`{"id":"node/pve1","ip":"127.0.0.11","level":"","local":0,"name":"pve1","nodeid":1,"online":1,"type":"node"},` +
		`{"id":"node/pve2","ip":"127.0.0.12","level":"","local":1,"name":"pve2","nodeid":2,"online":1,"type":"node"},` +
		`{"id":"node/pve3","ip":"127.0.0.13","level":"","local":0,"name":"pve3","nodeid":3,"online":1,"type":"node"}]`
	if got, _ := json.Marshal(status.Data); string(got) != want {
		t.Fatalf("cluster status\n%s\nwant\n%s", got, want)
	}
	_, body, err = req(pinned, eps[1], "/nodes")
	if err != nil {
		t.Fatal(err)
	}
	var nodes struct {
		Data []map[string]any `json:"data"`
	}
	json.Unmarshal(body, &nodes)
	for i, n := range nodes.Data {
		if n["node"] != eps[i].Node || n["ssl_fingerprint"] != eps[i].Fingerprint || n["status"] != "online" || n["maxcpu"] != 16.0 || n["uptime"] == nil {
			t.Fatalf("node entry %v", n)
		}
		learned := Endpoint{URL: "https://" + status.Data[i+1]["ip"].(string) + ":" + port}
		if _, _, err := req(pinnedClient(n["ssl_fingerprint"].(string)), learned, "/version"); err != nil {
			t.Fatalf("learned endpoint %s: %v", learned.URL, err)
		}
	}
}

func TestOfflineNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 200, Node: "pve2", Running: true})
	}})
	// Hold a keep-alive connection to pve2 open.
	wantLine(t, e.do(call{node: "pve2", path: "/version"}), 200, "200 OK")
	if err := e.c.SetNodeOnline("pve2", false); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(e.eps["pve2"].URL)
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Fatal("an offline node accepts connections")
	}
	if _, err := e.try(call{node: "pve2", path: "/version"}); err == nil {
		t.Fatal("request to an offline node succeeded")
	}
	r := e.do(call{method: "POST", path: vmPath("pve2", 200, "/status/stop")})
	if r.line != "595 No route to host" || len(r.body) != 0 {
		t.Fatalf("proxied to an offline node: %s %q", r.line, r.body)
	}
	nodes := decodeData[[]map[string]any](t, e.do(call{path: "/nodes"}))
	if n := nodes[1]; n["status"] != "offline" || n["uptime"] != nil || n["cpu"] != nil || n["maxmem"] == nil {
		t.Fatalf("offline node entry %v", n)
	}
	res := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}}))
	if v := res[0]; v["status"] != "unknown" || v["node"] != "pve2" || v["maxmem"] != nil {
		t.Fatalf("VM on an offline node %v", v)
	}
	st := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/status"}))
	if st[0]["quorate"] != 1.0 || st[2]["online"] != 0.0 {
		t.Fatalf("cluster status %v", st)
	}
	if err := e.c.SetNodeOnline("pve2", true); err != nil {
		t.Fatal(err)
	}
	wantLine(t, e.do(call{node: "pve2", path: "/version"}), 200, "200 OK")
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve2", 200, "/status/stop")}), 200, "200 OK")
}

func TestListenAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{serve: ServeOptions{Listen: "127.0.0.1:0"}})
	eps := e.srv.Endpoints()
	u1, _ := url.Parse(eps[0].URL)
	u2, _ := url.Parse(eps[1].URL)
	if u1.Hostname() != "127.0.0.1" || u2.Hostname() != "127.0.0.12" || u1.Port() != u2.Port() || u1.Port() == "0" {
		t.Fatalf("endpoints %s %s", eps[0].URL, eps[1].URL)
	}
	st := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/status"}))
	if st[1]["ip"] != "127.0.0.1" || st[2]["ip"] != "127.0.0.12" || st[1]["local"] != 1.0 {
		t.Fatalf("cluster status %v", st)
	}
	if len(e.srv.Warnings()) != 0 {
		t.Fatalf("warnings %v", e.srv.Warnings())
	}

	// When another node's address is taken the node gets a free port, and
	// the server says so.
	busy, err := net.Listen("tcp", "127.0.0.12:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	c := New(Options{})
	for _, n := range []string{"pve1", "pve2"} {
		c.AddNode(NodeSpec{Name: n})
	}
	srv, err := c.Serve(context.Background(), ServeOptions{Listen: "127.0.0.1:" + port})
	if err != nil {
		t.Skipf("127.0.0.1:%s is taken too: %v", port, err)
	}
	defer srv.Close()
	eps = srv.Endpoints()
	if !strings.HasSuffix(eps[0].URL, ":"+port) || strings.HasSuffix(eps[1].URL, ":"+port) || len(srv.Warnings()) != 1 {
		t.Fatalf("endpoints %+v warnings %v", eps, srv.Warnings())
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1"})
	}})
	startPattern := "/nodes/{node}/qemu/{vmid}/status/start"

	e.c.SetLatency(40 * time.Millisecond)
	began := time.Now()
	wantLine(t, e.do(call{path: "/version"}), 200, "200 OK")
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Fatalf("latency not applied: %v", took)
	}
	e.c.SetLatency(0)

	// The POST is processed, then the connection drops without an answer.
	e.c.DropNextResponses("POST", startPattern, 1)
	if _, err := e.try(call{method: "POST", path: vmPath("pve1", 100, "/status/start")}); err == nil {
		t.Fatal("dropped response answered")
	}
	if tasks := e.c.TasksFor(100); len(tasks) != 1 || tasks[0].Type != "qmstart" {
		t.Fatalf("the dropped POST did not act: %+v", tasks)
	}
	if n := e.c.Requests("POST", startPattern); n != 1 {
		t.Fatalf("%d start requests counted", n)
	}
	// A client recovering from the ambiguous POST finds the task in the list.
	r := e.do(call{path: "/nodes/pve1/tasks", query: url.Values{"source": {"all"}, "vmid": {"100"}, "typefilter": {"qmstart"}}})
	if list := decodeData[[]map[string]any](t, r); len(list) != 1 {
		t.Fatalf("task list %s", r.data)
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/start")}), 200, "200 OK")
	if n := e.c.Requests("POST", startPattern); n != 2 {
		t.Fatalf("%d start requests counted", n)
	}
	if n := e.c.Requests("GET", "/nodes/{node}/tasks"); n != 1 {
		t.Fatalf("%d task list requests counted", n)
	}
	e.do(call{path: "/nope"})
	if n := e.c.Requests("GET", "(unknown)"); n != 1 {
		t.Fatalf("%d unknown requests counted", n)
	}
}

func TestStatusViews(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Name: "web1", Running: true, CPUs: 2, MemBytes: 4 << 30, Disks: sharedDisk(100), Tags: "a;b"})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Name: "db", Lock: "backup", HA: true, Disks: sharedDisk(101)})
		addVM(t, c, VMSpec{VMID: 1000, Node: "pve2", Name: "big", Paused: true})
	}})
	cur := decodeData[map[string]any](t, e.do(call{path: vmPath("pve1", 100, "/status/current")}))
	for k, v := range map[string]any{"vmid": 100.0, "status": "running", "qmpstatus": "running", "name": "web1", "cpus": 2.0,
		"maxmem": float64(4 << 30), "maxdisk": float64(32 << 30), "tags": "a;b"} {
		if cur[k] != v {
			t.Fatalf("status/current %s = %v, want %v (%v)", k, cur[k], v, cur)
		}
	}
	if cur["pid"] == nil || cur["uptime"].(float64) <= 0 || cur["ha"].(map[string]any)["managed"] != 0.0 {
		t.Fatalf("status/current %v", cur)
	}
	cur = decodeData[map[string]any](t, e.do(call{path: vmPath("pve1", 101, "/status/current")}))
	if cur["status"] != "stopped" || cur["qmpstatus"] != "stopped" || cur["lock"] != "backup" || cur["pid"] != nil || cur["uptime"] != 0.0 {
		t.Fatalf("stopped status/current %v", cur)
	}
	if ha := cur["ha"].(map[string]any); ha["managed"] != 1.0 || ha["state"] != "stopped" {
		t.Fatalf("ha %v", ha)
	}
	cur = decodeData[map[string]any](t, e.do(call{node: "pve2", path: vmPath("pve2", 1000, "/status/current")}))
	if cur["status"] != "running" || cur["qmpstatus"] != "paused" {
		t.Fatalf("paused status/current %v", cur)
	}
	// Resources are sorted as PVE sorts the vmids: as strings.
	res := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}}))
	if len(res) != 3 || res[0]["vmid"] != 100.0 || res[1]["vmid"] != 1000.0 || res[2]["vmid"] != 101.0 {
		t.Fatalf("order %v", res)
	}
	if r := res[2]; r["lock"] != "backup" || r["hastate"] != "stopped" || r["status"] != "stopped" || r["template"] != 0.0 || r["id"] != "qemu/101" {
		t.Fatalf("resource %v", r)
	}
	all := decodeData[[]map[string]any](t, e.do(call{path: "/cluster/resources"}))
	kinds := map[string]int{}
	for _, x := range all {
		kinds[x["type"].(string)]++
	}
	if kinds["qemu"] != 3 || kinds["node"] != 3 || kinds["storage"] != 9 {
		t.Fatalf("resource kinds %v", kinds)
	}
	list := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/qemu"}))
	if len(list) != 2 || list[0]["vmid"] != 100.0 || list[1]["status"] != "stopped" || list[0]["qmpstatus"] != nil {
		t.Fatalf("qemu list %v", list)
	}
	list = decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/qemu", query: url.Values{"full": {"1"}}}))
	if list[0]["qmpstatus"] != "running" || list[1]["qmpstatus"] != "stopped" {
		t.Fatalf("full qemu list %v", list)
	}
}

// TestScale: 10 000 VMs can be added, listed and addressed, and adding them
// does not sort the vmid index each time (the quadratic slip this guards
// against is counted, not timed; BenchmarkClusterResources10k measures the
// speed).
func TestScale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		for i := 0; i < 10000; i++ {
			addVM(t, c, VMSpec{VMID: 100 + i, Node: "pve" + strconv.Itoa(1+i%3), Running: i%2 == 0, Disks: sharedDisk(100 + i)})
		}
	}})
	for range 3 {
		r := e.do(call{path: "/cluster/resources", query: url.Values{"type": {"vm"}}})
		if n := bytes.Count(r.data, []byte(`{"id":"qemu/`)); n != 10000 {
			t.Fatalf("%d VMs listed", n)
		}
	}
	e.c.mu.RLock()
	sorts := e.c.vmSorts
	e.c.mu.RUnlock()
	if sorts != 1 {
		t.Errorf("the vmid index was sorted %d times for 10 000 additions and 3 lists, want once", sorts)
	}
	for i := 0; i < 100; i++ {
		vmid := 100 + i*97
		node := "pve" + strconv.Itoa(1+(vmid-100)%3)
		wantLine(t, e.do(call{node: node, path: vmPath(node, vmid, "/status/current")}), 200, "200 OK")
	}
}

func TestDevCluster(t *testing.T) {
	t.Parallel()
	c := DevCluster(Options{ManualClock: true, Start: testStart})
	if !strings.HasPrefix(c.DevToken(), "vmgate@pve!gw=") || len(c.DevToken()) != len("vmgate@pve!gw=")+36 {
		t.Fatalf("token %q", c.DevToken())
	}
	for _, tc := range []struct {
		vmid          int
		node, status  string
		ha, localDisk bool
	}{
		{100, "pve1", "running", false, false},
		{101, "pve1", "stopped", false, false},
		{102, "pve2", "running", false, true},
		{103, "pve2", "running", true, false},
		{104, "pve3", "running", false, false},
		{105, "pve3", "stopped", false, false},
	} {
		vm, ok := c.VM(tc.vmid)
		if !ok || vm.Node != tc.node || vm.Status != tc.status || vm.HA != tc.ha || vm.Disks[0].Local != tc.localDisk {
			t.Fatalf("VM %d: %+v", tc.vmid, vm)
		}
	}
	if c.vms[104].ignoreACPI != true || c.vms[100].mem != 4<<30 {
		t.Fatal("VM 104 must ignore ACPI and VM 100 have 4 GiB")
	}
	for _, tc := range []struct {
		vmid         int
		node, status string
		ha, local    bool
	}{
		{200, "pve1", "running", false, false},
		{201, "pve2", "stopped", false, false},
		{202, "pve3", "running", false, true},
		{203, "pve1", "running", true, false},
	} {
		ct, ok := c.CT(tc.vmid)
		if !ok || ct.Node != tc.node || ct.Status != tc.status || ct.HA != tc.ha || ct.RootFS.Local != tc.local ||
			(tc.local && !strings.HasPrefix(ct.RootFS.Volid, "local-lvm:")) {
			t.Fatalf("CT %d: %+v", tc.vmid, ct)
		}
	}
	if got := strings.Join(c.Nodes(), ","); got != "pve1,pve2,pve3" {
		t.Fatalf("nodes %s", got)
	}
}

// TestRunDev runs what `vmgate pvesim` runs and reads its first line.
func TestRunDev(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RunDev(ctx, DevOptions{Listen: "127.0.0.1:0", Speed: 1}, stdoutW, &stderr)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ann map[string]string
	if err := json.Unmarshal([]byte(line), &ann); err != nil {
		t.Fatalf("first line %q: %v", line, err)
	}
	if !strings.HasPrefix(ann["url"], "https://127.0.0.1:") || strings.HasSuffix(ann["url"], ":0") || len(ann["fingerprint"]) != 95 || !strings.HasPrefix(ann["token"], "vmgate@pve!gw=") {
		t.Fatalf("announcement %v", ann)
	}
	if !strings.HasPrefix(line, `{"url":`) {
		t.Fatalf("key order %s", line)
	}
	go io.Copy(io.Discard, stdoutR)
	client := pinnedClient(ann["fingerprint"])
	req, _ := http.NewRequest("GET", ann["url"]+"/api2/json/cluster/resources?type=vm", nil)
	req.Header.Set("Authorization", "PVEAPIToken="+ann["token"])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Data []map[string]any `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	kinds := map[string]int{}
	for _, r := range res.Data {
		kinds[r["type"].(string)]++
	}
	if len(res.Data) != 10 || kinds["qemu"] != 6 || kinds["lxc"] != 4 {
		t.Fatalf("dev resources %v", res.Data)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pvesim: node pve1 at " + ann["url"], "pvesim: node pve2 at https://127.0.0.12:", "pvesim: node pve3 at https://127.0.0.13:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestProxy: any endpoint answers for any node; tasks live on their node.
func TestProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 200, Node: "pve2"})
	}})
	upid := e.post("pve1", vmPath("pve2", 200, "/status/start"), nil) // sent to pve1's endpoint
	if !strings.HasPrefix(upid, "UPID:pve2:") {
		t.Fatalf("UPID %s", upid)
	}
	e.c.Advance(time.Second)
	for _, via := range []string{"pve1", "pve2", "pve3"} {
		r := e.do(call{node: via, path: taskPath("pve2", upid, "/status")})
		if st := decodeData[map[string]any](t, r); st["exitstatus"] != "OK" {
			t.Fatalf("status via %s: %s", via, r.body)
		}
	}
	// /cluster/status says which node answered.
	st := decodeData[[]map[string]any](t, e.do(call{node: "pve3", path: "/cluster/status"}))
	if st[1]["local"] != 0.0 || st[3]["local"] != 1.0 {
		t.Fatalf("local flags %v", st)
	}
}

func TestInspectionAndStateHelpers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Running: true})
	}})
	if err := e.c.SetPaused(100, true); err != nil {
		t.Fatal(err)
	}
	if vm, _ := e.c.VM(100); vm.Status != "running" || vm.QMPStatus != "paused" {
		t.Fatalf("VM %+v", vm)
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/status/shutdown")}), 500, "500 VM is paused - cannot shutdown")
	e.c.SetPaused(100, false)
	if err := e.c.SetLock(100, "backup"); err != nil {
		t.Fatal(err)
	}
	wantLine(t, e.do(call{method: "POST", path: vmPath("pve1", 100, "/migrate"), form: url.Values{"target": {"pve2"}, "online": {"1"}}}), 500, "500 VM is locked (backup)")
	e.c.SetLock(100, "")
	if err := e.c.SetPaused(999, true); err == nil {
		t.Fatal("pausing an unknown VM")
	}
	if _, ok := e.c.VM(999); ok {
		t.Fatal("unknown VM found")
	}
	if _, ok := e.c.Task("UPID:pve1:00000001:00000001:00000001:qmstart:100:root@pam:"); ok {
		t.Fatal("unknown task found")
	}
	if err := e.c.AddVM(VMSpec{VMID: 100, Node: "pve1"}); err == nil {
		t.Fatal("duplicate VM added")
	}
	if err := e.c.AddVM(VMSpec{VMID: 99, Node: "pve1"}); err == nil {
		t.Fatal("vmid 99 added")
	}
	if err := e.c.AddNode(NodeSpec{Name: "bad_name"}); err == nil {
		t.Fatal("bad node name added")
	}
	if err := e.c.AddToken("nobang@pve", "s", TokenOptions{}); err == nil {
		t.Fatal("bad token id added")
	}
	if !e.c.Now().Equal(testStart) {
		t.Fatalf("now %v", e.c.Now())
	}
}

func TestSetSpeed(t *testing.T) {
	t.Parallel()
	c := New(Options{Speed: 1, Start: testStart})
	c.AddNode(NodeSpec{Name: "pve1"})
	c.AddVM(VMSpec{VMID: 100, Node: "pve1"})
	c.SetSpeed(100000)
	c.mu.Lock()
	t0 := c.newTask(c.nodes["pve1"], "qmstart", "100", "root@pam", c.clock.Now())
	c.startWorker(t0, c.nodes["pve1"], 100, false, t0.start)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := c.WaitTask(ctx, t0.upid)
	if err != nil || ts.ExitStatus != "OK" {
		t.Fatalf("start at high speed: %+v %v", ts, err)
	}
}

// TestHungUpClientGetsNoAnswer: a client that hangs up while its request is
// held (SetLatency, or a 401's delay) gets nothing back, as from pveproxy.
// net/http would otherwise write a 200 with an empty body for the returned
// handler, which a client still reading could take for PVE's answer.
func TestHungUpClientGetsNoAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.c.SetLatency(time.Hour)
	u, err := url.Parse(e.eps["pve1"].URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "http" {
		t.Fatalf("the test speaks plain HTTP, the endpoint is %s", u)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET /api2/json/version HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: " + e.auth + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	// Half-close: the server's read sees the end, as when a client hangs up,
	// while this side can still read whatever it writes.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v (got %q)", err, got)
	}
	if len(got) != 0 {
		t.Fatalf("a hung-up client got %q", got)
	}
}
