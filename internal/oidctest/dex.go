// Package oidctest runs a real OpenID Provider for the tests of single sign-on:
// Dex (github.com/dexidp/dex), built from its Go module at the version pinned in
// tools/dex/go.mod, with its static-password connector and a static client, as a
// process on loopback (docs/decisions/0111). It is no fake: discovery, the keys,
// the login form, the code exchange with PKCE and the ID tokens are Dex's.
//
// The binary is $VMGATE_TEST_DEX when set (.ci/run builds it once), or built
// here into the user's cache directory. Without Go or when the build fails the
// test is skipped with a message, and fails under CI=true.
package oidctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/vmgate/vmgate/internal/testkit"
)

// User is a user of Dex's password database.
type User struct {
	Email, Password, Name string
	ID                    string // Dex's userID: the subject follows from it
	Groups                []string
}

// Client is a static client of Dex.
type Client struct {
	ID, Secret   string
	RedirectURIs []string
}

// Dex is one Dex on a loopback port, started and restarted by the test.
type Dex struct {
	// Issuer is Dex's issuer URL, known before Dex starts (so that vmgate can be
	// started with it first and Dex given vmgate's callback).
	Issuer string
	addr   string
	bin    string
	dir    string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has ended
	out    *syncWriter
}

// New picks a free loopback port for a Dex and finds (or builds) its binary; Start
// starts it. The port is free when picked; Dex binds it when it starts.
func New(t testing.TB) *Dex {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return NewOn(t, addr)
}

// NewOn is New on a loopback address the caller picked (host:port).
func NewOn(t testing.TB, addr string) *Dex {
	t.Helper()
	bin := Binary(t)
	d := &Dex{Issuer: "http://" + addr + "/dex", addr: addr, bin: bin, dir: t.TempDir()}
	t.Cleanup(d.Stop)
	return d
}

// Start starts Dex with clients and users (stopping one that runs), and returns
// once its discovery document answers. Each start is a new Dex: its signing keys
// are new (memory storage), which is a rotation of the keys for its clients.
func (d *Dex) Start(t testing.TB, clients []Client, users []User) {
	t.Helper()
	d.Stop()
	type staticPassword struct {
		Email    string   `json:"email"`
		Hash     string   `json:"hash"`
		Username string   `json:"username"`
		Name     string   `json:"name,omitempty"`
		UserID   string   `json:"userID"`
		Groups   []string `json:"groups,omitempty"`
	}
	type staticClient struct {
		ID           string   `json:"id"`
		Secret       string   `json:"secret"`
		Name         string   `json:"name"`
		RedirectURIs []string `json:"redirectURIs"`
	}
	cfg := map[string]any{
		"issuer":           d.Issuer,
		"storage":          map[string]any{"type": "memory"},
		"web":              map[string]any{"http": d.addr},
		"oauth2":           map[string]any{"skipApprovalScreen": true, "responseTypes": []string{"code"}},
		"logger":           map[string]any{"level": "info"},
		"enablePasswordDB": true,
	}
	var scs []staticClient
	for _, c := range clients {
		scs = append(scs, staticClient{ID: c.ID, Secret: c.Secret, Name: c.ID, RedirectURIs: c.RedirectURIs})
	}
	cfg["staticClients"] = scs
	var sps []staticPassword
	for _, u := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(u.Password), bcrypt.DefaultCost) // Dex refuses a cheaper hash
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(u.Email, "@")
		sps = append(sps, staticPassword{Email: u.Email, Hash: string(h), Username: name, Name: u.Name, UserID: u.ID,
			Groups: u.Groups})
	}
	cfg["staticPasswords"] = sps
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.dir, "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(d.bin, "serve", path)
	out := &syncWriter{b: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = out, out // one writer: exec copies both streams through one pipe
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dex: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.out, d.exited = cmd, out, exited
	d.mu.Unlock()
	testkit.Eventually(t, "dex answers its discovery document", func() error {
		select {
		case <-exited:
			t.Fatalf("dex ended at start:\n%s", d.Log())
		default:
		}
		resp, err := http.Get(d.Issuer + "/.well-known/openid-configuration")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// Log is what Dex printed.
func (d *Dex) Log() string {
	d.mu.Lock()
	out := d.out
	d.mu.Unlock()
	if out == nil {
		return ""
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.b.String()
}

// Stop ends Dex if it runs, and waits until its port is free again.
func (d *Dex) Stop() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 1<<20 {
		return len(p), nil
	}
	return w.b.Write(p)
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// Binary is Dex's binary: $VMGATE_TEST_DEX, or built from tools/dex into the
// user's cache directory (once per test binary; Go's build cache makes a second
// build quick).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("VMGATE_TEST_DEX"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("VMGATE_TEST_DEX=%s: %v", p, err)
		}
		return p
	}
	buildOnce.Do(func() { built, buildErr = build() })
	if buildErr != nil {
		msg := "no Dex for the single sign-on tests (set VMGATE_TEST_DEX or let the test build tools/dex): " + buildErr.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return built
}

func build() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("no source path")
	}
	mod := filepath.Join(filepath.Dir(file), "..", "..", "tools", "dex")
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "vmgate-test", "dex")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/dexidp/dex/cmd/dex")
	cmd.Dir = mod
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %v\n%s", mod, err, b)
	}
	return out, nil
}

var formAction = regexp.MustCompile(`(?is)<form[^>]*\baction="([^"]*)"`)

// LogIn plays the browser at Dex: from the answer to a request that led to Dex's
// login form (c followed the redirects there), it posts the user's e-mail and
// password to the form and follows Dex's redirects back to the client, which c
// follows as far as it goes. It returns the last answer, read whole.
func LogIn(t testing.TB, c *http.Client, page *http.Response, email, password string) (*http.Response, string) {
	t.Helper()
	body, _ := io.ReadAll(io.LimitReader(page.Body, 1<<20))
	page.Body.Close()
	m := formAction.FindSubmatch(body)
	if m == nil {
		t.Fatalf("no form on Dex's page %s (%d):\n%s", page.Request.URL, page.StatusCode, body)
	}
	action, err := page.Request.URL.Parse(html.UnescapeString(string(m[1])))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.PostForm(action.String(), url.Values{"login": {email}, "password": {password}})
	if err != nil {
		t.Fatalf("post Dex's login form: %v", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, string(b)
}
