package pvesim

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Ticket and CSRF token lifetimes (PVE::AccessControl: 2 h, 5 min clock skew).
const (
	ticketLifetime = 2 * time.Hour
	ticketMinAge   = -300 * time.Second
)

var userIDRE = regexp.MustCompile(`^[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+$`)

// principal is who a request runs as: the RPC environment's user, which for
// an API token is the full token id ("vmgate@pve!gw").
type principal struct {
	user  string
	token *token // nil for ticket users
}

// isRoot is PVE's `$authuser eq 'root@pam'`; a root@pam token is not root.
func (p principal) isRoot() bool { return p.user == "root@pam" }

// extractAuthValue is PVE::APIServer::Formatter::extract_auth_value: the
// leftmost /(?:^|\s)KEY(?:=| )([^;]*)/ match, URI-unescaped (written out by
// hand: it runs twice on every request).
func extractAuthValue(header, key string) string {
	for i := 0; i < len(header); {
		j := strings.Index(header[i:], key)
		if j < 0 {
			return ""
		}
		j += i
		end := j + len(key)
		if (j == 0 || isPerlSpace(header[j-1])) && end < len(header) && (header[end] == '=' || header[end] == ' ') {
			v := header[end+1:]
			if k := strings.IndexByte(v, ';'); k >= 0 {
				v = v[:k]
			}
			if u, err := url.PathUnescape(v); err == nil {
				return u
			}
			return v
		}
		i = j + 1
	}
	return ""
}

func isPerlSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}

// authFailed is the one answer PVE ≥ 9.1.5 gives for any bad credential
// (pve-manager 26c10a2e); older releases give verify_token's and
// verify_ticket's own reasons.
const authFailed = "Authentication failed!"

// verifyToken is PVE::AccessControl::verify_token. On failure it returns
// the reason PVE < 9.1.5 puts in the 401's status line.
func (c *Cluster) verifyToken(value string, now time.Time) (principal, string) {
	i := strings.LastIndex(value, "=")
	if i < 0 {
		return principal{}, "no tokenid specified"
	}
	id, secret := value[:i], value[i+1:]
	user, name, ok := splitTokenID(id)
	if !ok {
		return principal{}, fmt.Sprintf("'%s' is not a valid token ID - not able to split into user and token parts", id)
	}
	t, ok := c.tokens[id]
	if !ok {
		if !c.userKnown(user) {
			return principal{}, fmt.Sprintf("no such user ('%s')", user)
		}
		return principal{}, fmt.Sprintf("no such token '%s' for user '%s'", name, user)
	}
	if !t.expire.IsZero() && !now.Before(t.expire) {
		return principal{}, fmt.Sprintf("token '%s' access expired", name)
	}
	if subtle.ConstantTimeCompare([]byte(t.secret), []byte(secret)) != 1 {
		return principal{}, "invalid token value!"
	}
	return principal{user: id, token: t}, ""
}

// userKnown reports whether a user exists: a ticket user, or the owner of a
// token (the emulator keeps no separate user list for tokens).
func (c *Cluster) userKnown(user string) bool {
	if _, ok := c.users[user]; ok {
		return true
	}
	for id := range c.tokens {
		if owner, _, _ := splitTokenID(id); owner == user {
			return true
		}
	}
	return false
}

func (c *Cluster) sign(data string) string {
	m := hmac.New(sha256.New, c.ticketKey)
	m.Write([]byte(data))
	return base64.RawStdEncoding.EncodeToString(m.Sum(nil))
}

// assembleTicket builds "PVE:<user>:<HEXTIME>::<signature>". PVE signs with
// the cluster's RSA key; the emulator uses an HMAC (see the package doc).
func (c *Cluster) assembleTicket(user string, now time.Time) string {
	plain := fmt.Sprintf("PVE:%s:%08X", strings.ReplaceAll(user, ":", "%3A"), now.Unix())
	return plain + "::" + c.sign(plain)
}

var ticketRE = regexp.MustCompile(`^PVE:(\S+):([A-Z0-9]{8})$`)

// verifyTicket returns the ticket's user if it is genuine and not expired.
func (c *Cluster) verifyTicket(ticket string, now time.Time) (string, bool) {
	plain, sig, ok := strings.Cut(ticket, "::")
	if !ok || sig == "" || strings.ContainsAny(sig, ": \t") {
		return "", false
	}
	if !hmac.Equal([]byte(c.sign(plain)), []byte(sig)) {
		return "", false
	}
	m := ticketRE.FindStringSubmatch(plain)
	if m == nil {
		return "", false
	}
	if !ageOK(m[2], now) {
		return "", false
	}
	user := strings.ReplaceAll(m[1], "%3A", ":")
	if _, ok := c.users[user]; !ok {
		return "", false
	}
	return user, true
}

