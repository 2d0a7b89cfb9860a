package pvesim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// remotePair is the dev pair served over HTTPS on a fast clock.
type remotePair struct {
	a, b       *Cluster
	aEP, bEP   []Endpoint
	aTok, bTok string
	client     *http.Client
}

func newRemotePair(t *testing.T) *remotePair {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &remotePair{
		a: DevCluster(Options{Speed: 200}),
		b: DevClusterB(Options{Speed: 200}),
	}
	sa, err := p.a.Serve(ctx, ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sa.Close() })
	sb, err := p.b.Serve(ctx, ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	p.aEP, p.bEP = sa.Endpoints(), sb.Endpoints()
	p.aTok, p.bTok = p.a.DevToken(), p.b.DevToken()
	p.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return p
}

// endpoint is the target-endpoint property string for dev-b's node i.
func (p *remotePair) endpoint(i int, token, fingerprint string) string {
	u, _ := url.Parse(p.bEP[i].URL)
	return "apitoken=PVEAPIToken=" + token + ",host=" + u.Hostname() + ",port=" + u.Port() + ",fingerprint=" + fingerprint
}

func (p *remotePair) post(t *testing.T, path string, form url.Values) (int, string, json.RawMessage) {
	t.Helper()
	req, _ := http.NewRequest("POST", p.aEP[0].URL+"/api2/json"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "PVEAPIToken="+p.aTok)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(b, &env)
	msg := env.Message
	for k, v := range env.Errors {
		msg += k + ": " + v
	}
	return resp.StatusCode, msg, env.Data
}

func waitFor(t *testing.T, c *Cluster, upid string) TaskState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := c.WaitTask(ctx, upid)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func hasLine(log []string, part string) bool {
	for _, l := range log {
		if strings.Contains(l, part) {
			return true
		}
	}
	return false
}

// TestRemoteMigrateVMOnline: VM 100 moves live to dev-b with its disk mapped
// from ceph to tank and its bridge from vmbr0 to vmbr1; the source keeps it
// stopped and locked "migrate" (delete=0), the target runs it unlocked, and
// both sides logged their task.
func TestRemoteMigrateVMOnline(t *testing.T) {
	t.Parallel()
	p := newRemotePair(t)
	tokID, _, _ := strings.Cut(p.bTok, "=")
	status, msg, data := p.post(t, "/nodes/pve1/qemu/100/remote_migrate", url.Values{
		"target-endpoint": {p.endpoint(0, p.bTok, p.bEP[0].Fingerprint)},
		"target-storage":  {"ceph:tank"}, "target-bridge": {"vmbr0:vmbr1"}, "online": {"1"},
	})
	if status != 200 {
		t.Fatalf("remote_migrate: %d %s", status, msg)
	}
	var upid string
	_ = json.Unmarshal(data, &upid)
	ts := waitFor(t, p.a, upid)
	if ts.ExitStatus != "OK" {
		t.Fatalf("task ended %q:\n%s", ts.ExitStatus, strings.Join(ts.Log, "\n"))
	}
	for _, want := range []string{"remote: started tunnel worker 'UPID:pveb1:", "websocket tunnel started",
		"starting migration of VM 100 to node 'pveb1'", "mapped: net0 from vmbr0 to vmbr1",
		"volume 'ceph:vm-100-disk-0' is 'tank:vm-100-disk-0' on the target", "migration active, transferred",
		"migration finished successfully"} {
		if !hasLine(ts.Log, want) {
			t.Errorf("source log lacks %q:\n%s", want, strings.Join(ts.Log, "\n"))
		}
	}
	src, _ := p.a.VM(100)
	if src.Status != "stopped" || src.Lock != "migrate" {
		t.Errorf("source VM 100: %s, lock %q; want stopped, locked migrate", src.Status, src.Lock)
	}
	dst, ok := p.b.VM(100)
	if !ok || dst.Status != "running" || dst.Lock != "" || dst.Node != "pveb1" {
		t.Fatalf("target VM 100: %+v", dst)
	}
	if len(dst.Disks) != 1 || dst.Disks[0].Volid != "tank:vm-100-disk-0" {
		t.Errorf("target disks: %+v", dst.Disks)
	}
	tunnels := p.b.TasksFor(100)
	if len(tunnels) != 1 || tunnels[0].Type != "qmtunnel" || tunnels[0].User != tokID {
		t.Fatalf("target tasks: %+v", tunnels)
	}
	// The tunnel worker ends when the source has disconnected, a moment after
	// the source's task.
	if tunnels[0] = waitFor(t, p.b, tunnels[0].UPID); tunnels[0].ExitStatus != "OK" {
		t.Fatalf("tunnel task ended %q:\n%s", tunnels[0].ExitStatus, strings.Join(tunnels[0].Log, "\n"))
	}
	if !hasLine(tunnels[0].Log, "received command 'resume'") || !hasLine(tunnels[0].Log, "mtunnel exited") {
		t.Errorf("tunnel log:\n%s", strings.Join(tunnels[0].Log, "\n"))
	}
}

