package pvesim

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// termproxy (pve-xtermjs termproxy/src/main.rs) behind a console port:
//
//  1. the client's first line is "<authid>:<ticket>\n" (at most 4 KiB,
//     within 10 s); the ticket must be the one the worker pinned and pass
//     /access/vncticket for authid, /vms/<vmid>, VM.Console and the port;
//     anything else ends the connection without an answer;
//  2. termproxy answers "OK" and starts the command on a pty of 80×20;
//  3. the client sends "0:<LEN>:<DATA>" (input), "1:<COLS>:<ROWS>:"
//     (resize) and "2" (ping; any unknown byte is skipped); the pty's bytes
//     go back raw.
//
// The command is `lxc-console` (a container) or `qm terminal` (a VM's serial
// port); what answers on it here is a tiny shell (termShell).

const (
	termTicketLineMax = 4096 // termproxy's ByteBuffer
	termLineMax       = 4095 // N_TTY's canonical line
	termNumberMax     = 20   // remove_number skips 20 bytes without a ':'
)

// serveTermproxy runs termproxy on a connection; the result is the worker's
// error ("" is TASK OK).
func (c *Cluster) serveTermproxy(s *consoleSession, connectedAt time.Time) string {
	l := s.l
	authed := make(chan struct{})
	c.mu.Lock()
	timer := c.later(connectedAt, termTicketTimeout, func(time.Time) {
		select {
		case <-authed:
		default:
			s.conn.Close()
		}
	})
	c.mu.Unlock()
	var buf []byte
	chunk := make([]byte, 4096)
	for bytes.IndexByte(buf, '\n') < 0 {
		if len(buf) >= termTicketLineMax {
			return "failed reading ticket: authentication data is incomplete"
		}
		n, err := s.conn.Read(chunk[:min(len(chunk), termTicketLineMax-len(buf))])
		buf = append(buf, chunk[:n]...)
		if err != nil {
			if n == 0 && len(buf) == 0 {
				return "failed reading ticket: connection closed before authentication"
			}
			if bytes.IndexByte(buf, '\n') < 0 {
				return "failed reading ticket: timed out"
			}
		}
	}
	close(authed)
	c.clock.Cancel(timer)
	i := bytes.IndexByte(buf, '\n')
	line, rest := buf[:i], buf[i+1:]
	authid, ticket, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return "failed reading ticket: authentication data is invalid"
	}
	if l.ticket != "" && string(ticket) != l.ticket || !c.termAuth(string(authid), string(ticket), l) {
		return "authentication request failed"
	}
	if _, err := s.conn.Write([]byte("OK")); err != nil {
		return ""
	}
	sh := c.newTermShell(s)
	if sh == nil {
		return ""
	}
	sh.feed(rest)
	for !sh.done {
		n, err := s.conn.Read(chunk)
		if n > 0 {
			sh.feed(chunk[:n])
		}
		if err != nil {
			break
		}
	}
	return ""
}

