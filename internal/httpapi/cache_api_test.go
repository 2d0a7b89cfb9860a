package httpapi

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// TestNextRequestSeesChanges: sessions, users, grants, cluster records and PVE
// clients are served from memory, and each change — through the API or straight
// in the store, as another component or replica would write it — is seen by the
// very next request, on SQLite and on PostgreSQL.
func TestNextRequestSeesChanges(t *testing.T) {
	t.Parallel()
	for _, engine := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "t.db") }},
		{"postgres", func(t *testing.T) string { return storetest.FreshSchema(t) }},
	} {
		t.Run(engine.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEnvOn(t, engine.dsn(t), auth.Config{
				Argon2:         auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
				PerAddressRate: rate.Inf, PerAddressBurst: 1,
			})
			sim := e.addSim("A")
			e.addUser("admin", accounts.RoleAdmin)
			e.addUser("vera", accounts.RoleUser)
			e.addUser("walt", accounts.RoleUser)
			e.grant("vera", "A", fleet.GrantViewer)
			e.grant("walt", "A", fleet.GrantViewer)
			ctx := context.Background()
			cid := strconv.FormatInt(sim.id, 10)
			vm := "/api/v1/pve/vm/" + cid + "/pve1/100"
			expect := func(user, method, path, body string, status int) {
				t.Helper()
				if w := e.do(user, method, path, body); w.Code != status {
					t.Fatalf("%s %s as %s: %d %s, want %d", method, path, user, w.Code, w.Body, status)
				}
			}
			expect("vera", "GET", vm, "", http.StatusOK)
			expect("walt", "GET", vm, "", http.StatusOK)

			// A grant removed through the API, and one straight in the store.
			expect("admin", "DELETE", "/api/v1/clusters/"+cid+"/grants/"+strconv.FormatInt(e.users["vera"].ID, 10), "", http.StatusOK)
			expect("vera", "GET", vm, "", http.StatusNotFound)
			if err := e.store.DeleteGrant(ctx, e.users["walt"].ID, sim.id); err != nil {
				t.Fatal(err)
			}
			expect("walt", "GET", vm, "", http.StatusNotFound)
			e.grant("vera", "A", fleet.GrantViewer)
			expect("vera", "GET", vm, "", http.StatusOK)

			// The token secret changes: PVE now accepts only the new one, and the
			// next read goes out with it (a stale client would get 502 token_rejected).
			const newSecret = "7d6c5b4a-3f2e-4d1c-8b0a-123456789abc"
			if err := sim.c.AddToken(sim.tokenID, newSecret, pvesim.TokenOptions{}); err != nil {
				t.Fatal(err)
			}
			expect("admin", "PATCH", "/api/v1/clusters/"+cid, `{"tokenSecret":"`+newSecret+`"}`, http.StatusOK)
			expect("vera", "GET", vm, "", http.StatusOK)

			// The endpoints change in the store (another replica's write): the next
			// read goes to the new ones.
			row, err := e.store.ClusterByID(ctx, sim.id)
			if err != nil {
				t.Fatal(err)
			}
			good := row.Endpoints
			row.Endpoints = []store.Endpoint{{URL: closedURL(t), Node: "pve1", Fingerprint: good[0].Fingerprint}}
			if _, err := e.store.UpdateCluster(ctx, row); err != nil {
				t.Fatal(err)
			}
			// The new endpoint does not answer: the VM's last known status, marked
			// stale (issue 10, docs/history.md), where a stale client would have answered fresh.
			if w := e.do("vera", "GET", vm, ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"stale":true`) {
				t.Fatalf("GET %s with the endpoints moved to a dead one: %d %s, want the last status marked stale", vm, w.Code, w.Body)
			}
			row.Endpoints = good
			if _, err := e.store.UpdateCluster(ctx, row); err != nil {
				t.Fatal(err)
			}
			expect("vera", "GET", vm, "", http.StatusOK)

			// A user disabled straight in the store, sessions untouched: the user's
			// change alone drops what was cached of them.
			u, err := e.store.UserByID(ctx, e.users["vera"].ID)
			if err != nil {
				t.Fatal(err)
			}
			u.Disabled = true
			if _, err := e.store.UpdateUser(ctx, u); err != nil {
				t.Fatal(err)
			}
			expect("vera", "GET", vm, "", http.StatusUnauthorized)

			// A user disabled through the API.
			e.grant("walt", "A", fleet.GrantViewer)
			expect("walt", "GET", vm, "", http.StatusOK)
			expect("admin", "PATCH", "/api/v1/users/"+strconv.FormatInt(e.users["walt"].ID, 10), `{"disabled":true}`, http.StatusOK)
			expect("walt", "GET", vm, "", http.StatusUnauthorized)

			// The cluster deleted: gone for its admin too.
			expect("admin", "GET", vm, "", http.StatusOK)
			expect("admin", "DELETE", "/api/v1/clusters/"+cid, "", http.StatusOK)
			expect("admin", "GET", vm, "", http.StatusNotFound)
		})
	}
}

// closedURL is an https URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "https://" + ln.Addr().String()
}
