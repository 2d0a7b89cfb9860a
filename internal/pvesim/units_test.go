package pvesim

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRenderBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0.0 B"},
		{1023, "1023.0 B"},
		{1024, "1.0 KiB"},
		{1048575, "1024.0 KiB"},
		{357.9 * 1024 * 1024, "357.9 MiB"},
		{1014.6 * 1024 * 1024, "1014.6 MiB"},
		{4 << 30, "4.0 GiB"},
		{1.1 * (1 << 30), "1.1 GiB"},
		{100 << 40, "100.0 TiB"},
	} {
		if got := renderBytes(tc.in); got != tc.want {
			t.Errorf("renderBytes(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        time.Duration
		want, hms string
	}{
		{0, "0s", "00:00:00"},
		{61 * time.Second, "1m 1s", "00:01:01"},
		{3723 * time.Second, "1h 2m 3s", "01:02:03"},
		{8 * 24 * time.Hour, "1w 1d", "192:00:00"},
	} {
		if got := renderDuration(tc.in); got != tc.want {
			t.Errorf("renderDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if got := hms(tc.in); got != tc.hms {
			t.Errorf("hms(%v) = %q, want %q", tc.in, got, tc.hms)
		}
	}
	if got := roundPowerOf2((4 << 30) / 10); got != 512<<20 {
		t.Errorf("roundPowerOf2(4 GiB/10) = %d, want 512 MiB", got)
	}
}

// TestDecodeURLEncoded: pveproxy's decoding of a query or form body, Perl's
// split included (an empty value is an undefined one).
func TestDecodeURLEncoded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want map[string]value
	}{
		{"a=1&b=2;c=3", map[string]value{"a": {s: "1"}, "b": {s: "2"}, "c": {s: "3"}}},
		{"a=", map[string]value{"a": {kind: nullValue}}},
		{"a==", map[string]value{"a": {kind: nullValue}}},
		{"a", map[string]value{"a": {kind: nullValue}}},
		{"a==b", map[string]value{"a": {s: ""}}},
		{"a=b=c", map[string]value{"a": {s: "b"}}},
		{"a=b=", map[string]value{"a": {s: "b"}}},
		{"a=1&a=", map[string]value{"a": {kind: nullValue}}},
		{"a=&a=1", map[string]value{"a": {s: "1"}}},
		{"a=1&a=2", map[string]value{"a": {kind: arrayValue}}},
		{"x+y=%41%2", map[string]value{"x y": {s: "A%2"}}},
	} {
		got := map[string]value{}
		decodeURLEncoded(tc.in, got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("decode %q = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestUPID(t *testing.T) {
	t.Parallel()
	u := upidInfo{node: "pve1", pid: 0x3A1B2, pstart: 0x129F3C4, starttime: 0x66B1E7F0, typ: "qmstart", id: "100", user: "root@pam"}
	s := encodeUPID(u)
	if s != "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:" {
		t.Fatalf("encode = %s", s)
	}
	got, ok := decodeUPID(s)
	if !ok || got != u {
		t.Fatalf("decode = %+v %v", got, ok)
	}
	for _, good := range []string{
		"UPID:pve1:0003A1B2:1129F3C4A:66B1E7F0:qmstart:100:root@pam:", // 9-digit pstart
		"UPID:pve1:0003a1b2:0129f3c4:66b1e7f0:srvreload::root@pam:",   // empty id, lower case
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:vmgate@pve!gw:",
	} {
		if _, ok := decodeUPID(good); !ok {
			t.Errorf("decode(%s) failed", good)
		}
	}
	for _, bad := range []string{
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam", // no trailing colon
		"UPID:pve_1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:",
		"UPID:pve1:3A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:",
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0::100:root@pam:",
		"hello",
	} {
		if _, ok := decodeUPID(bad); ok {
			t.Errorf("decode(%s) succeeded", bad)
		}
	}
}

func TestManualClockOrder(t *testing.T) {
	t.Parallel()
	c := newClock(true, 1, testStart, nil)
	var got []string
	c.At(testStart.Add(2*time.Second), func(at time.Time) { got = append(got, "b@"+at.Format("05")) })
	c.At(testStart.Add(time.Second), func(at time.Time) {
		got = append(got, "a@"+at.Format("05"))
		c.At(at.Add(500*time.Millisecond), func(at time.Time) { got = append(got, "a2@"+at.Format("05.0")) })
	})
	e := c.At(testStart.Add(time.Second), func(time.Time) { got = append(got, "cancelled") })
	c.Cancel(e)
	c.At(testStart.Add(3*time.Second), func(time.Time) { got = append(got, "late") })
	c.Advance(2 * time.Second)
	want := []string{"a@01", "a2@01.5", "b@02"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if now := c.Now(); !now.Equal(testStart.Add(2 * time.Second)) {
		t.Fatalf("now = %v", now)
	}
	if c.pending() != 1 {
		t.Fatalf("pending = %d, want 1", c.pending())
	}
}

func TestScaledClockFires(t *testing.T) {
	t.Parallel()
	c := newClock(false, 1000, testStart, nil)
	done := make(chan time.Time, 1)
	c.At(c.Now().Add(5*time.Second), func(at time.Time) { done <- at }) // 5 ms real
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("event at speed 1000 did not fire")
	}
	if n := c.Now().Sub(testStart); n < 5*time.Second {
		t.Fatalf("emulated time advanced only %v", n)
	}
}

func TestValidateMessages(t *testing.T) {
	t.Parallel()
	ms := apiSchema["/nodes/{node}/qemu/{vmid}/status/start"]["POST"]
	for _, tc := range []struct {
		name   string
		params map[string]value
		want   map[string]string
	}{
		{"valid", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}}, nil},
		{"missing", map[string]value{"node": {s: "pve1"}},
			map[string]string{"vmid": "property is missing and it is not optional"}},
		{"vmid not integer", map[string]value{"node": {s: "pve1"}, "vmid": {s: "abc"}},
			map[string]string{"vmid": "type check ('integer') failed - got 'abc'"}},
		{"vmid format before range", map[string]value{"node": {s: "pve1"}, "vmid": {s: "99"}},
			map[string]string{"vmid": "invalid format - value does not look like a valid VM ID\n"}},
		{"node format", map[string]value{"node": {s: "pve_1"}, "vmid": {s: "100"}},
			map[string]string{"node": "invalid format - value does not look like a valid node name\n"}},
		{"boolean true", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "skiplock": {s: "true"}},
			map[string]string{"skiplock": "type check ('boolean') failed - got 'true'"}},
		{"json boolean", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "skiplock": {kind: boolValue, s: "1"}}, nil},
		{"json boolean as integer", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "timeout": {kind: boolValue, s: "1"}},
			map[string]string{"timeout": "type check ('integer') failed - got JSON::PP::Boolean"}},
		{"array", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "timeout": {kind: arrayValue}},
			map[string]string{"timeout": "type check ('integer') failed - got ARRAY"}},
		{"minimum", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "timeout": {s: "-1"}},
			map[string]string{"timeout": "value must have a minimum value of 0"}},
		{"enum", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "migration_type": {s: "fast"}},
			map[string]string{"migration_type": "value 'fast' does not have a value in the enumeration 'secure, insecure'"}},
		{"cidr", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "migration_network": {s: "10.0.0.0/99"}},
			map[string]string{"migration_network": "invalid format - value does not look like a valid CIDR network\n"}},
		{"maxLength", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "stateuri": {s: strings.Repeat("x", 129)}},
			map[string]string{"stateuri": "value may only be 128 characters long"}},
		{"pattern", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "nets-host-mtu": {s: "eth0=1500"}},
			map[string]string{"nets-host-mtu": "value does not match the regex pattern"}},
		{"property string key", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "machine": {s: "q35,colour=red"}},
			map[string]string{"machine": "invalid format - invalid key in comma-separated list property: colour\n"}},
		{"property string value", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "machine": {s: "type=pc-q35-9.2+pve1,viommu=amd"}},
			map[string]string{"machine": "invalid format - format error\nmachine.viommu: value 'amd' does not have a value in the enumeration 'intel, virtio'\n"}},
		{"property string ok", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "machine": {s: "q35,viommu=intel,enable-s3=yes"}}, nil},
		{"storage pair", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "targetstorage": {s: "local-lvm:b@d"}},
			map[string]string{"targetstorage": "invalid format - entry 'local-lvm:b@d' contains invalid ID - storage ID 'b@d' contains illegal characters\n\n\n"}},
		{"unknown", map[string]value{"node": {s: "pve1"}, "vmid": {s: "100"}, "force": {s: "1"}},
			map[string]string{"force": "property is not defined in schema and the schema does not allow additional properties"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ms.validate(tc.params)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(map[string]string(got), tc.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				t.Fatalf("errors %s, want %s", g, w)
			}
		})
	}
}

