package pvesim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A remote migration's target side: POST /nodes/{node}/{qemu,lxc}/{vmid}/mtunnel
// (qemu-server API2/Qemu.pm mtunnel, pve-container API2/LXC.pm mtunnel)
// checks the caller may receive the guest, creates its empty config locked
// "create" and starts the tunnel worker (qmtunnel, vzmtunnel), which waits
// for the source on GET .../mtunnelwebsocket and answers its commands one
// JSON line at a time, logging "received command 'NAME'" for each.

// mtunAcceptTimeout is how long the tunnel worker waits for the source to
// connect (run_with_timeout(300, accept)), in real time.
const mtunAcceptTimeout = 300 * time.Second

// mtun is one tunnel worker's state; guarded by Cluster.mu.
type mtun struct {
	kind      string // qemu or lxc
	vmid      int
	node      string
	user      string
	ticket    string
	socket    string
	t         *task
	connected bool
	exit      bool
	disks     int      // volumes allocated so far (their names' index)
	volumes   []string // allocated here, freed on a cleanup
	imported  string   // the last disk-import's volume
}

func hMtunnel(r *request) response   { return mtunnel(r, "qemu") }
func hCTMtunnel(r *request) response { return mtunnel(r, "lxc") }

func mtunnel(r *request, kind string) response {
	c, vmid := r.c, r.vmid()
	node, _ := r.param("node")
	if node != "localhost" && node != r.local {
		return paramFail(map[string]string{"node": fmt.Sprintf("node needs to be 'localhost' or local hostname '%s'", r.local)})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// permissions: ['and', ['perm', '/vms/{vmid}', ['VM.Allocate']], ['perm', '/', ['Sys.Incoming']]]
	vmPath := "/vms/" + strconv.Itoa(vmid)
	if !c.may(r.who, vmPath, "VM.Allocate") {
		return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (%s, VM.Allocate)\n", vmPath))
	}
	if !c.may(r.who, "/", "Sys.Incoming") {
		return fail(http.StatusForbidden, "Permission check failed (/, Sys.Incoming)\n")
	}
	n := c.nodes[r.local]
	stores := c.storages()
	c.addKnownStorages(stores)
	if list, ok := r.param("storages"); ok {
		for _, sid := range splitList(list) {
			if _, known := stores[sid]; !known {
				return die(fmt.Sprintf("storage '%s' does not exist", sid))
			}
			if !c.may(r.who, "/storage/"+sid, "Datastore.AllocateSpace") {
				return fail(http.StatusForbidden, fmt.Sprintf("Permission check failed (/storage/%s, Datastore.AllocateSpace)\n", sid))
			}
			if !n.hasStorage(sid) {
				return die(fmt.Sprintf("storage '%s' is not available on node '%s'", sid, r.local))
			}
			if storageContent(sid) == "iso,vztmpl,backup" {
				want := "images"
				if kind == "lxc" {
					want = "rootdir"
				}
				return die(fmt.Sprintf("storage '%s' does not support content-type '%s'", sid, want))
			}
		}
	}
	if list, ok := r.param("bridges"); ok {
		for _, b := range splitList(list) {
			found := false
			for _, have := range c.bridgeList() {
				found = found || have == b
			}
			if !found {
				return die(fmt.Sprintf("bridge '%s' does not exist", b))
			}
		}
	}
	if !c.quorate() {
		return die(noQuorum)
	}
	noun := "VM"
	if kind == "lxc" {
		noun = "CT"
	}
	if c.vmidTaken(vmid) {
		return paramFail(map[string]string{"vmid": fmt.Sprintf("unable to create empty %s config - %s %d already exists", noun, noun, vmid)})
	}
	// create_and_lock_config: an empty config locked "create".
	now := r.now
	if kind == "qemu" {
		v := &vm{guest: guest{vmid: vmid, node: n.name, name: noun + strconv.Itoa(vmid), cpus: 1, mem: 512 << 20, lock: "create"}}
		c.vms[vmid], n.vms[vmid] = v, v
	} else {
		k := &ct{guest: guest{vmid: vmid, node: n.name, name: noun + strconv.Itoa(vmid), mem: defaultCTMem, lock: "create"}}
		c.cts[vmid], n.cts[vmid] = k, k
	}
	c.vmOrder = append(c.vmOrder, strconv.Itoa(vmid))
	c.vmSorted = false
	typ := "qmtunnel"
	socket := fmt.Sprintf("/run/qemu-server/%d.mtunnel", vmid)
	if kind == "lxc" {
		typ, socket = "vzmtunnel", fmt.Sprintf("/run/pve/ct-%d.mtunnel", vmid)
	}
	t := c.newTask(n, typ, strconv.Itoa(vmid), r.who.user, now)
	tk := make([]byte, 24)
	_, _ = rand.Read(tk)
	mt := &mtun{kind: kind, vmid: vmid, node: n.name, user: r.who.user, socket: socket, t: t,
		ticket: "PVETUNNEL:" + strings.ToUpper(strconv.FormatInt(now.Unix(), 16)) + "::" + hex.EncodeToString(tk)}
	if c.remote.tunnels == nil {
		c.remote.tunnels = map[string]*mtun{}
	}
	c.remote.tunnels[socket] = mt
	t.log("mtunnel started")
	t.interrupt = func(at time.Time) { c.endTunnel(mt, at, "received interrupt") }
	// The wait for the source is real time, not emulated: the source
	// connects over the network, which a fast emulated clock does not speed up.
	time.AfterFunc(mtunAcceptTimeout, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if mt.connected || !t.running {
			return
		}
		t.log("Failed to accept tunnel connection - got timeout")
		t.log("Removing tunnel socket..")
		t.log("Removing temporary VM config..")
		c.removeGuest(kind, vmid)
		c.endTunnel(mt, c.clock.Now(), "Exiting mtunnel")
	})
	return success(map[string]any{"upid": t.upid, "ticket": mt.ticket, "socket": socket})
}

