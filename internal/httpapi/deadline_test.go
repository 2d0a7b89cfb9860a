package httpapi

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestHoldFor: event streams get no whole-request deadline; long-polls get their
// wait (a bad one counts as the longest) on top of the request timeout.
func TestHoldFor(t *testing.T) {
	const vm = "/api/v1/pve/vm/{clusterId}/{node}/{vmid}"
	for _, tc := range []struct {
		method, pattern, url string
		extra                time.Duration
		stream               bool
	}{
		{"GET", "/api/v1/pve/task/{taskId}/events", "/x", 0, true},
		{"GET", "/api/v1/pve/task/{taskId}", "/x", 0, false},
		{"GET", "/api/v1/pve/task/{taskId}", "/x?wait=30", 30 * time.Second, false},
		{"GET", "/api/v1/pve/task/{taskId}", "/x?wait=abc", 60 * time.Second, false},
		{"POST", vm + "/start", "/x", 60 * time.Second, false},
		{"POST", vm + "/stop", "/x?wait=0", 0, false},
		{"POST", vm + "/reboot", "/x?wait=300", 300 * time.Second, false},
		{"POST", vm + "/migrate", "/x?wait=300", 0, false},
		{"GET", "/api/v1/user/me", "/x", 0, false},
	} {
		extra, stream := holdFor(tc.method+" "+tc.pattern, httptest.NewRequest(tc.method, tc.url, nil))
		if extra != tc.extra || stream != tc.stream {
			t.Errorf("%s %s %s: %v %v, want %v %v", tc.method, tc.pattern, tc.url, extra, stream, tc.extra, tc.stream)
		}
	}
}