func TestValidateJoinsErrors(t *testing.T) {
	t.Parallel()
	errs := paramErrors{}
	errs.add("x", "one")
	errs.add("x", "two")
	if errs["x"] != `one\ntwo` {
		t.Fatalf("joined = %q", errs["x"])
	}
	ms := apiSchema["/access/ticket"]["POST"]
	got := ms.validate(map[string]value{"username": {s: "root@pam"}, "password": {s: "x"}, "path": {s: "/vms"}})
	if got["privs"] != "missing property required by 'path'" {
		t.Fatalf("requires: %v", got)
	}
}

func TestPerlNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"100": "100", "1.0": "1", "1e2": "100", "1.5": "1.5", "+7": "7"} {
		if got := perlNumber(json.Number(in)); got != want {
			t.Errorf("perlNumber(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestAppendJSON: the hand-written encoders write what encoding/json writes.
func TestAppendJSON(t *testing.T) {
	t.Parallel()
	one, two, n64, f := 1, 2, int64(42), 0.0125
	for _, v := range []jsonAppender{
		vmEntry{ID: "qemu/100", VMID: 100, Node: "pve1", Type: "qemu", Status: "unknown"},
		vmEntry{ID: "qemu/101", VMID: 101, Node: "pve1", Type: "qemu", Status: "running", Name: `we"b\1 ünï <&> ` + "\t\x01",
			Uptime: &n64, Template: &one, MaxCPU: &two, CPU: &f, MaxMem: &n64, Mem: &n64, MaxDisk: &n64, Disk: &n64,
			NetIn: &n64, NetOut: &n64, DiskRead: &n64, DiskWrite: &n64, MemHost: &n64, Lock: "migrate", Tags: "a;b", HAState: "started"},
		nodeEntry{ID: "node/pve1", Node: "pve1", Type: "node", Status: "offline", Level: ""},
		nodeEntry{ID: "node/pve1", Node: "pve1", Type: "node", Status: "online", CPU: &f, MaxCPU: &two, Mem: &n64, MaxMem: &n64,
			Disk: &n64, MaxDisk: &n64, Uptime: &n64, Level: "c", SSLFinger: "AB:CD", CgroupMode: &two, HostArch: "x86_64", HAState: "online"},
		storageEntry{ID: "storage/pve1/local", Storage: "local", Node: "pve1", Type: "storage", PluginType: "dir", Status: "available", Shared: 0, Content: "iso", Disk: &n64, MaxDisk: &n64},
		storageEntry{ID: "storage/pve1/local", Storage: "local", Node: "pve1", Type: "storage", PluginType: "dir", Status: "unknown", Shared: 1, Content: "iso"},
	} {
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(buf.String(), "\n")
		if got := string(v.appendJSON(nil)); got != want {
			t.Errorf("appendJSON\n%s\nwant\n%s", got, want)
		}
	}
	if got := string(jsonList{vmEntry{ID: "qemu/1"}, storageEntry{}}.appendJSON(nil)); !strings.HasPrefix(got, `[{"id":"qemu/1",`) || !strings.HasSuffix(got, "}]") {
		t.Errorf("list %s", got)
	}
}