func ageOK(hexTime string, now time.Time) bool {
	ts, err := strconv.ParseInt(hexTime, 16, 64)
	if err != nil {
		return false
	}
	age := now.Sub(time.Unix(ts, 0))
	return age > ticketMinAge && age < ticketLifetime
}

// assembleCSRF builds "<HEXTIME>:<base64 HMAC-SHA256 of HEXTIME:user>".
func (c *Cluster) assembleCSRF(user string, now time.Time) string {
	ts := fmt.Sprintf("%08X", now.Unix())
	return ts + ":" + c.sign(ts+":"+user)
}

var csrfRE = regexp.MustCompile(`^([A-Z0-9]{8}):(\S+)$`)

func (c *Cluster) verifyCSRF(user, tok string, now time.Time) bool {
	m := csrfRE.FindStringSubmatch(tok)
	if m == nil {
		return false
	}
	if !hmac.Equal([]byte(c.sign(m[1]+":"+user)), []byte(m[2])) {
		return false
	}
	return ageOK(m[1], now)
}

// authenticate is pve-manager's auth_handler: it returns the principal, or
// the reason phrase of the 401. c.mu must be held (read).
func (c *Cluster) authenticate(method string, cookieHdr, authHdr, csrf string, now time.Time) (principal, string) {
	ticket := extractAuthValue(cookieHdr, "PVEAuthCookie")
	if ticket == "" {
		ticket = extractAuthValue(authHdr, "PVEAuthCookie")
	}
	var apiToken string
	if ticket == "" {
		apiToken = extractAuthValue(authHdr, "PVEAPIToken")
	}
	if apiToken != "" {
		p, why := c.verifyToken(apiToken, now)
		if why != "" {
			return principal{}, c.authFailure(why)
		}
		return p, ""
	}
	if ticket == "" {
		return principal{}, "No ticket"
	}
	user, ok := c.verifyTicket(ticket, now)
	if !ok {
		return principal{}, c.authFailure("permission denied - invalid PVE ticket")
	}
	if method != "GET" && !c.verifyCSRF(user, csrf, now) {
		return principal{}, "Permission denied - invalid csrf token"
	}
	return principal{user: user}, ""
}

// authFailure is the 401 reason of a bad credential: the one text of PVE ≥
// 9.1.5, or the verifier's own reason before.
func (c *Cluster) authFailure(why string) string {
	if c.rel.unifiedAuthFailure {
		return authFailed
	}
	return why
}

// hasPriv is RPCEnvironment::check for the privilege model of the emulator:
// users have every privilege, tokens what their TokenOptions grant.
func (c *Cluster) hasPriv(p principal, path, priv string) bool {
	if p.token == nil {
		return true
	}
	t := p.token
	if c.withholds(p, priv) {
		return false
	}
	if rest, ok := strings.CutPrefix(path, "/vms/"); ok {
		if !t.privs[priv] {
			return false
		}
		if t.onlyVMs == nil {
			return true
		}
		id, err := strconv.Atoi(rest)
		return err == nil && t.onlyVMs[id]
	}
	if strings.HasPrefix(priv, "Sys.") && (path == "/" || strings.HasPrefix(path, "/nodes/")) {
		return !t.noSys
	}
	return true
}

// capabilities is a ticket answer's "cap": what the user may do, as the GUI
// reads it. Emulated users have every privilege.
func capabilities() map[string]map[string]int {
	set := func(privs ...string) map[string]int {
		m := map[string]int{}
		for _, p := range privs {
			m[p] = 1
		}
		return m
	}
	return map[string]map[string]int{
		"vms": set("VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
			"VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network",
			"VM.Config.Options", "VM.Console", "VM.Migrate", "VM.PowerMgmt", "VM.Snapshot", "VM.Snapshot.Rollback",
			"Permissions.Modify"),
		"nodes":   set("Sys.Audit", "Sys.Console", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt", "Sys.Syslog", "Permissions.Modify"),
		"storage": set("Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit", "Permissions.Modify"),
		"dc":      set("Sys.Audit", "Sys.Modify", "SDN.Audit", "SDN.Allocate"),
		"access":  set("Group.Allocate", "Permissions.Modify", "User.Modify"),
		"sdn":     set("SDN.Allocate", "SDN.Audit", "SDN.Use", "Permissions.Modify"),
		"mapping": set("Mapping.Audit", "Mapping.Modify", "Mapping.Use", "Permissions.Modify"),
	}
}
