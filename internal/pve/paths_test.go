package pve

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestValidNodeAndVMID(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"pve1", "a", "A-b-9", strings.Repeat("a", 63)} {
		if !ValidNode(n) {
			t.Errorf("ValidNode(%q) = false", n)
		}
	}
	for _, n := range []string{"", "-a", "a-", "a_b", "a.b", "pve1/..", "pve1%2F", "..", strings.Repeat("a", 64), "pve\x00", "pve\n", "ä"} {
		if ValidNode(n) {
			t.Errorf("ValidNode(%q) = true", n)
		}
	}
	for _, id := range []int{100, 999999999, 12345} {
		if !ValidVMID(id) {
			t.Errorf("ValidVMID(%d) = false", id)
		}
	}
	for _, id := range []int{-1, 0, 99, 1000000000} {
		if ValidVMID(id) {
			t.Errorf("ValidVMID(%d) = true", id)
		}
	}
}

func TestGuestPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		g    Guest
		want string
	}{
		{VMOn("pve-1", 100), "/nodes/pve-1/qemu/100/status/start"},
		{CTOn("pve-1", 200), "/nodes/pve-1/lxc/200/status/start"},
	} {
		p, err := guestPath(c.g, "status/start")
		if err != nil || p.escaped != c.want || p.node != "pve-1" {
			t.Fatalf("guestPath(%v) = %+v, %v, want %s", c.g, p, err, c.want)
		}
	}
	for _, bad := range []struct {
		g      Guest
		action string
	}{
		{VMOn("pve1/..", 100), "status/start"}, {VMOn("%2e%2e", 100), "status/start"}, {VMOn("pve1", 99), "status/start"},
		{VMOn("pve1", 100), "status/../../access"}, {VMOn("pve1", 100), "firewall"}, {VMOn("", 100), "migrate"},
		{Guest{Kind: "openvz", Node: "pve1", VMID: 100}, "status/start"}, {Guest{Node: "pve1", VMID: 100}, "status/start"},
		{Guest{Kind: "qemu/../lxc", Node: "pve1", VMID: 100}, "status/start"}, {CTOn("pve1", 100), "status/../x"},
	} {
		if p, err := guestPath(bad.g, bad.action); err == nil {
			t.Errorf("guestPath(%+v, %q) = %q, want error", bad.g, bad.action, p.escaped)
		}
	}
}

func TestTaskPath(t *testing.T) {
	t.Parallel()
	u, _ := ParseUPID("UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve!gw:")
	p, err := taskPath(u, "status")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/nodes/pve2/tasks/UPID:pve2:0003A1B2:0129F3C4:66B1E7F0:qmigrate:100:vmgate@pve%21gw:/status"; p.escaped != want {
		t.Errorf("taskPath = %q, want %q", p.escaped, want)
	}
	if p.node != "pve2" {
		t.Errorf("node = %q", p.node)
	}
	// A UPID built by hand with a hostile field is refused.
	for _, bad := range []UPID{
		{Node: "pve1", Type: "qmstart", ID: "../../x", User: "root@pam", StartTime: time.Unix(1, 0)},
		{Node: "pve1/..", Type: "qmstart", ID: "100", User: "root@pam", StartTime: time.Unix(1, 0)},
		{Node: "pve1", Type: "qm start", ID: "100", User: "root@pam", StartTime: time.Unix(1, 0)},
		{Node: "pve1", Type: "qmstart", ID: "100", User: "", StartTime: time.Unix(1, 0)},
		{Node: strings.Repeat("a", 64), Type: "qmstart", ID: "100", User: "root@pam", StartTime: time.Unix(1, 0)},
		{},
	} {
		if p, err := taskPath(bad, "log"); err == nil {
			t.Errorf("taskPath(%+v) = %q, want error", bad, p.escaped)
		}
	}
	if _, err := taskPath(u, "../status"); err == nil {
		t.Error("taskPath with a bad sub-path accepted")
	}
}

