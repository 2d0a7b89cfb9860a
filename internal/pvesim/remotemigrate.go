package pvesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// A remote migration's source side: POST /nodes/{node}/qemu/{vmid}/remote_migrate
// (qemu-server API2/Qemu.pm remote_migrate_vm, QemuMigrate.pm with
// $opts->{remote}) and POST /nodes/{node}/lxc/{vmid}/remote_migrate
// (pve-container API2/LXC.pm, LXC/Migrate.pm). The handler reads the target's
// /cluster/status with the token and the pinned fingerprint it was given;
// the worker opens the target's mtunnel, connects to its mtunnelwebsocket
// and drives the migration with the tunnel's commands (mtunnel.go), all over
// real HTTPS. The worker is a goroutine (it waits on the network), which
// waits for the emulated clock between steps.

// wsTunnelVersion is QemuMigrate's and LXC::Migrate's $WS_TUNNEL_VERSION.
const wsTunnelVersion = 2

// remoteCallTimeout bounds one call to the target's API (PVE::APIClient::LWP's
// default timeout is 10 minutes; the emulator's targets are local).
const remoteCallTimeout = 30 * time.Second

var bridgeIDRE = regexp.MustCompile(`^[-_.\w\d]+$`)

// remoteEndpoint is a parsed proxmox-remote property string.
type remoteEndpoint struct {
	apitoken    string // "PVEAPIToken=user@realm!id=secret"
	host        string
	port        int
	fingerprint string
}

// parseRemoteEndpoint is parse_property_string('proxmox-remote', ...).
func parseRemoteEndpoint(s string) (remoteEndpoint, error) {
	var e remoteEndpoint
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return e, fmt.Errorf("value without key, but schema does not define a default key")
		}
		if seen[k] {
			return e, fmt.Errorf("duplicate key in comma-separated list property: %s", k)
		}
		seen[k] = true
		switch k {
		case "apitoken":
			e.apitoken = v
		case "host":
			e.host = v
		case "fingerprint":
			e.fingerprint = v
		case "port":
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return e, fmt.Errorf("port: value must be a port number")
			}
			e.port = p
		default:
			return e, fmt.Errorf("invalid key in comma-separated list property: %s", k)
		}
	}
	switch {
	case e.apitoken == "":
		return e, fmt.Errorf("apitoken: property is missing and it is not optional")
	case e.host == "":
		return e, fmt.Errorf("host: property is missing and it is not optional")
	}
	if e.port == 0 {
		e.port = 8006
	}
	return e, nil
}

// remoteAPI is PVE::APIClient::LWP as a remote migration uses it: an API
// token and a pinned fingerprint.
type remoteAPI struct {
	ep     remoteEndpoint
	client *http.Client
}

