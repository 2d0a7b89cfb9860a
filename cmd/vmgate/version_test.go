package main

import "testing"

// TestVersionString: the one-line version names the commit (shortened), keeps the
// release script's "+modified" mark, and says why a commit is unknown.
func TestVersionString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b    buildInfo
		want string
	}{
		{buildInfo{Version: "v1.0.0", Commit: "0123456789abcdef0123", BuildDate: "2026-11-24T00:00:00Z", GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"vmgate v1.0.0 (commit 0123456789ab, built 2026-11-24T00:00:00Z, go1.26.8 linux/amd64)"},
		{buildInfo{Version: "v1.0.0", Commit: "0123456789abcdef0123+modified", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"vmgate v1.0.0 (commit 0123456789ab+modified, go1.26.8 linux/arm64)"},
		{buildInfo{Version: "dev", Commit: "abc", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"vmgate dev (commit abc+modified, go1.26.8 linux/amd64)"},
		{buildInfo{Version: "dev", GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"vmgate dev (commit unknown (built without VCS information, e.g. go run), go1.26.8 linux/amd64)"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