// endTunnel ends a tunnel worker; c.mu must be held.
func (c *Cluster) endTunnel(mt *mtun, at time.Time, err string) {
	delete(c.remote.tunnels, mt.socket)
	c.finish(mt.t, at, err)
}

func hMtunnelWebsocket(r *request) response   { return mtunnelWebsocket(r, "qemu") }
func hCTMtunnelWebsocket(r *request) response { return mtunnelWebsocket(r, "lxc") }

// mtunnelWebsocket checks the ticket for the socket, then pveproxy takes the
// connection over and forwards it to the tunnel worker.
func mtunnelWebsocket(r *request, kind string) response {
	c, vmid := r.c, r.vmid()
	node, _ := r.param("node")
	if node != "localhost" && node != r.local {
		return paramFail(map[string]string{"node": fmt.Sprintf("node needs to be 'localhost' or local hostname '%s'", r.local)})
	}
	socket, _ := r.param("socket")
	ticket, _ := r.param("ticket")
	c.mu.Lock()
	defer c.mu.Unlock()
	exists := c.vms[vmid] != nil && kind == "qemu" || c.cts[vmid] != nil && kind == "lxc"
	if !exists {
		if kind == "qemu" {
			return die(configMissing(r.local, vmid))
		}
		return die(ctConfigMissing(r.local, vmid))
	}
	mt := c.remote.tunnels[socket]
	if mt == nil || mt.ticket != ticket || mt.user != r.who.user || mt.vmid != vmid {
		return fail(http.StatusForbidden, "permission denied - invalid tunnel ticket\n")
	}
	res := success(map[string]any{"socket": socket})
	res.upgrade = &wsTarget{local: r.local, socket: socket}
	return res
}