// termAuth is /access/vncticket as termproxy calls it: the ticket for
// authid, the guest's path and the port, and VM.Console there.
func (c *Cluster) termAuth(authid, ticket string, l *consoleListener) bool {
	path := "/vms/" + strconv.Itoa(l.vmid)
	now := c.clock.Now()
	if !c.verifyVNCTicket(ticket, authid, path, l.port, now) {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t, ok := c.tokens[authid]; ok {
		return c.hasPriv(principal{user: authid, token: t}, path, "VM.Console")
	}
	_, ok := c.users[authid]
	return ok
}

// termShell is the pty (line discipline with echo, canonical mode, ONLCR)
// and a shell on it.
type termShell struct {
	s        *consoleSession
	host     string
	kernel   kernelInfo
	rows     int
	cols     int
	line     []byte
	esc      int // 0 none, 1 after ESC, 2 in a CSI sequence
	done     bool
	in       []byte // termproxy's input queue
	dataLeft int    // bytes of a "0:LEN:" message still to come
	out      bytes.Buffer
}

// newTermShell starts the console's command: nil when it ended at once (a
// stopped guest, a VM without a serial port), after its message was
// written.
func (c *Cluster) newTermShell(s *consoleSession) *termShell {
	l := s.l
	sh := &termShell{s: s, rows: 20, cols: 80}
	c.mu.Lock()
	var g *guest
	running := false
	msg := ""
	if l.lxc {
		if k := c.cts[l.vmid]; k != nil {
			g, running = &k.guest, k.running
		}
		if !running {
			msg = fmt.Sprintf("%d is not running\n", l.vmid)
		}
		sh.host = ctHostname(g, l.vmid)
		sh.kernel = kernelByRelease(c.nodes[l.local].maint.kernel)
	} else {
		v := c.vms[l.vmid]
		if v != nil {
			g, running = &v.guest, v.running
		}
		iface := l.serial
		switch {
		case v == nil:
			msg = configMissing(l.local, l.vmid) + "\n"
		case iface != "" && v.serial != iface:
			msg = fmt.Sprintf("serial interface '%s' is not configured\n", iface)
		case v.serial == "":
			msg = "unable to find a serial interface\n"
		case !running:
			msg = fmt.Sprintf("VM %d not running\n", l.vmid)
		default:
			sh.write("starting serial terminal on interface " + v.serial + "\n")
		}
		sh.host = vmHostname(g, l.vmid)
		sh.kernel = kernelInfo{"6.12.48+deb13-amd64", "#1 SMP PREEMPT_DYNAMIC Debian 6.12.48-1 (2025-09-20)"}
	}
	c.mu.Unlock()
	if msg != "" {
		sh.write(msg)
		sh.flush()
		return nil
	}
	sh.write("root@" + sh.host + ":~# ")
	sh.flush()
	return sh
}

func ctHostname(g *guest, vmid int) string {
	if g != nil && g.name != "" {
		return g.name
	}
	return "CT" + strconv.Itoa(vmid)
}

func vmHostname(g *guest, vmid int) string {
	if g != nil && g.name != "" {
		return g.name
	}
	return "vm" + strconv.Itoa(vmid)
}

// write queues output as the pty shows it (ONLCR: "\n" → "\r\n").
func (sh *termShell) write(s string) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			sh.out.WriteString("\r\n")
			continue
		}
		sh.out.WriteByte(s[i])
	}
}

func (sh *termShell) flush() {
	if sh.out.Len() == 0 {
		return
	}
	if _, err := sh.s.conn.Write(sh.out.Bytes()); err != nil {
		sh.done = true
	}
	sh.out.Reset()
}

// feed is termproxy's process_queue over what arrived.
func (sh *termShell) feed(b []byte) {
	sh.in = append(sh.in, b...)
	for !sh.done {
		if sh.dataLeft > 0 {
			n := min(sh.dataLeft, len(sh.in))
			if n == 0 {
				break
			}
			sh.input(sh.in[:n])
			sh.in = sh.in[n:]
			sh.dataLeft -= n
			continue
		}
		if len(sh.in) < 2 {
			break
		}
		switch sh.in[0] {
		case '0':
			n, used, ok := termNumbers(sh.in[2:], 1)
			if !ok {
				sh.compact()
				sh.flush()
				return
			}
			sh.in = sh.in[2+used:]
			sh.dataLeft = n[0]
		case '1':
			n, used, ok := termNumbers(sh.in[2:], 2)
			if !ok {
				sh.compact()
				sh.flush()
				return
			}
			sh.in = sh.in[2+used:]
			sh.cols, sh.rows = n[0]&0xffff, n[1]&0xffff
		default: // '2' (ping) and anything unknown: skipped
			sh.in = sh.in[1:]
		}
	}
	sh.compact()
	sh.flush()
}

// compact keeps the input queue from growing behind its start.
func (sh *termShell) compact() {
	if cap(sh.in) > 64*1024 && len(sh.in) < cap(sh.in)/4 {
		sh.in = append([]byte(nil), sh.in...)
	}
}

// termNumbers reads count "<digits>:" fields; ok is false until all have
// arrived. A field that is not a number is read as 0 (termproxy drops the
// message); a field without ':' within 20 bytes is skipped as termproxy
// does.
func termNumbers(b []byte, count int) ([]int, int, bool) {
	res := make([]int, 0, count)
	used := 0
	for len(res) < count {
		i := bytes.IndexByte(b[used:], ':')
		if i < 0 {
			if len(b)-used > termNumberMax {
				// termproxy consumes such a run 20 bytes at a time and
				// never finds its number: the message is lost.
				return []int{0, 0}[:count], len(b), true
			}
			return nil, 0, false
		}
		v, err := strconv.Atoi(string(b[used : used+i]))
		if err != nil || v < 0 {
			v = 0
		}
		res = append(res, v)
		used += i + 1
	}
	return res, used, true
}