// TestRemoteMigrateCTRestartDelete: container 202 (local-lvm) moves by a
// restart to dev-b's pveb2 and is deleted on dev.
func TestRemoteMigrateCTRestartDelete(t *testing.T) {
	t.Parallel()
	p := newRemotePair(t)
	status, msg, data := p.post(t, "/nodes/pve3/lxc/202/remote_migrate", url.Values{
		"target-endpoint": {p.endpoint(1, p.bTok, p.bEP[1].Fingerprint)},
		"target-storage":  {"local-lvm:tank"}, "target-bridge": {"vmbr2"}, "restart": {"1"}, "delete": {"1"},
	})
	if status != 200 {
		t.Fatalf("remote_migrate: %d %s", status, msg)
	}
	var upid string
	_ = json.Unmarshal(data, &upid)
	ts := waitFor(t, p.a, upid)
	if ts.ExitStatus != "OK" || ts.Type != "vzmigrate" {
		t.Fatalf("task %s ended %q:\n%s", ts.Type, ts.ExitStatus, strings.Join(ts.Log, "\n"))
	}
	if _, ok := p.a.CT(202); ok {
		t.Error("CT 202 is still on dev after delete=1")
	}
	k, ok := p.b.CT(202)
	if !ok || k.Node != "pveb2" || k.Status != "running" || k.Lock != "" {
		t.Fatalf("CT 202 on dev-b: %+v", k)
	}
}

// TestRemoteMigrateRefusals: what PVE refuses before or in the worker.
func TestRemoteMigrateRefusals(t *testing.T) {
	t.Parallel()
	p := newRemotePair(t)
	tokID, _, _ := strings.Cut(p.bTok, "=")
	good := p.endpoint(0, p.bTok, p.bEP[0].Fingerprint)
	base := url.Values{"target-storage": {"ceph:tank"}, "target-bridge": {"vmbr1"}, "online": {"1"}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for kk, vv := range base {
			f[kk] = vv
		}
		f.Set("target-endpoint", good)
		f.Set(k, v)
		return f
	}
	for _, tc := range []struct {
		name, path string
		form       url.Values
		status     int
		msg        string
	}{
		{"wrong token", "/nodes/pve1/qemu/100/remote_migrate", with("target-endpoint", p.endpoint(0, tokID+"=wrong", p.bEP[0].Fingerprint)), 500, "401 "},
		{"wrong fingerprint", "/nodes/pve1/qemu/100/remote_migrate", with("target-endpoint", p.endpoint(0, p.bTok, p.aEP[0].Fingerprint)), 500, "certificate verify failed"},
		{"HA", "/nodes/pve2/qemu/103/remote_migrate", with("online", "1"), 400, "cannot remote-migrate VM that is configured for HA"},
		{"identity storage map", "/nodes/pve1/qemu/100/remote_migrate", with("target-storage", "1"), 500, "remote migration requires explicit storage mapping!"},
		{"running without online", "/nodes/pve1/qemu/100/remote_migrate", with("online", "0"), 500, "can't migrate running VM without --online"},
	} {
		status, msg, _ := p.post(t, tc.path, tc.form)
		if status != tc.status || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, msg, tc.status, tc.msg)
		}
	}

	// A token that may not receive: the worker fails at the tunnel.
	if err := p.b.WithholdPrivileges(tokID, "Sys.Incoming"); err != nil {
		t.Fatal(err)
	}
	status, msg, data := p.post(t, "/nodes/pve1/qemu/100/remote_migrate", with("online", "1"))
	if status != 200 {
		t.Fatalf("remote_migrate: %d %s", status, msg)
	}
	var upid string
	_ = json.Unmarshal(data, &upid)
	ts := waitFor(t, p.a, upid)
	if ts.ExitStatus != "migration aborted" || !hasLine(ts.Log, "403 Permission check failed (/, Sys.Incoming)") {
		t.Fatalf("task ended %q:\n%s", ts.ExitStatus, strings.Join(ts.Log, "\n"))
	}
	if vm, _ := p.a.VM(100); vm.Lock != "" || vm.Status != "running" {
		t.Errorf("VM 100 after the refusal: %+v", vm)
	}
	if _, ok := p.b.VM(100); ok {
		t.Error("dev-b has VM 100 after the refusal")
	}
}
