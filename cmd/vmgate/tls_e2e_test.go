package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/servertls"
	"github.com/vmgate/vmgate/internal/servertls/servertlstest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestTLSOnRealBinary (docs/security.md item 27): vmgate serves HTTPS with a self-signed
// certificate made here — HTTP/2, HSTS on every answer, login, a VM operation,
// the CLI with --ca-file — and after the files are replaced and SIGHUP is sent, a
// new connection sees the new certificate while a connection opened before keeps
// working with the old one.
func TestTLSOnRealBinary(t *testing.T) {
	t.Parallel()
	const pw = "tls e2e staple horse"
	dir := t.TempDir()
	first := servertlstest.Write(t, dir, "vmgate", "first")
	second := servertlstest.Write(t, t.TempDir(), "next", "second")
	p := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--listen", "127.0.0.1:0",
		"--tls-cert", first.CertFile, "--tls-key", first.KeyFile)
	base := p.line(t, listening)[1]
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("listening on %s, want https://", base)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	roots := x509.NewCertPool()
	roots.AddCert(first.Leaf)
	roots.AddCert(second.Leaf)
	newTransport := func() *http.Transport {
		return &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}
	}
	c := checkedClientVia(t, base, "", newTransport())
	if _, err := c.Login(ctx, "admin@vmgate.local", pw); err != nil {
		t.Fatalf("login over HTTPS: %v\n%s", err, p.log())
	}
	if r, err := c.Start(ctx, client.VM(1, "pve1", 101), client.PowerOptions{}); err != nil || r.Running {
		t.Fatalf("start VM 101 over HTTPS: %+v, %v", r, err)
	}
	// The raw answer, for its headers.
	resp, err := c.Do(ctx, http.MethodGet, "/api/v1/pve/clusters/1/vms", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkHSTS(t, "GET /api/v1/pve/clusters/1/vms", resp.Header)
	if _, err := c.Do(ctx, http.MethodGet, "/api/v1/nothing-here", nil, nil, nil); err == nil {
		t.Fatal("an unknown path answered 2xx")
	} else if ae, ok := err.(*client.APIError); ok {
		checkHSTS(t, "an error answer", ae.Header)
	}

	// The web UI's answers (a page, a redirect, a 404) carry HSTS too.
	ui := &http.Client{Transport: newTransport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/login", "/no-such-page"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := ui.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		checkHSTS(t, "GET "+path+" ("+resp.Status+")", resp.Header)
	}

	// The CLI, trusting the self-signed certificate through --ca-file.
	session := filepath.Join(t.TempDir(), "session.json")
	env := append(os.Environ(), "VMGATE_SESSION_FILE="+session)
	login := exec.Command(binary, "login", "--server", base, "--ca-file", first.CertFile, "--email", "admin@vmgate.local", "--password-stdin")
	login.Env, login.Stdin = env, strings.NewReader(pw+"\n")
	if out, err := login.CombinedOutput(); err != nil {
		t.Fatalf("vmgate login --ca-file: %v\n%s", err, out)
	}
	me := exec.Command(binary, "me")
	me.Env = env
	if out, err := me.CombinedOutput(); err != nil || !strings.Contains(string(out), "admin@vmgate.local") {
		t.Fatalf("vmgate me after login --ca-file: %v\n%s", err, out)
	}
	// A login for that server keeps its --ca-file; a client without one (a config
	// of its own) trusts the system's roots only.
	noCA := exec.Command(binary, "login", "--server", base, "--email", "admin@vmgate.local", "--password-stdin")
	noCA.Env = append(os.Environ(), "VMGATE_SESSION_FILE="+filepath.Join(t.TempDir(), "other.json"))
	noCA.Stdin = strings.NewReader(pw + "\n")
	if out, err := noCA.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Fatalf("vmgate login without --ca-file trusted a self-signed certificate: %v\n%s", err, out)
	}

	// A connection opened before the reload, kept alive.
	old := &http.Client{Transport: newTransport()}
	if proto, leaf, _ := getTLS(t, ctx, old, base+"/healthz"); proto != 2 || !leaf.Equal(first.Leaf) {
		t.Fatalf("before the reload: HTTP/%d with %s", proto, leaf.Subject)
	}

	for _, f := range [][2]string{{second.CertFile, first.CertFile}, {second.KeyFile, first.KeyFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		servertlstest.WriteFile(t, f[1], b)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "new connections see the second certificate after SIGHUP", func() error {
		fresh := &http.Client{Transport: newTransport()}
		_, leaf, _ := getTLS(t, ctx, fresh, base+"/healthz")
		fresh.CloseIdleConnections()
		if servertls.Fingerprint(leaf) != servertls.Fingerprint(second.Leaf) {
			return fmt.Errorf("new connections still see %s\n%s", leaf.Subject, p.log())
		}
		return nil
	})
	if proto, leaf, reused := getTLS(t, ctx, old, base+"/healthz"); !reused || proto != 2 || !leaf.Equal(first.Leaf) {
		t.Fatalf("the connection opened before the reload: reused %v, HTTP/%d, %s", reused, proto, leaf.Subject)
	}
	// The process is the same one: the token from before still works.
	if _, err := c.Me(ctx); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	p.waitLog(t, "CN=second")
	p.waitLog(t, "(SIGHUP)") // the signal was handled, not merely the poll
}