// input is bytes typed on the terminal: the line discipline echoes and
// edits, a newline runs the line.
func (sh *termShell) input(b []byte) {
	for _, ch := range b {
		if sh.done {
			return
		}
		switch sh.esc {
		case 1:
			if ch == '[' || ch == 'O' {
				sh.esc = 2
			} else {
				sh.esc = 0
			}
			continue
		case 2:
			if ch >= 0x40 && ch <= 0x7e {
				sh.esc = 0
			}
			continue
		}
		switch {
		case ch == 0x1b:
			sh.esc = 1
		case ch == '\r' || ch == '\n':
			sh.write("\n")
			line := string(sh.line)
			sh.line = sh.line[:0]
			sh.run(line)
		case ch == 0x7f || ch == 0x08:
			if n := len(sh.line); n > 0 {
				i := n - 1
				for i > 0 && sh.line[i]&0xc0 == 0x80 {
					i--
				}
				sh.line = sh.line[:i]
				sh.write("\b \b")
			}
		case ch == 0x03:
			sh.write("^C\n")
			sh.line = sh.line[:0]
			sh.prompt()
		case ch == 0x04:
			if len(sh.line) == 0 {
				sh.write("exit\n")
				sh.exit()
			}
		case ch == 0x15:
			for range strings.Count(string(sh.line), "") - 1 {
				sh.write("\b \b")
			}
			sh.line = sh.line[:0]
		case ch < 0x20 && ch != '\t':
			// other control characters do nothing here
		default:
			if len(sh.line) >= termLineMax {
				sh.write("\a")
				continue
			}
			sh.line = append(sh.line, ch)
			sh.out.WriteByte(ch)
		}
	}
}

func (sh *termShell) prompt() { sh.write("root@" + sh.host + ":~# ") }

func (sh *termShell) exit() {
	sh.flush()
	sh.done = true
}

// run is the shell: a few commands, each answering as bash and coreutils
// would.
func (sh *termShell) run(line string) {
	args := shellWords(line)
	if len(args) == 0 {
		sh.prompt()
		return
	}
	switch args[0] {
	case "echo":
		a := args[1:]
		nl := "\n"
		if len(a) > 0 && a[0] == "-n" {
			a, nl = a[1:], ""
		}
		sh.write(strings.Join(a, " ") + nl)
	case "hostname":
		sh.write(sh.host + "\n")
	case "uname":
		sh.write(sh.uname(args[1:]))
	case "stty":
		if len(args) == 2 && args[1] == "size" {
			sh.write(fmt.Sprintf("%d %d\n", sh.rows, sh.cols))
		} else {
			sh.write("stty: only 'stty size' is emulated\n")
		}
	case "pwd":
		sh.write("/root\n")
	case "whoami":
		sh.write("root\n")
	case "true", ":":
	case "clear":
		sh.out.WriteString("\x1b[H\x1b[2J\x1b[3J")
	case "exit", "logout":
		sh.write("exit\n")
		sh.exit()
		return
	default:
		sh.write("bash: " + args[0] + ": command not found\n")
	}
	sh.prompt()
}

func (sh *termShell) uname(opts []string) string {
	fields := map[byte]string{'s': "Linux", 'n': sh.host, 'r': sh.kernel.release, 'v': sh.kernel.build, 'm': "x86_64", 'o': "GNU/Linux"}
	want := map[byte]bool{}
	for _, o := range opts {
		if o == "--all" {
			o = "-a"
		}
		if len(o) < 2 || o[0] != '-' {
			return "uname: extra operand '" + o + "'\nTry 'uname --help' for more information.\n"
		}
		for i := 1; i < len(o); i++ {
			switch o[i] {
			case 'a':
				for _, k := range []byte("snrvmo") {
					want[k] = true
				}
			case 's', 'n', 'r', 'v', 'm', 'o':
				want[o[i]] = true
			default:
				return fmt.Sprintf("uname: invalid option -- '%c'\nTry 'uname --help' for more information.\n", o[i])
			}
		}
	}
	if len(want) == 0 {
		want['s'] = true
	}
	var parts []string
	for _, k := range []byte("snrvmo") {
		if want[k] {
			parts = append(parts, fields[k])
		}
	}
	return strings.Join(parts, " ") + "\n"
}

// shellWords splits a command line as the shell does for plain words,
// single and double quotes and backslashes.
func shellWords(line string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool
		quote byte
	)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote == '\'':
			if ch == '\'' {
				quote = 0
			} else {
				cur.WriteByte(ch)
			}
		case quote == '"':
			if ch == '"' {
				quote = 0
			} else if ch == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
				i++
				cur.WriteByte(line[i])
			} else {
				cur.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			in = true
		case ch == ' ' || ch == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
