package pve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
)

func versionHandler(w http.ResponseWriter, r *http.Request) {
	writeData(w, map[string]any{"version": "9.1.4", "release": "9.1", "repoid": "5a1b2c3d"})
}

func TestPinnedFingerprint(t *testing.T) {
	t.Parallel()
	srv := newFakePVE(t, versionHandler)

	t.Run("right pin", func(t *testing.T) {
		c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
		v, err := c.Version(context.Background())
		if err != nil || v.Version != "9.1.4" {
			t.Fatalf("Version = %+v, %v", v, err)
		}
	})
	t.Run("lower-case pin", func(t *testing.T) {
		c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL, Fingerprint: strings.ToLower(srv.fp)}}})
		if _, err := c.Version(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := c.Endpoints()[0].Fingerprint; got != srv.fp {
			t.Errorf("Endpoints() fingerprint = %q, want %q", got, srv.fp)
		}
	})
	t.Run("wrong pin", func(t *testing.T) {
		before := srv.total()
		wrong := Fingerprint([]byte("another certificate"))
		// InsecureSkipVerify does not weaken a pin.
		c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL, Fingerprint: wrong}}, InsecureSkipVerify: true})
		_, err := c.Version(context.Background())
		var te *TLSError
		if !errors.As(err, &te) {
			t.Fatalf("err = %v, want a *TLSError", err)
		}
		if te.Expected != wrong || te.Presented != srv.fp || te.Endpoint != srv.URL {
			t.Errorf("TLSError = %+v, want expected %s presented %s", te, wrong, srv.fp)
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable too", err)
		}
		if !strings.Contains(err.Error(), srv.fp) || !strings.Contains(err.Error(), wrong) {
			t.Errorf("message %q does not name both fingerprints", err)
		}
		if got := srv.total() - before; got != 0 {
			t.Errorf("the refused endpoint received %d requests", got)
		}
		if s := c.Stats(); s.TLSFailures == 0 || s.NewConns != 0 {
			t.Errorf("stats = %+v", s)
		}
	})
	t.Run("VersionAt", func(t *testing.T) {
		c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL, Fingerprint: Fingerprint([]byte("x"))}}})
		var te *TLSError
		if _, err := c.VersionAt(context.Background(), srv.URL+"/"); !errors.As(err, &te) {
			t.Fatalf("VersionAt err = %v, want *TLSError", err)
		}
		if _, err := c.VersionAt(context.Background(), "https://10.9.9.9:8006"); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("VersionAt of a foreign endpoint: %v", err)
		}
	})
}

func TestWrongPinFailsOverToVerifiedEndpoint(t *testing.T) {
	t.Parallel()
	liar := newFakePVE(t, versionHandler)
	good := newFakePVE(t, versionHandler)
	c := newTestClient(t, Config{Endpoints: []Endpoint{
		{URL: liar.URL, Fingerprint: good.fp}, // pinned to a certificate liar does not have
		good.endpoint(),
	}})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	if liar.total() != 0 {
		t.Errorf("the endpoint with the wrong certificate got %d requests", liar.total())
	}
	if s := c.Stats(); s.TLSFailures != 1 || s.Failovers != 1 {
		t.Errorf("stats = %+v, want one TLS failure and one failover", s)
	}
}

func TestCABundle(t *testing.T) {
	t.Parallel()
	ca := testCert(t, nil, true)
	leaf := testCert(t, &ca, false)
	srv := newFakePVEWithCert(t, leaf, versionHandler)
	otherCA := testCert(t, nil, true)

	c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL}}, CACertPEM: certPEM(ca)})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("with the right CA: %v", err)
	}

	for name, cfg := range map[string]Config{
		"other CA":     {Endpoints: []Endpoint{{URL: srv.URL}}, CACertPEM: certPEM(otherCA)},
		"system roots": {Endpoints: []Endpoint{{URL: srv.URL}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := newTestClient(t, cfg)
			_, err := c.Version(context.Background())
			var te *TLSError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want *TLSError", err)
			}
			if te.Presented != Fingerprint(leaf.Certificate[0]) || te.Expected != "" || te.Err == nil {
				t.Errorf("TLSError = %+v", te)
			}
		})
	}

	t.Run("insecureSkipVerify", func(t *testing.T) {
		c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL}}, InsecureSkipVerify: true})
		if _, err := c.Version(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCAHostnameChecked(t *testing.T) {
	t.Parallel()
	ca := testCert(t, nil, true)
	leaf := testCertFor(t, &ca, false, []net.IP{net.IPv4(10, 1, 2, 3)}) // not 127.0.0.1
	srv := newFakePVEWithCert(t, leaf, versionHandler)
	c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: srv.URL}}, CACertPEM: certPEM(ca)})
	_, err := c.Version(context.Background())
	var te *TLSError
	if !errors.As(err, &te) || te.Err == nil || te.Presented != Fingerprint(leaf.Certificate[0]) {
		t.Fatalf("err = %v, want a *TLSError about the address", err)
	}
	if srv.total() != 0 {
		t.Errorf("the endpoint got %d requests", srv.total())
	}
}

func TestEnvironmentProxyIgnored(t *testing.T) {
	// Not parallel: it sets the environment.
	srv := newFakePVE(t, versionHandler)
	t.Setenv("HTTPS_PROXY", deadAddr(t))
	t.Setenv("HTTP_PROXY", deadAddr(t))
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("the client used the environment's proxy: %v", err)
	}
}
