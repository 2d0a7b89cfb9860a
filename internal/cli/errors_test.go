package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/client"
)

// TestExitCodes: every kind of outcome has its exit code (one case per code), and
// a connection failure is said in words, never as Go's "dial tcp".
func TestExitCodes(t *testing.T) {
	api := func(status int, reason string) error {
		return &client.APIError{Status: status, Reason: reason, Message: "m", Header: http.Header{}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + addr + "/")
	if refused == nil {
		t.Fatal("a closed port answered")
	}
	cases := []struct {
		err  error
		code int
	}{
		{errors.New("task failed"), ExitFailed},
		{api(http.StatusForbidden, "forbidden"), ExitFailed},
		{api(http.StatusBadGateway, "upstream_error"), ExitFailed},
		{api(http.StatusBadRequest, "invalid_request"), ExitUsage},
		{UsageErrorf("bad"), ExitUsage},
		{api(http.StatusUnauthorized, "unauthenticated"), ExitAuth},
		{api(http.StatusNotFound, "not_found"), ExitNotFound},
		{api(http.StatusConflict, "vm_running"), ExitNotFound},
		{api(http.StatusServiceUnavailable, "cluster_unavailable"), ExitUnavailable},
		{api(http.StatusGatewayTimeout, "upstream_timeout"), ExitUnavailable},
		{api(http.StatusTooManyRequests, "rate_limited"), ExitUnavailable},
		{refused, ExitUnavailable},
		{fmt.Errorf("wrapped: %w", context.Canceled), ExitInterrupted},
	}
	for _, c := range cases {
		e := Explain(c.err, "http://"+addr)
		if e.Code != c.code {
			t.Errorf("%v: exit %d, want %d", c.err, e.Code, c.code)
		}
		if strings.Contains(e.Error(), "dial tcp") || strings.Contains(e.Error(), "connect: connection refused") {
			t.Errorf("%v: said as %q", c.err, e.Error())
		}
	}
	if e := Explain(refused, "http://"+addr); !strings.Contains(e.Msg, "nothing answers") {
		t.Errorf("connection refused: %q", e.Msg)
	}
}

// TestHintsInCLIWords: the API's parameter names in messages become the CLI's flags.
func TestHintsInCLIWords(t *testing.T) {
	for in, want := range map[string]string{
		"VM 104 did not shut down in time (the guest ignored the request); use force=true to power it off": "VM 104 did not shut down in time (the guest ignored the request); power it off with --force",
		"VM 102 cannot migrate to pve1: local disks need withLocalDisks=true: local-lvm:vm-102-disk-0":     "VM 102 cannot migrate to pve1: local disks need --with-local-disks: local-lvm:vm-102-disk-0",
		"VM 100 is running; migrate it online (online=true) or stop it first":                              "VM 100 is running; migrate it without --offline or stop it first",
		"task X not found; for a task vmgate did not start, give its cluster (?clusterId=)":                "task X not found; for a task vmgate did not start, give its cluster (--cluster)",
	} {
		if got := CLIWords(in); got != want {
			t.Errorf("%q\n got %q\nwant %q", in, got, want)
		}
		e := Explain(&client.APIError{Status: 409, Reason: "x", Message: in, Header: http.Header{}}, "")
		if strings.Contains(e.Msg, "=true") {
			t.Errorf("API words left: %q", e.Msg)
		}
	}
}

// TestOutcomeUnknownHint: an answer naming the request's task row in
// X-Operation-Id (outcome unknown, or the first attempt still running) says how
// to follow that task: the task commands take its reference where they take a
// UPID.
func TestOutcomeUnknownHint(t *testing.T) {
	e := Explain(&client.APIError{Status: http.StatusGatewayTimeout, Reason: "outcome_unknown", Message: "follow it as task 42",
		Header: http.Header{}, TaskRef: 42}, "")
	if e.Code != ExitUnavailable || e.Hint != "follow it with: vmgate task watch 42" {
		t.Errorf("exit %d, hint %q", e.Code, e.Hint)
	}
	if e := Explain(&client.APIError{Status: http.StatusConflict, Reason: "vm_running", Message: "m", Header: http.Header{}}, ""); e.Hint != "" {
		t.Errorf("a conflict without a task row hints %q", e.Hint)
	}
}
