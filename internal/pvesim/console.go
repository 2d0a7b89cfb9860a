package pvesim

import (
	"crypto/rand"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Consoles, as PVE serves them (decision 0103):
//
//   - POST …/{qemu,lxc}/{vmid}/vncproxy and …/termproxy start a worker
//     ("vncproxy" task) that listens on the next free port 5900–5999 of the
//     node that received the call, for one connection, for 10 s, and answer
//     {user, ticket, port, upid[, cert, password]};
//   - GET …/vncwebsocket checks the ticket (PVE::AccessControl::
//     verify_vnc_ticket: bound to user, /vms/<vmid> and port, -20 s < age <
//     40 s) and pveproxy upgrades to a WebSocket relayed to that port
//     (consolews.go);
//   - behind a VNC port an RFB 3.8 server (rfb.go) with VNC authentication
//     by the 8-character password; behind a termproxy port termproxy's
//     protocol and a small shell (termshell.go).
//
// The ports are not real sockets: a listener is an entry of the node's
// console table, and a connection is a net.Pipe from the WebSocket relay.

// Console timings (qemu-server, pve-container, termproxy: 10 s to connect
// and 10 s to send the ticket line; QEMU's VNC password expires 30 s after
// `qm vncproxy` sets it).
const (
	consoleAcceptTimeout = 10 * time.Second
	termTicketTimeout    = 10 * time.Second
	vncPasswordLifetime  = 30 * time.Second
	vncTicketMinAge      = -20 * time.Second
	vncTicketMaxAge      = 40 * time.Second
	vncPortFirst         = 5900
	vncPortLast          = 5999
)

// consoleKind is what listens on a console port.
type consoleKind int

const (
	consoleVNC  consoleKind = iota // QEMU's VNC (qm vncproxy) or vncterm
	consoleTerm                    // termproxy
)

// consoleListener is a worker waiting for (or serving) its one connection.
// Guarded by Cluster.mu.
type consoleListener struct {
	local    string // the node whose port it is
	port     int
	kind     consoleKind
	lxc      bool
	vmid     int
	user     string
	password string // the VNC protocol password; "" when none
	ticket   string // the vnc ticket termproxy pins (--ticket-fd)
	serial   string // qemu termproxy's serial interface ("" = the first socket one)
	width    int    // vncterm's -width/-height (lxc vncproxy)
	height   int
	task     *task
	timeout  *event
	accepted bool
	session  *consoleSession
}

// consoleSession is one connection being served; conn is the console
// process's end of the pipe.
type consoleSession struct {
	l    *consoleListener
	conn net.Conn
	ws   func() // closes the WebSocket side
}

// consoleTable is every node's console ports and open sessions.
type consoleTable struct {
	ports    map[string]map[int]*consoleListener // node → port → listener
	sessions map[*consoleSession]bool
}

func (t *consoleTable) init() {
	if t.ports == nil {
		t.ports = map[string]map[int]*consoleListener{}
		t.sessions = map[*consoleSession]bool{}
	}
}

// nextVNCPort is PVE::Tools::next_vnc_port: the first free port of
// 5900–5999 on the node; c.mu must be held.
func (c *Cluster) nextVNCPort(local string) (int, bool) {
	c.cons.init()
	used := c.cons.ports[local]
	for p := vncPortFirst; p <= vncPortLast; p++ {
		if used[p] == nil {
			return p, true
		}
	}
	return 0, false
}

// assembleVNCTicket is PVE::AccessControl::assemble_vnc_ticket:
// "PVEVNC:<HEXTIME>::<signature>", the signature over the plain part, the
// user, the path and the port (PVE signs with the cluster's RSA key, the
// emulator with its HMAC key).
func (c *Cluster) assembleVNCTicket(user, path string, port int, now time.Time) string {
	plain := fmt.Sprintf("PVEVNC:%08X", now.Unix())
	secret := plain + ":" + user + ":" + path
	if c.rel.vncTicketPort {
		secret += ":" + strconv.Itoa(port)
	}
	return plain + "::" + c.sign(secret)
}

var (
	rsaTicketRE = regexp.MustCompile(`^(\S+)::([^:\s]+)$`)
	vncPlainRE  = regexp.MustCompile(`^PVEVNC:(?:(\S+):)?([A-Z0-9]{8})$`)
	vncPwPrefix = regexp.MustCompile(`^.{8}:(PVEVNC:.*)$`)
)

// verifyVNCTicket is PVE::AccessControl::verify_vnc_ticket (with
// PVE::Ticket::verify_rsa_ticket): the 8-character password prefix vncproxy
// adds is dropped, then signature, user, path, port and age (-20 s < age <
// 40 s) must hold. port 0 is "no port" (an old-style ticket); releases
// before vncTicketPort know neither the port nor the prefix.
func (c *Cluster) verifyVNCTicket(ticket, user, path string, port int, now time.Time) bool {
	if !c.rel.vncTicketPort {
		port = 0 // no port in the ticket, no password in front
	} else if m := vncPwPrefix.FindStringSubmatch(ticket); m != nil {
		ticket = m[1]
	}
	m := rsaTicketRE.FindStringSubmatch(ticket)
	if m == nil {
		return false
	}
	secret := m[1] + ":" + user + ":" + path
	if port != 0 {
		secret += ":" + strconv.Itoa(port)
	}
	if !equalConst(c.sign(secret), m[2]) {
		return false
	}
	pm := vncPlainRE.FindStringSubmatch(m[1])
	if pm == nil {
		return false
	}
	ts, err := strconv.ParseInt(pm[2], 16, 64)
	if err != nil {
		return false
	}
	age := now.Sub(time.Unix(ts, 0))
	return age > vncTicketMinAge && age < vncTicketMaxAge
}

// invalidVNCTicket is verify_rsa_ticket's die text.
const invalidVNCTicket = "permission denied - invalid PVEVNC ticket"

// generateVNCPassword is PVE::Ticket::generate_vnc_password: 8 printable
// ASCII characters ('!' .. '~').
func generateVNCPassword() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = '!' + b[i]%('~'-'!'+1)
	}
	return string(b[:])
}