// waitLog waits until the process's log holds s.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%q in the log", s), func() error {
		if log := p.log(); !strings.Contains(log, s) {
			return fmt.Errorf("the log so far:\n%s", log)
		}
		return nil
	})
}

// checkHSTS fails unless h carries Strict-Transport-Security for at least a year.
func checkHSTS(t *testing.T, what string, h http.Header) {
	t.Helper()
	v := h.Get("Strict-Transport-Security")
	age, ok := strings.CutPrefix(v, "max-age=")
	n, err := strconv.Atoi(strings.SplitN(age, ";", 2)[0])
	if !ok || err != nil || n < 365*24*3600 {
		t.Fatalf("%s: Strict-Transport-Security %q, want max-age of a year at least", what, v)
	}
}

// getTLS GETs url and returns the HTTP major version, the server's certificate and
// whether the connection was reused; the answer must be 200 with HSTS.
func getTLS(t *testing.T, ctx context.Context, c *http.Client, url string) (proto int, leaf *x509.Certificate, reused bool) {
	t.Helper()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	checkHSTS(t, "GET "+url, resp.Header)
	return resp.ProtoMajor, resp.TLS.PeerCertificates[0], reused
}

// TestPlainHTTPRefusedOnNetwork (docs/security.md item 27): outside dev mode, plain HTTP on
// an address that is not loopback refuses to start, before opening the database,
// with a message naming the flags; --plain-http lets it start with a warning.
func TestPlainHTTPRefusedOnNetwork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := exec.Command(binary, "server", "--listen", "0.0.0.0:0", "--data-dir", dir)
	out, err := refused.CombinedOutput()
	if err == nil || refused.ProcessState.ExitCode() == 0 {
		t.Fatalf("started on 0.0.0.0 without TLS:\n%s", out)
	}
	for _, flag := range []string{"--tls-cert", "--tls-key", "--plain-http"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("the refusal does not name %s:\n%s", flag, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "vmgate.db")); err == nil {
		t.Error("the refused start created the database")
	}

	p := start(t, nil, "server", "--listen", "0.0.0.0:0", "--data-dir", dir, "--plain-http")
	if base := p.line(t, listening)[1]; !strings.HasPrefix(base, "http://") {
		t.Fatalf("--plain-http listens on %s", base)
	}
	p.waitLog(t, "(--plain-http)")
	half := exec.Command(binary, "server", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--tls-cert", "x.pem")
	if out, err := half.CombinedOutput(); err == nil || !strings.Contains(string(out), "--tls-key") {
		t.Fatalf("--tls-cert alone: %v\n%s", err, out)
	}
}
