package oidctest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDexServesDiscovery: the pinned Dex starts on its port with the config this
// package writes, serves its discovery document with its issuer, and its log is
// captured; a second start (new keys) on the same port works too.
func TestDexServesDiscovery(t *testing.T) {
	t.Parallel()
	d := New(t)
	users := []User{{Email: "eve@example.com", Password: "eve's password", ID: "eve-1", Groups: []string{"g"}}}
	clients := []Client{{ID: "c", Secret: "s", RedirectURIs: []string{"http://127.0.0.1:1/cb"}}}
	for range 2 {
		d.Start(t, clients, users)
		resp, err := http.Get(d.Issuer + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Issuer string `json:"issuer"`
			JWKS   string `json:"jwks_uri"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || doc.Issuer != d.Issuer || !strings.HasPrefix(doc.JWKS, d.Issuer) {
			t.Fatalf("discovery: %+v %v", doc, err)
		}
		if !strings.Contains(d.Log(), "listening on") {
			t.Fatalf("Dex's log:\n%s", d.Log())
		}
	}
}