// acceptOn hands a relayed WebSocket to what listens behind it: a console's
// port, or a migration tunnel worker's socket.
func (c *Cluster) acceptOn(to *wsTarget, conn net.Conn, closeWS func()) bool {
	if to.socket == "" {
		return c.accept(to.local, to.port, conn, closeWS)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mt := c.remote.tunnels[to.socket]
	if mt == nil || mt.connected || !mt.t.running {
		return false
	}
	mt.connected = true
	go c.serveTunnel(mt, newLineConn(conn), closeWS)
	return true
}

// serveTunnel is the tunnel worker's command loop.
func (c *Cluster) serveTunnel(mt *mtun, conn *lineConn, closeWS func()) {
	defer closeWS()
	defer conn.close()
	for {
		line, err := conn.receive(0)
		if err != nil {
			break
		}
		reply := c.tunnelCommand(mt, line)
		b, _ := json.Marshal(reply)
		if err := conn.send(b); err != nil {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !mt.t.running {
		return
	}
	if mt.exit {
		mt.t.log("mtunnel exited")
		c.endTunnel(mt, c.clock.Now(), "")
		return
	}
	c.endTunnel(mt, c.clock.Now(), "mtunnel exited unexpectedly")
}

// tunnelCommand handles one command and returns the reply.
func (c *Cluster) tunnelCommand(mt *mtun, line []byte) map[string]any {
	errReply := func(msg string) map[string]any { return map[string]any{"success": false, "msg": msg} }
	var p map[string]any
	if err := json.Unmarshal(line, &p); err != nil {
		return errReply("failed to parse command - " + err.Error())
	}
	cmd, _ := p["cmd"].(string)
	if cmd == "" {
		return errReply("'cmd' missing")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mt.exit {
		return errReply(fmt.Sprintf("tunnel is in exit-mode, processing '%s' cmd not possible", cmd))
	}
	if !tunnelCommands[cmd] {
		return errReply(fmt.Sprintf("unknown command '%s' given", cmd))
	}
	mt.t.log(fmt.Sprintf("received command '%s'", cmd))
	res, err := c.tunnelHandle(mt, cmd, p, c.clock.Now())
	if err != nil {
		return errReply(fmt.Sprintf("failed to handle '%s' command - %s", cmd, err))
	}
	if res == nil {
		res = map[string]any{}
	}
	res["success"] = true
	return res
}

// tunnelCommands are the commands the tunnel worker knows.
var tunnelCommands = map[string]bool{"version": true, "bwlimit": true, "disk": true, "disk-import": true,
	"query-disk-import": true, "config": true, "start": true, "resume": true, "nbdstop": true, "fstrim": true,
	"stop": true, "unlock": true, "ticket": true, "quit": true}

// guestDiskKey is a config key that holds a volume.
var guestDiskKey = regexp.MustCompile(`^((scsi|virtio|sata|ide|efidisk|tpmstate|mp)\d+|rootfs)$`)

type tunnelError string

func (e tunnelError) Error() string { return string(e) }

const errUnknownCommand = tunnelError("unknown command")

// tunnelHandle is the command handlers ($cmd_handlers); c.mu must be held.
func (c *Cluster) tunnelHandle(mt *mtun, cmd string, p map[string]any, now time.Time) (map[string]any, error) {
	g := c.tunnelGuest(mt)
	if g == nil && cmd != "version" && cmd != "quit" {
		return nil, tunnelError(fmt.Sprintf("guest %d is gone", mt.vmid))
	}
	str := func(k string) string { s, _ := p[k].(string); return s }
	switch cmd {
	case "version":
		return map[string]any{"api": wsTunnelVersion, "age": 0}, nil
	case "bwlimit":
		return map[string]any{"bwlimit": nil}, nil
	case "disk", "disk-import":
		sid := str("storage")
		stores := c.storages()
		c.addKnownStorages(stores)
		if _, ok := stores[sid]; !ok || !c.nodes[mt.node].hasStorage(sid) {
			return nil, tunnelError(fmt.Sprintf("storage '%s' does not exist", sid))
		}
		size, _ := p["size"].(float64)
		volid := fmt.Sprintf("%s:vm-%d-disk-%d", sid, mt.vmid, mt.disks)
		mt.disks++
		mt.volumes = append(mt.volumes, volid)
		if cmd == "disk" {
			return map[string]any{"volid": volid, "drivestr": volid + ",size=" + formatSize(int64(size))}, nil
		}
		mt.imported = volid
		return map[string]any{"ready": 1, "socket": fmt.Sprintf("/run/pve/%d.storage", mt.vmid)}, nil
	case "query-disk-import":
		return map[string]any{"status": "complete", "volid": mt.imported}, nil
	case "config":
		return nil, c.applyTunnelConfig(mt, g, str("conf"))
	case "start":
		if mt.kind == "qemu" {
			v := c.vms[mt.vmid]
			v.running, v.qmp, v.startedAt, v.pid = true, qmpPrelaunch, now, c.nextPID(c.nodes[mt.node])
			return map[string]any{"migrate": fmt.Sprintf("unix:/run/qemu-server/%d.migrate", mt.vmid)}, nil
		}
		g.running, g.startedAt, g.pid = true, now, c.nextPID(c.nodes[mt.node])
		return nil, nil
	case "resume":
		v := c.vms[mt.vmid]
		if v == nil || !v.running {
			return nil, tunnelError(fmt.Sprintf("VM %d not running", mt.vmid))
		}
		v.qmp = qmpRunning
		return nil, nil
	case "nbdstop", "fstrim":
		return nil, nil
	case "stop":
		g.running, g.pid = false, 0
		if v := c.vms[mt.vmid]; v != nil && mt.kind == "qemu" {
			v.qmp = ""
		}
		return nil, nil
	case "unlock":
		g.lock = ""
		c.guestMoved(g, mt.node, now)
		return nil, nil
	case "ticket":
		return map[string]any{"ticket": mt.ticket}, nil
	case "quit":
		if cleanup, _ := p["cleanup"].(float64); cleanup != 0 {
			for _, v := range mt.volumes {
				mt.t.log(fmt.Sprintf("freeing volume '%s' as part of cleanup", v))
			}
			c.removeGuest(mt.kind, mt.vmid)
		}
		mt.t.log("switching to exit-mode, waiting for client to disconnect")
		mt.exit = true
		return nil, nil
	}
	return nil, errUnknownCommand
}

func (c *Cluster) tunnelGuest(mt *mtun) *guest {
	if mt.kind == "qemu" {
		if v := c.vms[mt.vmid]; v != nil {
			return &v.guest
		}
		return nil
	}
	if k := c.cts[mt.vmid]; k != nil {
		return &k.guest
	}
	return nil
}

// applyTunnelConfig writes the guest's config the source sent (the volumes
// and bridges already mapped), locked "migrate" until unlock.
func (c *Cluster) applyTunnelConfig(mt *mtun, g *guest, conf string) error {
	kv := map[string]string{}
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok {
			kv[k] = v
		}
	}
	if g.lock != "create" {
		return tunnelError("Encountered wrong lock - aborting mtunnel command handling.")
	}
	var disks []Disk
	for _, k := range sortedKeys(kv) {
		v := kv[k]
		if !guestDiskKey.MatchString(k) {
			continue
		}
		volid, rest, _ := strings.Cut(v, ",")
		d := Disk{Name: k, Volid: volid}
		for _, opt := range strings.Split(rest, ",") {
			if s, ok := strings.CutPrefix(opt, "size="); ok {
				d.Size = parseSize(s)
			}
			if s, ok := strings.CutPrefix(opt, "mp="); ok {
				d.Path = s
			}
		}
		if k == "rootfs" {
			d.Path = "/"
		}
		sid, _, _ := strings.Cut(volid, ":")
		if shared, ok := c.storages()[sid]; ok {
			d.Local = !shared
		} else if shared, ok := c.remote.storages[sid]; ok {
			d.Local = !shared
		}
		disks = append(disks, d)
	}
	g.disks = disks
	if name := kv["name"]; name != "" {
		g.name = name
	}
	if name := kv["hostname"]; name != "" {
		g.name = name
	}
	if mem, err := strconv.ParseInt(kv["memory"], 10, 64); err == nil {
		g.mem = mem << 20
	}
	if cores, err := strconv.Atoi(kv["cores"]); err == nil {
		g.cpus = cores
		if k := c.cts[mt.vmid]; k != nil && mt.kind == "lxc" {
			k.cores = cores
		}
	}
	if k := c.cts[mt.vmid]; k != nil && mt.kind == "lxc" {
		if swap, err := strconv.ParseInt(kv["swap"], 10, 64); err == nil {
			k.swap = swap << 20
		}
		k.unprivileged = kv["unprivileged"] == "1"
	}
	g.tags = kv["tags"]
	g.onboot = kv["onboot"] == "1"
	for _, opt := range strings.Split(kv["net0"], ",") {
		if b, ok := strings.CutPrefix(opt, "bridge="); ok {
			if c.remote.nets == nil {
				c.remote.nets = map[int]string{}
			}
			c.remote.nets[mt.vmid] = b
		}
	}
	g.lock = "migrate"
	return nil
}

// parseSize reads a config's size ("32G", "512M", "1024").
func parseSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"):
		mult = 1 << 30
	case strings.HasSuffix(s, "T"):
		mult = 1 << 40
	}
	n, _ := strconv.ParseInt(strings.TrimRight(s, "KMGT"), 10, 64)
	return n * mult
}
