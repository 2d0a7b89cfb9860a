package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestConfigKeepsALoginPerServer(t *testing.T) {
	p := useConfig(t)
	if err := SaveLogin("https://a.example:8443", Login{Token: "ta", Email: "a@x"}); err != nil {
		t.Fatal(err)
	}
	if err := SaveLogin("http://127.0.0.1:8080", Login{Token: "tb"}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode: %v %v", st, err)
	}
	cfg, err := LoadConfig()
	if err != nil || cfg.Current != "http://127.0.0.1:8080" || cfg.Servers["https://a.example:8443"].Token != "ta" {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	for in, want := range map[string]string{"HTTPS://A.example:8443/": "https://a.example:8443", "http://h": "http://h"} {
		if got, err := NormalizeServer(in); err != nil || got != want {
			t.Errorf("NormalizeServer(%q) = %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"a.example:8443", "ftp://x", "https://u:p@x", "https://x/api/v1"} {
		if _, err := NormalizeServer(bad); Explain(err, "").Code != ExitUsage {
			t.Errorf("NormalizeServer(%q): %v", bad, err)
		}
	}
	// --server picks its own login; no --server the last one's.
	s, err := Open(Options{Server: "https://a.example:8443/"})
	if err != nil || s.Token() != "ta" || s.Server != "https://a.example:8443" {
		t.Fatalf("--server a: %+v %v", s, err)
	}
	s, err = Open(Options{})
	if err != nil || s.Token() != "tb" {
		t.Fatalf("the last login: %+v %v", s, err)
	}
	s, err = Open(Options{Server: "https://a.example:8443", Token: "vmg_flag"})
	if err != nil || s.Token() != "vmg_flag" || !s.FromFlag {
		t.Fatalf("--token: %+v %v", s, err)
	}
	if _, err := Connect(context.Background(), Options{Server: "https://c.example"}); Explain(err, "").Code != ExitAuth {
		t.Fatalf("no login for c: %v", err)
	}
	if err := ForgetLogin("http://127.0.0.1:8080"); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := LoadConfig(); cfg.Current != "http://127.0.0.1:8080" || len(cfg.Servers) != 1 {
		t.Fatalf("after forgetting: %+v", cfg)
	}
	// The next command names the server the user logged out of, and where they
	// are still logged in (issue 19 item 7).
	_, err = Connect(context.Background(), Options{})
	if e := Explain(err, ""); e.Code != ExitAuth || e.Msg != "not logged in to http://127.0.0.1:8080" ||
		!strings.Contains(e.Hint, "--server https://a.example:8443") {
		t.Fatalf("after logout: %+v", e)
	}
}

// TestNotLoggedInAnywhere: without any login nor --server, the CLI says so
// instead of naming a default server the user never chose.
func TestNotLoggedInAnywhere(t *testing.T) {
	useConfig(t)
	_, err := Connect(context.Background(), Options{})
	if e := Explain(err, ""); e.Code != ExitAuth || e.Msg != "not logged in to any vmgate server" || strings.Contains(e.Error(), DefaultServer) {
		t.Fatalf("no login at all: %+v", e)
	}
}

func TestConfigReadsTheOlderSessionFile(t *testing.T) {
	p := useConfig(t)
	os.MkdirAll(strings.TrimSuffix(p, "/config.json"), 0o700)
	os.WriteFile(p, []byte(`{"server":"http://127.0.0.1:9999","token":"old"}`), 0o600)
	s, err := Open(Options{})
	if err != nil || s.Server != "http://127.0.0.1:9999" || s.Token() != "old" {
		t.Fatalf("older file: %+v %v", s, err)
	}
}

// tokenServer answers /user/me for token "new" only and /user/refresh from "old"
// to "new", counting refreshes.
func tokenServer(t *testing.T, refreshes *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case r.URL.Path == "/api/v1/user/refresh" && tok == "old":
			refreshes.Add(1)
			json.NewEncoder(w).Encode(map[string]any{"code": 200, "message": "success",
				"data": map[string]any{"token": "new", "expiresAt": time.Now().Add(time.Hour)}})
		case r.URL.Path == "/api/v1/user/me" && tok == "new":
			json.NewEncoder(w).Encode(map[string]any{"code": 200, "message": "success", "data": map[string]any{"id": 1}})
		default:
			w.WriteHeader(401)
			json.NewEncoder(w).Encode(map[string]any{"code": 401, "message": "invalid or expired token", "reason": "unauthenticated"})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRefreshWhileTheSessionLives: a saved token refused 401 is refreshed once
// and the request retried, the new token saved; one that ran out says log in.
func TestRefreshWhileTheSessionLives(t *testing.T) {
	useConfig(t)
	var refreshes atomic.Int32
	srv := tokenServer(t, &refreshes)
	server, _ := NormalizeServer(srv.URL)
	SaveLogin(server, Login{Token: "old", ExpiresAt: time.Now().Add(30 * time.Minute)})
	s, err := Connect(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(context.Background(), "GET", "/api/v1/user/me", nil, nil, nil); err != nil {
		t.Fatalf("after a refresh: %v", err)
	}
	if cfg, _ := LoadConfig(); cfg.Servers[server].Token != "new" || refreshes.Load() != 1 {
		t.Fatalf("saved %+v after %d refreshes", cfg.Servers[server], refreshes.Load())
	}

	// Ends within refreshBefore: refreshed before the first request.
	SaveLogin(server, Login{Token: "old", ExpiresAt: time.Now().Add(time.Minute)})
	if _, err := Connect(context.Background(), Options{}); err != nil || refreshes.Load() != 2 {
		t.Fatalf("a token about to end: %v, %d refreshes", err, refreshes.Load())
	}

	// Over: no refresh, exit 3 saying to log in.
	SaveLogin(server, Login{Token: "old", ExpiresAt: time.Now().Add(-time.Minute)})
	s, _ = Connect(context.Background(), Options{})
	_, err = s.Do(context.Background(), "GET", "/api/v1/user/me", nil, nil, nil)
	e := s.Explain(err)
	if e.Code != ExitAuth || !strings.Contains(e.Msg, "expired") || !strings.Contains(e.Hint, "vmgate login --server "+server) ||
		refreshes.Load() != 2 {
		t.Fatalf("an expired login: %+v, %d refreshes", e, refreshes.Load())
	}

	// An API token is never refreshed.
	s, _ = Connect(context.Background(), Options{Token: "vmg_x"})
	_, err = s.Do(context.Background(), "GET", "/api/v1/user/me", nil, nil, nil)
	if e := s.Explain(err); e.Code != ExitAuth || !strings.Contains(e.Msg, "API token") || refreshes.Load() != 2 {
		t.Fatalf("a refused API token: %+v", e)
	}
}
