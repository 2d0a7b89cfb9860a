package pvesim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// upidRE is PVE::UPID::decode's pattern: pstart has 8 or 9 hex digits, the id
// may be empty, the trailing colon is mandatory.
var upidRE = regexp.MustCompile(`^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$`)

// upidInfo is a decoded UPID.
type upidInfo struct {
	node      string
	pid       int64
	pstart    int64
	starttime int64
	typ       string
	id        string
	user      string
}

// encodeUPID formats a UPID exactly as PVE::UPID::encode (upper-case hex).
func encodeUPID(u upidInfo) string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", u.node, u.pid, u.pstart, u.starttime, u.typ, u.id, u.user)
}

// decodeUPID parses a UPID; ok is false where PVE says "unable to parse worker upid".
func decodeUPID(s string) (upidInfo, bool) {
	m := upidRE.FindStringSubmatch(s)
	if m == nil {
		return upidInfo{}, false
	}
	hex := func(h string) int64 {
		v, _ := strconv.ParseInt(h, 16, 64)
		return v
	}
	return upidInfo{
		node:      m[1],
		pid:       hex(m[3]),
		pstart:    hex(m[4]),
		starttime: hex(m[5]),
		typ:       m[6],
		id:        m[7],
		user:      m[8],
	}, true
}

// tokenIDRE is PVE::AccessControl's token id: USER@REALM!TOKENNAME.
var tokenIDRE = regexp.MustCompile(`^(([^\s:/]+)@([A-Za-z][A-Za-z0-9.\-_]+))!([A-Za-z][A-Za-z0-9.\-_]+)$`)

// splitTokenID splits "user@realm!name" into "user@realm" and "name".
func splitTokenID(user string) (owner, token string, ok bool) {
	m := tokenIDRE.FindStringSubmatch(user)
	if m == nil {
		return user, "", false
	}
	return m[1], m[4], true
}

// taskOwnedBy is Tasks.pm's check_task_user: a token sees its own tasks, a
// user sees its own and its tokens' tasks.
func taskOwnedBy(taskUser, authUser string) bool {
	if owner, _, isToken := splitTokenID(taskUser); isToken {
		return authUser == taskUser || authUser == owner
	}
	return authUser == taskUser
}

// normalizeStatusType is PVE::UPID::normalize_status_type.
func normalizeStatusType(status string) string {
	switch {
	case status == "":
		return "unknown"
	case status == "OK":
		return "ok"
	case warningsRE.MatchString(status):
		return "warning"
	case status == "unexpected status":
		return "unknown"
	}
	return "error"
}

var warningsRE = regexp.MustCompile(`^WARNINGS: \d+$`)

// exitFromLastLine is PVE::UPID::read_status.
func exitFromLastLine(line string) string {
	switch {
	case line == "TASK OK":
		return "OK"
	case strings.HasPrefix(line, "TASK ERROR: ") && len(line) > len("TASK ERROR: "):
		return strings.TrimPrefix(line, "TASK ERROR: ")
	case strings.HasPrefix(line, "TASK WARNINGS: ") && warningsRE.MatchString(strings.TrimPrefix(line, "TASK ")):
		return strings.TrimPrefix(line, "TASK ")
	}
	return "unexpected status"
}
