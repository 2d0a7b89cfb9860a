package pve

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseUPID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want UPID // raw is ignored
		err  bool
	}{
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", want: UPID{
			Node: "pve1", PID: 0x3A1B2, PStart: 0x129F3C4, StartTime: time.Unix(0x66B1E7F0, 0).UTC(),
			Type: "qmstart", ID: "100", User: "root@pam"}},
		{in: "UPID:pve1:0003a1b2:0129f3c4:66b1e7f0:qmigrate:100:vmgate@pve!gw:", want: UPID{
			Node: "pve1", PID: 0x3A1B2, PStart: 0x129F3C4, StartTime: time.Unix(0x66B1E7F0, 0).UTC(),
			Type: "qmigrate", ID: "100", User: "vmgate@pve!gw"}},
		// pstart of 9 hex digits (uptime > 497 days).
		{in: "UPID:n-1:FFFFFFFF:1FFFFFFFF:00000000:srvreload::root@pam:", want: UPID{
			Node: "n-1", PID: 0xFFFFFFFF, PStart: 0x1FFFFFFFF, StartTime: time.Unix(0, 0).UTC(),
			Type: "srvreload", ID: "", User: "root@pam"}},
		{in: "UPID:a:00000001:00000002:00000003:t:i:u:", want: UPID{
			Node: "a", PID: 1, PStart: 2, StartTime: time.Unix(3, 0).UTC(), Type: "t", ID: "i", User: "u"}},
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:jörg@pve:", want: UPID{
			Node: "pve1", PID: 0x3A1B2, PStart: 0x129F3C4, StartTime: time.Unix(0x66B1E7F0, 0).UTC(),
			Type: "qmstart", ID: "100", User: "jörg@pve"}},

		{in: "", err: true},
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam", err: true},    // no trailing colon
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:\n", err: true}, // trailing newline
		{in: "upid:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},
		{in: "UPID:pve1:003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},        // pid 7
		{in: "UPID:pve1:0003A1B2:129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},        // pstart 7
		{in: "UPID:pve1:0003A1B2:00129F3C4A:66B1E7F0:qmstart:100:root@pam:", err: true},     // pstart 10
		{in: "UPID:pve1:0003A1B2:0129F3C4:066B1E7F0:qmstart:100:root@pam:", err: true},      // starttime 9
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7FG:qmstart:100:root@pam:", err: true},       // not hex
		{in: "UPID:-pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},      // node
		{in: "UPID:pve1-:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},      // node
		{in: "UPID:pve_1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},      // node
		{in: "UPID::0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:", err: true},           // node empty
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0::100:root@pam:", err: true},              // type empty
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100::", err: true},               // user empty
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qm start:100:root@pam:", err: true},      // space
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:1/0:root@pam:", err: true},       // slash
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:x:", err: true},     // extra field
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root\x00@pam:", err: true},   // NUL
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root\u00a0@pam:", err: true}, // NBSP
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root\xff@pam:", err: true},   // bad UTF-8
		{in: "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root\v@pam:", err: true},     // VT (Perl \s)
	}
	for _, tt := range tests {
		got, err := ParseUPID(tt.in)
		if tt.err {
			if err == nil {
				t.Errorf("ParseUPID(%q) = %+v, want error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseUPID(%q): %v", tt.in, err)
			continue
		}
		if !got.Equal(tt.want) {
			t.Errorf("ParseUPID(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want the original %q", got.String(), tt.in)
		}
		if c := FormatUPID(got); !strings.EqualFold(c, tt.in) {
			t.Errorf("FormatUPID = %q, want (up to hex case) %q", c, tt.in)
		}
	}
}

func TestUPIDStringCanonical(t *testing.T) {
	t.Parallel()
	u, err := ParseUPID("UPID:pve1:0003a1b2:0129f3c4:66b1e7f0:qmstart:100:root@pam:")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := FormatUPID(u), "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:"; got != want {
		t.Errorf("FormatUPID = %q, want %q", got, want)
	}
	// A changed field makes String fall back to the canonical form.
	u.ID = "101"
	if got, want := u.String(), "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:101:root@pam:"; got != want {
		t.Errorf("String after change = %q, want %q", got, want)
	}
	built := UPID{Node: "pve2", PID: 1, PStart: 2, StartTime: time.Unix(3, 0), Type: "qmstop", ID: "100", User: "a@pve!b"}
	if got, want := built.String(), "UPID:pve2:00000001:00000002:00000003:qmstop:100:a@pve!b:"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestUPIDJSON(t *testing.T) {
	t.Parallel()
	in := "UPID:pve1:0003a1b2:0129F3C4:66B1E7F0:qmstart:100:root@pam:"
	var v struct{ U UPID }
	if err := json.Unmarshal([]byte(`{"U":"`+in+`"}`), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"U":"`+in+`"}` {
		t.Errorf("round trip = %s", b)
	}
	if err := json.Unmarshal([]byte(`{"U":"UPID:x"}`), &v); err == nil {
		t.Error("bad UPID accepted")
	}
}

// upidRE is PVE's decoder regex (pve-common PVE/UPID.pm), with Go's \s
// widened to Perl's (\v too) and no trailing-newline allowance.
var upidRE = regexp.MustCompile(`^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s\v/]+):([^:\s\v/]*):([^:\s\v/]+):$`)

func FuzzParseUPID(f *testing.F) {
	for _, s := range []string{
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:",
		"UPID:pve1:0003A1B2:1129F3C4A:66B1E7F0:qmigrate:100:vmgate@pve!gw:",
		"UPID:n:00000000:00000000:00000000:srvreload::root@pam:",
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qm%2fstart:..:a@b:",
		"UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:root@pam:\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUPID(s)
		if err != nil {
			return
		}
		// Anything we accept, PVE accepts.
		if !upidRE.MatchString(s) {
			t.Fatalf("accepted %q that PVE's regex rejects", s)
		}
		if u.String() != s {
			t.Fatalf("String() = %q, want %q", u.String(), s)
		}
		// The canonical form parses to the same task.
		c, err := ParseUPID(FormatUPID(u))
		if err != nil || !c.Equal(u) {
			t.Fatalf("canonical %q of %q: %v", FormatUPID(u), s, err)
		}
		// And it can always be asked about safely.
		if ValidNode(u.Node) {
			p, err := taskPath(u, "status")
			if err != nil {
				t.Fatalf("taskPath(%q): %v", s, err)
			}
			if err := checkEscapedPath(p.escaped); err != nil {
				t.Fatalf("taskPath(%q) = %q: %v", s, p.escaped, err)
			}
		}
	})
}

// FuzzUPIDText: the byte-by-byte reading of ASCII fields says what the rune by
// rune one does, for any text.
func FuzzUPIDText(f *testing.F) {
	for _, s := range []string{"qmstart", "root@pam!gw", "a b", "a\tb", "a\x7fb", "a:b", "a/b", "ü", "a\u00a0b", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := upidText(s), upidTextUnicode(s); got != want {
			t.Fatalf("upidText(%q) = %v, the rune-by-rune rule says %v", s, got, want)
		}
	})
}