func TestRequestURL(t *testing.T) {
	t.Parallel()
	p, _ := guestPath(VMOn("pve1", 100), "migrate")
	u, err := requestURL("https://10.0.0.1:8006", p, url.Values{"target": {"pve2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.String(), "https://10.0.0.1:8006/api2/json/nodes/pve1/qemu/100/migrate?target=pve2"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	for _, bad := range []string{"/nodes/../access", "/nodes/%2e%2e/x", "/nodes/a%2Fb", "/nodes//x", "/nodes/a%00", "nodes", "/nodes/a?b", "/nodes/a#b"} {
		if _, err := requestURL("https://h:8006", apiPath{escaped: bad}, nil); err == nil {
			t.Errorf("requestURL accepted path %q", bad)
		}
	}
}

// The shapes of every path PVE may ever see from this client.
var (
	guestPathRE = regexp.MustCompile(`^/api2/json/nodes/[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?/(?:qemu|lxc)/[1-9][0-9]{2,8}/(?:status/(?:current|start|stop|shutdown|reboot|suspend|resume)|migrate)$`)
	taskPathRE  = regexp.MustCompile(`^/api2/json/nodes/([a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)/tasks/(UPID:[^/?#]+)(?:/status|/log)?$`)
)

func FuzzGuestPath(f *testing.F) {
	f.Add("qemu", "pve1", 100, "status/start")
	f.Add("lxc", "pve1/..", 100, "migrate")
	f.Add("qemu", "%2e%2e", 999999999, "status/current")
	f.Add("lxc/..", "a\x00", 1000000000, "status/stop")
	f.Add("", "pve1\n", 100, "status/../x")
	f.Fuzz(func(t *testing.T, kind, node string, vmid int, action string) {
		g := Guest{Kind: GuestKind(kind), Node: node, VMID: vmid}
		p, err := guestPath(g, action)
		if err != nil {
			return
		}
		u, err := requestURL("https://10.0.0.1:8006", p, nil)
		if err != nil {
			t.Fatalf("guestPath(%+v,%q) = %q but requestURL refuses it: %v", g, action, p.escaped, err)
		}
		if !guestPathRE.MatchString(u.EscapedPath()) {
			t.Fatalf("guestPath(%+v,%q) gave path %q", g, action, u.EscapedPath())
		}
		if p.node != node {
			t.Fatalf("node %q, want %q", p.node, node)
		}
	})
}

func FuzzTaskPath(f *testing.F) {
	f.Add("pve1", uint32(1), uint64(2), int64(3), "qmstart", "100", "root@pam", "status")
	f.Add("pve1", uint32(1), uint64(0x1FFFFFFFF), int64(3), "..", "..", "a@b!c", "log")
	f.Add("pve1/..", uint32(1), uint64(2), int64(3), "qm%2fstart", "%2e%2e", "a?b#c", "")
	f.Add("n", uint32(1), uint64(2), int64(-1), "t", "i\x00", "u\r\n", "status")
	f.Fuzz(func(t *testing.T, node string, pid uint32, pstart uint64, start int64, typ, id, user, sub string) {
		in := UPID{Node: node, PID: pid, PStart: pstart, StartTime: time.Unix(start, 0), Type: typ, ID: id, User: user}
		p, err := taskPath(in, sub)
		if err != nil {
			return
		}
		u, err := requestURL("https://[::1]:8006", p, nil)
		if err != nil {
			t.Fatalf("taskPath(%+v) = %q but requestURL refuses it: %v", in, p.escaped, err)
		}
		m := taskPathRE.FindStringSubmatch(u.EscapedPath())
		if m == nil {
			t.Fatalf("taskPath(%+v) gave path %q", in, u.EscapedPath())
		}
		seg, err := url.PathUnescape(m[2])
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseUPID(seg)
		if err != nil || !got.Equal(in) || got.Node != m[1] || seg != in.String() {
			t.Fatalf("path %q names %q (%v), want %q", u.EscapedPath(), seg, err, in.String())
		}
	})
}

func FuzzRequestURLQuery(f *testing.F) {
	f.Add("pve2", "a&b=c", "x#y")
	f.Fuzz(func(t *testing.T, target, typefilter, userfilter string) {
		p, _ := nodeTasksPath("pve1")
		q := url.Values{"target": {target}, "typefilter": {typefilter}, "userfilter": {userfilter}}
		u, err := requestURL("https://pve1.example:8006", p, q)
		if err != nil {
			t.Fatal(err)
		}
		if u.EscapedPath() != "/api2/json/nodes/pve1/tasks" {
			t.Fatalf("query values changed the path: %q", u.EscapedPath())
		}
		got := u.Query()
		if got.Get("target") != target || got.Get("typefilter") != typefilter || got.Get("userfilter") != userfilter || len(got) != 3 {
			t.Fatalf("query %q does not carry the values back", u.RawQuery)
		}
	})
}