// consoleGuest finds the guest a console call names (load_config on the
// URI's node); c.mu must be held.
func (c *Cluster) consoleGuest(lxc bool, node string, vmid int) (*guest, string) {
	if lxc {
		if k := c.ctOn(node, vmid); k != nil {
			return &k.guest, ""
		}
		return nil, ctConfigMissing(node, vmid)
	}
	if v, ok := c.vms[vmid]; ok && v.node == node {
		return &v.guest, ""
	}
	return nil, configMissing(node, vmid)
}

// listen starts a console worker and its listener; c.mu must be held.
func (c *Cluster) listen(r *request, l *consoleListener) (string, string) {
	port, ok := c.nextVNCPort(r.local)
	if !ok {
		return "", fmt.Sprintf("unable to find free port (%d-%d)", vncPortFirst, vncPortLast)
	}
	l.local, l.port, l.user, l.vmid = r.local, port, r.who.user, r.vmid()
	ticket := c.assembleVNCTicket(l.user, "/vms/"+strconv.Itoa(l.vmid), port, r.now)
	l.ticket = ticket
	t := c.newTask(c.nodes[r.local], "vncproxy", strconv.Itoa(l.vmid), l.user, r.now)
	l.task = t
	if c.cons.ports[r.local] == nil {
		c.cons.ports[r.local] = map[int]*consoleListener{}
	}
	c.cons.ports[r.local][port] = l
	l.timeout = c.after(t, r.now, consoleAcceptTimeout, func(at time.Time) {
		if l.accepted {
			return
		}
		c.dropListener(l)
		if l.kind == consoleTerm {
			c.finish(t, at, "failed waiting for client: timed out")
		} else {
			c.finish(t, at, "connection timed out")
		}
	})
	return ticket, ""
}

// dropListener frees a listener's port; c.mu must be held.
func (c *Cluster) dropListener(l *consoleListener) {
	if m := c.cons.ports[l.local]; m != nil && m[l.port] == l {
		delete(m, l.port)
	}
}

// uriNode is the {node} of the path: these methods have no proxyto, the
// node that received the call serves the console (PVE reaches a guest on
// another node over ssh).
func (r *request) uriNode() string {
	n, _ := r.param("node")
	return n
}

func hQemuVNCProxy(r *request) response  { return vncProxy(r, false) }
func hLXCVNCProxy(r *request) response   { return vncProxy(r, true) }
func hQemuTermProxy(r *request) response { return termProxy(r, false) }
func hLXCTermProxy(r *request) response  { return termProxy(r, true) }

// vncProxy is qemu-server's and pve-container's vncproxy: a VNC listener
// with an 8-character password, which the ticket carries in front
// ("<password>:PVEVNC:…"). For a container the password exists only with
// websocket=1 (without, vncterm wants VeNCrypt, which is not emulated).
func vncProxy(r *request, lxc bool) response {
	c := r.c
	vmid := r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, msg := c.consoleGuest(lxc, r.uriNode(), vmid); msg != "" {
		return die(msg)
	}
	l := &consoleListener{kind: consoleVNC, lxc: lxc}
	if lxc {
		if w, ok := r.integer("width"); ok {
			l.width = int(w)
		}
		if h, ok := r.integer("height"); ok {
			l.height = int(h)
		}
	}
	newStyle := c.rel.vncTicketPort
	if newStyle && (!lxc || r.flag("websocket")) || !lxc && r.flag("generate-password") {
		l.password = generateVNCPassword()
	}
	ticket, msg := c.listen(r, l)
	if msg != "" {
		return die(msg)
	}
	returnPassword := l.password != ""
	switch {
	case newStyle && l.password != "":
		ticket = l.password + ":" + ticket
	case !newStyle && l.password == "" && (!lxc || r.flag("websocket")):
		// Before: the ticket itself is the VNC password (QEMU and vncterm
		// use its first 8 characters).
		l.password = ticket
	}

	res := map[string]any{
		"user":   l.user,
		"ticket": ticket,
		"port":   l.port,
		"upid":   l.task.upid,
		"cert":   string(c.nodes[r.local].cert.pem),
	}
	if returnPassword {
		res["password"] = l.password
	}
	return success(res)
}