func newRemoteAPI(ep remoteEndpoint) *remoteAPI {
	tr := &http.Transport{TLSClientConfig: pinnedTLS(ep.fingerprint), DisableKeepAlives: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	return &remoteAPI{ep: ep, client: &http.Client{Transport: tr, Timeout: remoteCallTimeout}}
}

func (a *remoteAPI) base() string {
	return "https://" + net.JoinHostPort(a.ep.host, strconv.Itoa(a.ep.port))
}

// call makes one request; an error reads as APIClient::LWP's die: "CODE MSG".
func (a *remoteAPI) call(method, path string, params url.Values) (json.RawMessage, error) {
	u := a.base() + "/api2/json" + path
	var body io.Reader
	if method == "GET" && len(params) > 0 {
		u += "?" + params.Encode()
	} else if len(params) > 0 {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", a.ep.apitoken)
	resp, err := a.client.Do(req)
	if err != nil {
		if errors.Is(err, errFingerprint) {
			return nil, fmt.Errorf("500 Can't connect to %s:%d (certificate verify failed)", a.ep.host, a.ep.port)
		}
		return nil, fmt.Errorf("500 Can't connect to %s:%d (%v)", a.ep.host, a.ep.port, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)+" ")
		var e struct {
			Message string            `json:"message"`
			Errors  map[string]string `json:"errors"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Message != "" {
			msg = strings.TrimRight(e.Message, "\n")
			for _, k := range sortedKeys(e.Errors) {
				msg += "\n" + k + ": " + strings.TrimRight(e.Errors[k], "\n")
			}
		}
		return nil, fmt.Errorf("%d %s", resp.StatusCode, msg)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("500 unable to parse the answer of %s %s", method, path)
	}
	return env.Data, nil
}

// remoteNode is the target's node behind the endpoint: /cluster/status's
// local node.
func (a *remoteAPI) remoteNode() (name, ip string, err error) {
	data, err := a.call("GET", "/cluster/status", nil)
	if err != nil {
		return "", "", err
	}
	var entries []struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Local int    `json:"local"`
		IP    string `json:"ip"`
	}
	if err := json.Unmarshal(data, &entries); err != nil {
		return "", "", fmt.Errorf("500 unable to parse /cluster/status")
	}
	for _, e := range entries {
		if e.Type == "node" && e.Local == 1 {
			return e.Name, e.IP, nil
		}
	}
	return "", "", errors.New("couldn't determine endpoint's node name")
}

// remoteMigration is one remote migration worker (qmigrate or vzmigrate).
type remoteMigration struct {
	c          *Cluster
	t          *task
	kind       string // "qemu" or "lxc"
	vmid       int
	targetVMID int
	src        string
	dst        string // the target cluster's node
	dstIP      string
	api        *remoteAPI
	online     bool // a VM's live migration
	restart    bool // a container's restart migration
	timeout    int  // the restart's shutdown timeout
	delete     bool
	storageMap *idMap
	bridgeMap  *idMap
	bwlimit    int64

	begin  time.Time
	phase  int
	tun    *lineConn
	killed atomic.Bool
}

// hRemoteMigrate is POST /nodes/{node}/qemu/{vmid}/remote_migrate.
func hRemoteMigrate(r *request) response { return remoteMigrate(r, "qemu") }

// hCTRemoteMigrate is POST /nodes/{node}/lxc/{vmid}/remote_migrate.
func hCTRemoteMigrate(r *request) response { return remoteMigrate(r, "lxc") }

func remoteMigrate(r *request, kind string) response {
	c, vmid := r.c, r.vmid()
	m := &remoteMigration{c: c, kind: kind, vmid: vmid, targetVMID: vmid, src: r.node, delete: r.flag("delete")}
	if tv, ok := r.integer("target-vmid"); ok {
		m.targetVMID = int(tv)
	}
	epText, _ := r.param("target-endpoint")
	ep, err := parseRemoteEndpoint(epText)
	if err != nil {
		return paramFail(map[string]string{"target-endpoint": err.Error()})
	}
	noun := "VM"
	if kind == "lxc" {
		noun = "CT"
		m.restart = r.flag("restart")
		if t, ok := r.integer("timeout"); ok {
			m.timeout = int(t)
		}
	}
	m.online = r.flag("online")
	c.mu.RLock()
	var g *guest
	if kind == "qemu" {
		if v := c.vms[vmid]; v != nil && v.node == r.node {
			g = &v.guest
		}
	} else if k := c.ctOn(r.node, vmid); k != nil {
		g = &k.guest
	}
	quorate := c.quorate()
	var running bool
	var lock string
	var ha bool
	if g != nil {
		running, lock, ha = g.running, g.lock, g.ha
	}
	c.mu.RUnlock()
	if !quorate {
		return die(noQuorum)
	}
	if g == nil {
		if kind == "qemu" {
			return die(configMissing(r.node, vmid))
		}
		return die(ctConfigMissing(r.node, vmid))
	}
	if kind == "lxc" && running && !m.online && !m.restart {
		return die("can't migrate running container without --online or --restart")
	}
	if lock != "" {
		if kind == "qemu" {
			return die(fmt.Sprintf("VM is locked (%s)", lock))
		}
		return die(fmt.Sprintf("CT is locked (%s)", lock))
	}
	if ha {
		return paramFail(map[string]string{"vmid": fmt.Sprintf("cannot remote-migrate %s that is configured for HA", noun)})
	}
	m.api = newRemoteAPI(ep)
	if kind == "qemu" {
		if running && !m.online {
			return die("can't migrate running VM without --online")
		}
		if !running {
			m.online = false
		}
	}
	ts, _ := r.param("target-storage")
	if m.storageMap, err = parseIDMap(ts); err != nil {
		return paramFail(map[string]string{"target-storage": "failed to parse storage map: " + err.Error()})
	}
	tb, _ := r.param("target-bridge")
	if m.bridgeMap, err = parseIDMap(tb); err != nil {
		return paramFail(map[string]string{"target-bridge": "failed to parse bridge map: " + err.Error()})
	}
	if m.storageMap.identity {
		return die("remote migration requires explicit storage mapping!")
	}
	if bw, ok := r.integer("bwlimit"); ok {
		m.bwlimit = bw
	}
	// Before the worker: the handler itself asks the target which node the
	// endpoint is (and so fails at once on a wrong token or fingerprint).
	if m.dst, m.dstIP, err = m.api.remoteNode(); err != nil {
		return die(err.Error())
	}
	typ := "qmigrate"
	if kind == "lxc" {
		typ = "vzmigrate"
	}
	c.mu.Lock()
	now := c.clock.Now()
	m.t = c.newTask(c.nodes[r.node], typ, strconv.Itoa(vmid), r.who.user, now)
	m.t.interrupt = func(at time.Time) { m.killed.Store(true) }
	upid := m.t.upid
	c.mu.Unlock()
	go m.run()
	return success(upid)
}

func (m *remoteMigration) logf(format string, args ...any) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.c.logAt(m.t, m.c.clock.Now(), fmt.Sprintf(format, args...))
}

func (m *remoteMigration) errf(format string, args ...any) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.c.logErrAt(m.t, m.c.clock.Now(), fmt.Sprintf(format, args...))
}

// raw writes a line without the time prefix (BlockJob.pm's prints).
func (m *remoteMigration) raw(line string) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.t.log(line)
}

// sleep waits for d of emulated time.
func (m *remoteMigration) sleep(d time.Duration) {
	ch := make(chan struct{})
	m.c.clock.At(m.c.clock.Now().Add(d), func(time.Time) { close(ch) })
	<-ch
}

func (m *remoteMigration) duration() string { return hms(m.c.clock.Now().Sub(m.begin)) }

// interrupted is the worker's delayed interrupt (AbstractMigrate's eval_int).
func (m *remoteMigration) interrupted() error {
	if m.killed.Load() {
		return errors.New("interrupted by signal")
	}
	return nil
}

// cmd sends one tunnel command and reads its answer (PVE::Tunnel::write_tunnel).
func (m *remoteMigration) cmd(name string, params map[string]any, timeout time.Duration) (map[string]any, error) {
	msg := map[string]any{"cmd": name}
	for k, v := range params {
		msg[k] = v
	}
	b, _ := json.Marshal(msg)
	if err := m.tun.send(b); err != nil {
		return nil, fmt.Errorf("tunnel failed - %v", err)
	}
	reply, err := m.tun.receive(timeout)
	if err != nil {
		return nil, fmt.Errorf("no reply to command '%s': %v", name, err)
	}
	var res map[string]any
	if err := json.Unmarshal(reply, &res); err != nil {
		return nil, fmt.Errorf("failed to decode reply to command '%s'", name)
	}
	if ok, _ := res["success"].(bool); !ok {
		// PVE::Tunnel::write_tunnel's die, the command as it was sent.
		msg, _ := res["msg"].(string)
		return nil, fmt.Errorf("error - tunnel command '%s' failed - %s", b, strings.TrimRight(msg, "\n"))
	}
	return res, nil
}

// openTunnel is fork_websocket_tunnel: POST mtunnel on the target, then
// its WebSocket with the ticket, then the version handshake.
func (m *remoteMigration) openTunnel(storages, bridges []string) error {
	path := fmt.Sprintf("/nodes/%s/%s/%d/mtunnel", m.dst, m.kind, m.targetVMID)
	params := url.Values{}
	if len(storages) > 0 {
		params.Set("storages", strings.Join(storages, ","))
	}
	if len(bridges) > 0 {
		params.Set("bridges", strings.Join(bridges, ","))
	}
	data, err := m.api.call("POST", path, params)
	if err != nil {
		return err
	}
	var res struct {
		UPID   string `json:"upid"`
		Ticket string `json:"ticket"`
		Socket string `json:"socket"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return errors.New("unable to parse the mtunnel answer")
	}
	m.logf("remote: started tunnel worker '%s'", res.UPID)
	u, _ := url.Parse(m.api.base() + fmt.Sprintf("/api2/json/nodes/%s/%s/%d/mtunnelwebsocket", m.dst, m.kind, m.targetVMID))
	u.RawQuery = url.Values{"socket": {res.Socket}, "ticket": {res.Ticket}}.Encode()
	tun, err := dialTunnel(u, m.api.ep.fingerprint, m.api.ep.apitoken, remoteCallTimeout)
	if err != nil {
		return fmt.Errorf("failed to connect to websocket tunnel - %v", err)
	}
	m.tun = tun
	v, err := m.cmd("version", nil, 10*time.Second)
	if err != nil {
		return err
	}
	api, _ := v["api"].(float64)
	age, _ := v["age"].(float64)
	m.logf("local WS tunnel version: %d", wsTunnelVersion)
	m.logf("remote WS tunnel version: %d", int(api))
	m.logf("minimum required WS tunnel version: %d", int(api)-int(age))
	if wsTunnelVersion < int(api)-int(age) {
		return errors.New("Remote tunnel endpoint not compatible, upgrade required")
	}
	if wsTunnelVersion > int(api) {
		return errors.New("Remote tunnel endpoint too old, upgrade required")
	}
	m.raw("websocket tunnel started") // QemuMigrate prints it without the time
	return nil
}

// closeTunnel is finish_tunnel: quit (with cleanup on failure), then close.
func (m *remoteMigration) closeTunnel(cleanup bool) {
	if m.tun == nil {
		return
	}
	_, _ = m.cmd("quit", map[string]any{"cleanup": boolInt(cleanup)}, 10*time.Second)
	m.tun.close()
	m.tun = nil
}

// remoteGuest is what the worker reads of the guest under c.mu.
type remoteGuest struct {
	running bool
	mem     int64
	disks   []Disk
	bridge  string
	conf    string // the config as the target receives it
}

func (m *remoteMigration) read() (remoteGuest, bool) {
	c := m.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	var g *guest
	var conf map[string]any
	if m.kind == "qemu" {
		if v := c.vms[m.vmid]; v != nil && v.node == m.src {
			g, conf = &v.guest, c.vmConfig(v)
		}
	} else if k := c.ctOn(m.src, m.vmid); k != nil {
		g, conf = &k.guest, k.config()
	}
	if g == nil {
		return remoteGuest{}, false
	}
	rg := remoteGuest{running: g.running, mem: g.mem, disks: append([]Disk(nil), g.disks...), bridge: c.netBridge(m.vmid)}
	delete(conf, "lock")
	delete(conf, "digest")
	rg.conf = writeConfig(conf)
	return rg, true
}

// writeConfig is a config file's text: "key: value" lines, sorted.
func writeConfig(conf map[string]any) string {
	var b strings.Builder
	for _, k := range sortedKeys(conf) {
		fmt.Fprintf(&b, "%s: %v\n", k, conf[k])
	}
	return b.String()
}

func (m *remoteMigration) setLock(lock string) {
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.vms[m.vmid]; m.kind == "qemu" && v != nil {
		v.lock = lock
	} else if k := c.cts[m.vmid]; m.kind == "lxc" && k != nil {
		k.lock = lock
	}
}

// run is AbstractMigrate::migrate with the remote options.
func (m *remoteMigration) run() {
	c := m.c
	m.begin = c.clock.Now()
	err := m.migrate()
	if err == nil {
		m.logf("migration finished successfully (duration %s)", m.duration())
		c.mu.Lock()
		c.finish(m.t, c.clock.Now(), "")
		c.mu.Unlock()
		return
	}
	var problems *migrationProblems
	if errors.As(err, &problems) {
		m.errf("migration finished with problems (duration %s)", m.duration())
		c.mu.Lock()
		c.finish(m.t, c.clock.Now(), "migration problems")
		c.mu.Unlock()
		return
	}
	m.errf("migration aborted (duration %s): %s", m.duration(), strings.TrimRight(err.Error(), "\n"))
	c.mu.Lock()
	c.finish(m.t, c.clock.Now(), "migration aborted")
	c.mu.Unlock()
}

// migrationProblems is a failure after phase 1 (the guest stays on the source).
type migrationProblems struct{ err error }

func (p *migrationProblems) Error() string { return p.err.Error() }

func (m *remoteMigration) migrate() error {
	g, ok := m.read()
	if !ok {
		if m.kind == "qemu" {
			return errors.New(configMissing(m.src, m.vmid))
		}
		return errors.New(ctConfigMissing(m.src, m.vmid))
	}
	if msg, failing := m.takeFailure(); failing {
		return errors.New(msg)
	}
	// prepare: the storages and bridges the target must have, the tunnel.
	storages := map[string]bool{}
	for _, d := range g.disks {
		sid, _, _ := strings.Cut(d.Volid, ":")
		storages[m.storageMap.target(sid)] = true
	}
	bridges := []string{m.bridgeMap.target(g.bridge)}
	if err := m.openTunnel(sortedKeys(storages), bridges); err != nil {
		m.closeTunnel(true)
		return err
	}
	if m.kind == "lxc" && g.running && m.restart {
		m.logf("shutdown CT %d", m.vmid)
		m.sleep(guestPowerOff)
		m.c.mu.Lock()
		if k := m.c.cts[m.vmid]; k != nil {
			k.running = false
			k.pid = 0
		}
		m.c.mu.Unlock()
	}
	// phase 1
	m.phase = 1
	if err := m.interrupted(); err != nil {
		return m.failPhase1(err)
	}
	m.logf("starting migration of %s %d to node '%s' (%s)", map[string]string{"qemu": "VM", "lxc": "CT"}[m.kind], m.vmid, m.dst, m.dstIP)
	m.setLock("migrate")
	disks := append([]Disk(nil), g.disks...)
	sort.Slice(disks, func(i, j int) bool { return disks[i].Volid < disks[j].Volid })
	for _, d := range disks {
		if m.kind == "qemu" {
			m.logf("found local disk '%s' (attached)", d.Volid)
		} else {
			m.logf("found local volume '%s' (in current VM config)", d.Volid)
		}
	}
	newVolids := map[string]string{}
	if !m.online {
		if len(disks) > 0 && m.kind == "qemu" {
			m.logf("copying local disk images")
		}
		for _, d := range disks {
			nv, err := m.importDisk(d)
			if err != nil {
				return m.failPhase1(err)
			}
			newVolids[d.Volid] = nv
		}
	}
	m.logf("mapped: net0 from %s to %s", g.bridge, m.bridgeMap.target(g.bridge))
	if m.online {
		for _, d := range disks {
			sid, _, _ := strings.Cut(d.Volid, ":")
			target := m.storageMap.target(sid)
			m.logf("Allocating volume for drive '%s' on remote storage '%s'..", d.Name, target)
			res, err := m.cmd("disk", map[string]any{"storage": target, "drive": d.Name, "size": d.Size, "format": "raw"}, 600*time.Second)
			if err != nil {
				return m.failPhase1(err)
			}
			nv, _ := res["volid"].(string)
			newVolids[d.Volid] = nv
			m.logf("volume '%s' is '%s' on the target", d.Volid, nv)
		}
	}
	conf := g.conf
	for old, nv := range newVolids {
		conf = strings.ReplaceAll(conf, old+",", nv+",")
	}
	conf = strings.ReplaceAll(conf, "bridge="+g.bridge+",", "bridge="+m.bridgeMap.target(g.bridge)+",")
	if _, err := m.cmd("config", map[string]any{"conf": conf}, 120*time.Second); err != nil {
		return m.failPhase1(err)
	}
	if err := m.interrupted(); err != nil {
		return m.failPhase1(err)
	}
	if m.online {
		if err := m.phase2(g, disks, newVolids); err != nil {
			m.errf("online migrate failure - %s", err)
			m.logf("aborting phase 2 - cleanup resources")
			m.logf("migrate_cancel")
			_, _ = m.cmd("stop", nil, 10*time.Second)
			m.closeTunnel(true)
			m.setLock("")
			return &migrationProblems{err}
		}
	}
	// phase 3: the source stops, the target is unlocked (and started after a
	// restart migration), the source is deleted when asked.
	m.phase = 3
	if m.kind == "qemu" && m.online {
		m.c.mu.Lock()
		if v := m.c.vms[m.vmid]; v != nil {
			v.running, v.qmp, v.pid = false, "", 0
		}
		m.c.mu.Unlock()
	}
	if m.kind == "lxc" {
		m.logf("start final cleanup")
	}
	if _, err := m.cmd("unlock", nil, 10*time.Second); err != nil {
		m.errf("Failed to clear migrate lock - %s", err)
	}
	if m.kind == "lxc" && g.running && m.restart {
		m.logf("start container on target node")
		if _, err := m.cmd("start", nil, 60*time.Second); err != nil {
			m.closeTunnel(false)
			return &migrationProblems{err}
		}
	}
	m.closeTunnel(false)
	if m.delete {
		m.c.mu.Lock()
		m.c.removeGuest(m.kind, m.vmid)
		m.c.mu.Unlock()
	}
	return nil
}

// takeFailure pops a failure queued with FailNextTasks for the task's type.
func (m *remoteMigration) takeFailure() (string, bool) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.c.takeFailure(m.t.typ)
}

// failPhase1 is phase1_cleanup: the error, the lock removed, the target's
// volumes and config freed through the tunnel.
func (m *remoteMigration) failPhase1(err error) error {
	m.errf("%s", strings.TrimRight(err.Error(), "\n"))
	m.logf("aborting phase 1 - cleanup resources")
	m.setLock("")
	m.closeTunnel(true)
	if m.kind == "lxc" && m.restart {
		m.c.mu.Lock()
		if k := m.c.cts[m.vmid]; k != nil && !k.running {
			k.running, k.startedAt, k.pid = true, m.c.clock.Now(), m.c.nextPID(m.c.nodes[k.node])
		}
		m.c.mu.Unlock()
		m.logf("start container on source node")
	}
	return err
}

func (m *remoteMigration) rate(base int64) float64 {
	r := float64(base)
	if m.bwlimit > 0 && float64(m.bwlimit*1024) < r {
		r = float64(m.bwlimit * 1024)
	}
	return r
}

// importDisk is storage_migrate through the tunnel (disk-import, the data,
// query-disk-import): the volume is copied at the disk bandwidth.
func (m *remoteMigration) importDisk(d Disk) (string, error) {
	sid, _, _ := strings.Cut(d.Volid, ":")
	target := m.storageMap.target(sid)
	if _, err := m.cmd("disk-import", map[string]any{"storage": target, "volname": d.Volid, "size": d.Size, "format": "raw"}, 600*time.Second); err != nil {
		return "", err
	}
	rate := m.rate(m.c.opts.DiskBandwidth)
	total := time.Duration(float64(d.Size) / rate * float64(time.Second))
	for done := time.Duration(0); done < total; {
		step := min(time.Second, total-done)
		m.sleep(step)
		done += step
		if err := m.interrupted(); err != nil {
			return "", err
		}
		moved := min(int64(rate*done.Seconds()), d.Size)
		m.raw(fmt.Sprintf("%d bytes (%s, %s) copied, %s s, %s/s", moved, humanSize(float64(moved), 1000, "B"),
			humanSize(float64(moved), 1024, "iB"), perlFloat(done.Seconds()), humanSize(rate, 1000, "B")))
	}
	res, err := m.cmd("query-disk-import", nil, 10*time.Second)
	if err != nil {
		return "", err
	}
	nv, _ := res["volid"].(string)
	m.logf("volume '%s' is '%s' on the target", d.Volid, nv)
	return nv, nil
}

// phase2 is a VM's live migration to the target: the VM is started there
// waiting for the migration, its disks are mirrored, then its memory moves.
func (m *remoteMigration) phase2(g remoteGuest, disks []Disk, newVolids map[string]string) error {
	m.phase = 2
	m.logf("starting VM %d on remote node '%s'", m.vmid, m.dst)
	if _, err := m.cmd("start", map[string]any{"migrate_opts": map[string]any{"remote_node": m.dst}}, 60*time.Second); err != nil {
		return err
	}
	m.logf("Setting up tunnel for '/run/qemu-server/%d.migrate'", m.vmid)
	if len(disks) > 0 {
		m.logf("Setting up tunnel for '/run/qemu-server/%d_nbd.migrate'", m.vmid)
		m.logf("starting storage migration")
		for _, d := range disks {
			m.logf("%s: start migration to nbd:unix:/run/qemu-server/%d_nbd.migrate:exportname=drive-%s", d.Name, m.vmid, d.Name)
		}
	}
	jobID := func(d Disk) string {
		if m.c.rel.blockdevMirror {
			return "mirror-" + d.Name
		}
		return "drive-" + d.Name
	}
	rate := m.rate(m.c.opts.DiskBandwidth)
	var elapsed time.Duration
	for ready := len(disks) == 0; !ready; {
		m.sleep(time.Second)
		elapsed += time.Second
		if err := m.interrupted(); err != nil {
			return err
		}
		ready = true
		for _, d := range disks {
			done := min(int64(rate*elapsed.Seconds()), d.Size)
			line := fmt.Sprintf("%s: transferred %s of %s (%.2f%%) in %s", jobID(d), renderBytes(float64(done)),
				renderBytes(float64(d.Size)), float64(done)*100/float64(max(d.Size, 1)), renderDuration(elapsed))
			if done >= d.Size {
				line += ", ready"
			} else {
				ready = false
			}
			m.raw(line)
		}
	}
	if len(disks) > 0 {
		m.raw("all 'mirror' jobs are ready")
	}
	m.logf("starting online/live migration on unix:/run/qemu-server/%d.migrate", m.vmid)
	m.logf("set migration capabilities")
	if m.bwlimit > 0 {
		m.logf("migration speed limit: %s/s", renderBytes(float64(m.bwlimit*1024)))
	}
	m.logf("migration downtime limit: 100 ms")
	m.logf("migration cachesize: %s", renderBytes(float64(roundPowerOf2(g.mem/10))))
	m.logf("set migration parameters")
	m.logf("start migrate command to unix:/run/qemu-server/%d.migrate", m.vmid)
	memRate := m.rate(m.c.opts.MigrationBandwidth)
	total := time.Duration(float64(g.mem) / memRate * float64(time.Second))
	start := m.c.clock.Now()
	for done := time.Duration(0); done < total; {
		step := min(time.Second, total-done)
		m.sleep(step)
		done += step
		if err := m.interrupted(); err != nil {
			return err
		}
		if done < total {
			m.logf("migration active, transferred %s of %s VM-state, %s/s", renderBytes(memRate*done.Seconds()),
				renderBytes(float64(g.mem)), renderBytes(memRate))
		}
	}
	if delay := m.c.clock.Now().Unix() - start.Unix(); delay > 0 {
		m.logf("average migration speed: %s/s - downtime %d ms", renderBytes(float64(g.mem)/float64(delay)), 40+m.vmid%60)
	}
	if m.c.rel.migrationSummary {
		m.logf("migration completed, transferred %s VM-state", renderBytes(float64(g.mem)))
	}
	m.logf("migration status: completed")
	for _, d := range disks {
		m.raw(fmt.Sprintf("%s: Completing block job...", jobID(d)))
		m.raw(fmt.Sprintf("%s: Completed successfully.", jobID(d)))
		m.raw(fmt.Sprintf("%s: mirror-job finished", jobID(d)))
	}
	if len(disks) > 0 {
		m.logf("stopping NBD storage migration server on target.")
		if _, err := m.cmd("nbdstop", nil, 30*time.Second); err != nil {
			return err
		}
	}
	if _, err := m.cmd("resume", nil, 30*time.Second); err != nil {
		return err
	}
	return nil
}

// removeGuest destroys a guest (destroy_vm / destroy_lxc_container after a
// remote migration with delete); c.mu must be held.
func (c *Cluster) removeGuest(kind string, vmid int) {
	var node string
	if kind == "qemu" {
		v := c.vms[vmid]
		if v == nil {
			return
		}
		node = v.node
		delete(c.vms, vmid)
		delete(c.nodes[node].vms, vmid)
	} else {
		k := c.cts[vmid]
		if k == nil {
			return
		}
		node = k.node
		delete(c.cts, vmid)
		delete(c.nodes[node].cts, vmid)
	}
	delete(c.remote.nets, vmid)
	id := strconv.Itoa(vmid)
	for i, s := range c.vmOrder {
		if s == id {
			c.vmOrder = append(c.vmOrder[:i], c.vmOrder[i+1:]...)
			break
		}
	}
}