// termProxy is the termproxy methods: a termproxy listener that pins the
// ticket it returns.
func termProxy(r *request, lxc bool) response {
	c := r.c
	vmid := r.vmid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, msg := c.consoleGuest(lxc, r.uriNode(), vmid); msg != "" {
		return die(msg)
	}
	l := &consoleListener{kind: consoleTerm, lxc: lxc}
	if !lxc {
		l.serial, _ = r.param("serial")
	}
	ticket, msg := c.listen(r, l)
	if msg != "" {
		return die(msg)
	}
	if !c.rel.vncTicketPort {
		l.ticket = "" // termproxy pins no ticket (no --ticket-fd)
	}
	return success(map[string]any{"user": l.user, "ticket": ticket, "port": l.port, "upid": l.task.upid})
}

// vncWebsocket is the vncwebsocket methods: the ticket must be the caller's
// for this guest and port, the guest's config must exist; the answer is
// {port} (as the string it was given), and with an Upgrade pveproxy relays
// the connection to that port (consolews.go).
func vncWebsocket(r *request, lxc bool) response {
	c := r.c
	vmid := r.vmid()
	portText, _ := r.param("port")
	port, _ := strconv.Atoi(strings.TrimPrefix(portText, "+"))
	ticket, _ := r.param("vncticket")
	if !c.verifyVNCTicket(ticket, r.who.user, "/vms/"+strconv.Itoa(vmid), port, r.now) {
		return die(invalidVNCTicket)
	}
	c.mu.RLock()
	_, msg := c.consoleGuest(lxc, r.uriNode(), vmid)
	c.mu.RUnlock()
	if msg != "" {
		return die(msg)
	}
	res := success(map[string]any{"port": portText})
	res.upgrade = &wsTarget{local: r.local, port: port}
	return res
}

func hQemuVNCWebsocket(r *request) response { return vncWebsocket(r, false) }
func hLXCVNCWebsocket(r *request) response  { return vncWebsocket(r, true) }

// accept hands a connection to the listener on the node's port, as a TCP
// connect to localhost:<port> would reach it; false is "connection
// refused" (nothing listens, or the one connection was already taken).
func (c *Cluster) accept(local string, port int, conn net.Conn, closeWS func()) bool {
	c.mu.Lock()
	c.cons.init()
	l := c.cons.ports[local][port]
	if l == nil || l.accepted || !l.task.running {
		c.mu.Unlock()
		return false
	}
	l.accepted = true
	c.dropListener(l) // the worker closes its listening socket after accept
	c.clock.Cancel(l.timeout)
	s := &consoleSession{l: l, conn: conn, ws: closeWS}
	l.session = s
	c.cons.sessions[s] = true
	now := c.clock.Now()
	c.mu.Unlock()
	go c.runConsole(s, now)
	return true
}

// runConsole serves one console connection until either side ends it, then
// ends the worker's task.
func (c *Cluster) runConsole(s *consoleSession, connectedAt time.Time) {
	var errText string
	switch s.l.kind {
	case consoleTerm:
		errText = c.serveTermproxy(s, connectedAt)
	default:
		errText = c.serveVNC(s, connectedAt)
	}
	s.conn.Close()
	c.mu.Lock()
	delete(c.cons.sessions, s)
	c.finish(s.l.task, c.clock.Now(), errText)
	c.mu.Unlock()
}

// guestRunning reports whether the console's guest runs on the node it was
// opened for.
func (c *Cluster) consoleGuestState(l *consoleListener) (g *guest, running bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if l.lxc {
		if k := c.cts[l.vmid]; k != nil {
			return &k.guest, k.running
		}
		return nil, false
	}
	if v := c.vms[l.vmid]; v != nil {
		return &v.guest, v.running
	}
	return nil, false
}

// ConsoleSessions is how many console connections the emulator serves now
// (every node together).
func (c *Cluster) ConsoleSessions() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cons.sessions)
}

// ConsoleListeners is how many console ports wait for their connection.
func (c *Cluster) ConsoleListeners() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, m := range c.cons.ports {
		n += len(m)
	}
	return n
}

// endConsolesOf closes the console connections of a guest that stopped or
// moved away (the process behind them ended); c.mu must be held.
func (c *Cluster) endConsolesOf(vmid int) {
	for s := range c.cons.sessions {
		if s.l.vmid == vmid {
			s.conn.Close()
		}
	}
}

// dropConsoles closes every console connection of a node (its endpoint
// went away: node offline, server closed); "" is every node.
func (c *Cluster) dropConsoles(local string) {
	c.mu.Lock()
	var closers []func()
	for s := range c.cons.sessions {
		if local == "" || s.l.local == local {
			closers = append(closers, s.ws)
			s.conn.Close()
		}
	}
	c.mu.Unlock()
	for _, f := range closers {
		if f != nil {
			f()
		}
	}
}

func equalConst(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := 0; i < len(a); i++ {
		v |= a[i] ^ b[i]
	}
	return v == 0
}
