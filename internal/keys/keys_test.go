package keys

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// install is a vmgate installation on disk: a SQLite database and a key file,
// with signing keys (through auth), two clusters' sealed token secrets and the
// audit chain's key.
type install struct {
	t       *testing.T
	dir     string
	st      store.Store
	keyFile string
	trail   *audit.Trail
	secrets map[int64]string // cluster id → token secret
	token   string           // a token issued before any rotation
}

var cheap = auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}

func newInstall(t *testing.T) *install {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	in := &install{t: t, dir: dir, keyFile: filepath.Join(dir, "vmgate.key"), secrets: map[int64]string{}}
	sl := in.sealer(in.keyFile)
	// Opened with the key file, as the server opens it: the audit chain is keyed,
	// and its key is one of the sealed values a rotation moves.
	st, err := store.OpenWith(ctx, "sqlite://"+filepath.Join(dir, "vmgate.db"), store.Options{Sealer: sl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	in.st, in.trail = st, audit.New(st, audit.Options{})
	a := in.auth(sl)
	hash, err := auth.HashPassword("correct horse battery", cheap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateUser(ctx, store.User{Email: "alice@example.com", PasswordHash: hash, Role: store.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Login(ctx, "alice@example.com", "correct horse battery", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	in.token = tok.Raw
	for _, name := range []string{"one", "two"} {
		tokenID, secret := "vmgate@pve!"+name, "secret-of-"+name
		sealed, err := sl.Seal([]byte(secret), seal.TokenSecretAAD(tokenID))
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.CreateCluster(ctx, store.Cluster{Name: name, TokenID: tokenID, TokenSecretSealed: sealed})
		if err != nil {
			t.Fatal(err)
		}
		in.secrets[c.ID] = secret
	}
	return in
}

// sealer reads (creating it if need be) a key file.
func (in *install) sealer(files ...string) *seal.Sealer {
	in.t.Helper()
	var keys [][]byte
	for _, f := range files {
		k, err := seal.LoadOrCreateKey(f)
		if err != nil {
			in.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	sl, err := seal.New(keys[0], keys[1:]...)
	if err != nil {
		in.t.Fatal(err)
	}
	return sl
}

// auth starts auth as vmgate does, with sl.
func (in *install) auth(sl *seal.Sealer) *auth.Service {
	in.t.Helper()
	a, err := in.startAuth(sl)
	if err != nil {
		in.t.Fatal(err)
	}
	return a
}

func (in *install) startAuth(sl *seal.Sealer) (*auth.Service, error) {
	return auth.New(context.Background(), in.st, auth.Config{Sealer: sl, Argon2: cheap, PerAddressRate: 1e9, PerAddressBurst: 1e9,
		Audit: in.trail.Append})
}

// sealedWith checks that every sealed value of the store is sealed with sl's
// current key and opens to what it was.
func (in *install) sealedWith(sl *seal.Sealer) {
	in.t.Helper()
	ctx := context.Background()
	keys, err := in.st.SigningKeys(ctx)
	if err != nil {
		in.t.Fatal(err)
	}
	for _, k := range keys {
		if !sl.SealedWithCurrent(k.Secret) {
			in.t.Fatalf("signing key %s sealed with %s, want %s", k.ID, seal.KeyIDOf(k.Secret), sl.CurrentID())
		}
	}
	for id, secret := range in.secrets {
		c, err := in.st.ClusterByID(ctx, id)
		if err != nil {
			in.t.Fatal(err)
		}
		got, err := sl.Open(c.TokenSecretSealed, seal.TokenSecretAAD(c.TokenID))
		if err != nil || string(got) != secret || !sl.SealedWithCurrent(c.TokenSecretSealed) {
			in.t.Fatalf("cluster %d: %q %v (sealed with %s)", id, got, err, seal.KeyIDOf(c.TokenSecretSealed))
		}
	}
}

// works checks that a vmgate started with only the key file at path serves the
// token issued before the rotations.
func (in *install) works(path string) {
	in.t.Helper()
	sl := in.sealer(path)
	in.sealedWith(sl)
	if _, err := in.auth(sl).Authenticate(context.Background(), in.token); err != nil {
		in.t.Fatalf("the token from before the rotation: %v", err)
	}
	if v, err := audit.Verify(context.Background(), in.st, sl); err != nil || v.KeyedFrom == 0 {
		in.t.Fatalf("the audit chain with %s: %+v %v", path, v, err)
	}
}

func (in *install) audited(action string) []audit.Entry {
	in.t.Helper()
	es, err := in.trail.List(context.Background(), 100, 0)
	if err != nil {
		in.t.Fatal(err)
	}
	var out []audit.Entry
	for _, e := range es {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func (in *install) rotation(newFile string) SealRotation {
	return SealRotation{Store: in.st, KeyFile: in.keyFile, NewKeyFile: newFile, Install: true, Audit: in.trail}
}

// docs/security.md item 26: a new signing key signs at once on a vmgate that reads the feed,
// tokens of the old key stay valid, and the rotation is audited. A key file that
// does not open the stored keys adds nothing.
func TestRotateSigning(t *testing.T) {
	t.Parallel()
	in := newInstall(t)
	ctx := context.Background()
	sl := in.sealer(in.keyFile)
	a := in.auth(sl)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go a.Run(runCtx)

	wrong := in.sealer(filepath.Join(in.dir, "other.key"))
	if _, err := RotateSigning(ctx, in.st, wrong, in.trail, time.Now()); err == nil {
		t.Fatal("a rotation with another key file succeeded")
	}
	r, err := RotateSigning(ctx, in.st, sl, in.trail, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := in.st.SigningKeys(ctx)
	if len(keys) != 2 || keys[1].ID != r.KID || keys[0].ID != r.Previous || !sl.SealedWithCurrent(keys[1].Secret) {
		t.Fatalf("keys after the rotation: %+v, rotation %+v", keys, r)
	}
	testkit.Until(t, "the running service signing with the new key", func() bool {
		tok, _, err := a.Login(ctx, "alice@example.com", "correct horse battery", "192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(header(t, tok.Raw), `"kid":"`+r.KID+`"`)
	})
	if _, err := a.Authenticate(ctx, in.token); err != nil {
		t.Fatalf("a token of the old key: %v", err)
	}
	recs := in.audited("keys.rotate_signing")
	if len(recs) != 2 || recs[0].Result != "ok" || recs[0].Target != "signing_key:"+r.KID || recs[1].Result == "ok" {
		t.Fatalf("audit: %+v", recs)
	}
}

// docs/security.md item 26: every sealed value moves to the new key in one transaction, the
// new key file takes the old one's place, the old key is kept beside it, and
// everything sealed still opens — tokens signed before keep working.
func TestRotateSeal(t *testing.T) {
	t.Parallel()
	in := newInstall(t)
	oldKey, _ := os.ReadFile(in.keyFile)
	oldID := in.sealer(in.keyFile).CurrentID()
	newFile := filepath.Join(in.dir, "vmgate.key.new")
	res, err := RotateSeal(context.Background(), in.rotation(newFile))
	if err != nil {
		t.Fatal(err)
	}
	if res.From != oldID || res.To == oldID || res.Resealed != 4 || !res.Installed {
		t.Fatalf("result %+v", res)
	}
	if _, err := os.Stat(newFile); !os.IsNotExist(err) {
		t.Fatalf("the new key file is still at its own name: %v", err)
	}
	if kept, err := os.ReadFile(res.OldKeyFile); err != nil || !bytes.Equal(kept, oldKey) {
		t.Fatalf("the old key is not kept at %s: %v", res.OldKeyFile, err)
	}
	if fi, err := os.Stat(in.keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the installed key file: %v %v", fi, err)
	}
	in.works(in.keyFile)
	if _, err := in.startAuth(in.sealer(res.OldKeyFile)); err == nil || !strings.Contains(err.Error(), res.To) {
		t.Fatalf("the old key file alone: %v, want a refusal naming key %s", err, res.To)
	}
	recs := in.audited("keys.rotate_seal")
	if len(recs) != 1 || recs[0].Result != "ok" || recs[0].Target != "seal_key:"+res.To {
		t.Fatalf("audit: %+v", recs)
	}

	// Once more, to another key: a second rotation is like the first.
	res2, err := RotateSeal(context.Background(), in.rotation(filepath.Join(in.dir, "third.key")))
	if err != nil || res2.From != res.To || res2.Resealed != 4 {
		t.Fatalf("second rotation: %+v %v", res2, err)
	}
	in.works(in.keyFile)
}

// docs/security.md item 26, a crash between steps: interrupted after each step, the
// installation is in a state vmgate either starts in or refuses with both key ids,
// and running the rotation again with the same arguments completes it.
func TestRotateSealRecoversFromEveryCrash(t *testing.T) {
	t.Parallel()
	for _, step := range []string{stepNewKey, stepResealing, stepCommitted, stepOldKept} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			in := newInstall(t)
			oldID := in.sealer(in.keyFile).CurrentID()
			newFile := filepath.Join(in.dir, "vmgate.key.new")
			r := in.rotation(newFile)
			crashed := errors.New("crash at " + step)
			calls := 0
			r.crash = func(s string) error {
				if s != step {
					return nil
				}
				if calls++; s == stepResealing && calls < 3 { // midway through the values
					return nil
				}
				return crashed
			}
			if _, err := RotateSeal(context.Background(), r); !errors.Is(err, crashed) {
				t.Fatalf("the rotation did not stop at %s: %v", step, err)
			}
			newID := in.sealer(newFile).CurrentID()

			switch step {
			case stepNewKey, stepResealing: // nothing committed: the old key file still serves
				in.works(in.keyFile)
			case stepCommitted, stepOldKept:
				// The database is under the new key, the key file still the old one:
				// vmgate refuses, naming both; with the new key as current and the
				// old one as previous it starts.
				_, err := in.startAuth(in.sealer(in.keyFile))
				if err == nil || !strings.Contains(err.Error(), newID) || !strings.Contains(err.Error(), oldID) {
					t.Fatalf("start with the old key file only: %v", err)
				}
				in.auth(in.sealer(newFile, in.keyFile))
			}

			res, err := RotateSeal(context.Background(), in.rotation(newFile))
			if err != nil {
				t.Fatalf("run again: %v", err)
			}
			if res.To != newID || !res.Installed {
				t.Fatalf("run again: %+v, want key %s installed", res, newID)
			}
			in.works(in.keyFile)
			if _, err := os.Stat(res.OldKeyFile); err != nil {
				t.Fatalf("the old key file: %v", err)
			}
			recs := in.audited("keys.rotate_seal")
			if len(recs) != 2 || recs[0].Result != "ok" || recs[1].Result == "ok" {
				t.Fatalf("audit of a failed and a finished rotation: %+v", recs)
			}
		})
	}
}

// A rotation that was not installed (--no-install) leaves the files alone; vmgate
// then runs with the new key file, and a value a replica still sealed with the
// old key meanwhile is moved by running the rotation again.
func TestRotateSealWithoutInstall(t *testing.T) {
	t.Parallel()
	in := newInstall(t)
	newFile := filepath.Join(in.dir, "next.key")
	r := in.rotation(newFile)
	r.Install = false
	res, err := RotateSeal(context.Background(), r)
	if err != nil || res.Installed || res.Resealed != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	in.works(newFile)
	// A replica still on the old key registers a cluster.
	old := in.sealer(in.keyFile)
	sealed, _ := old.Seal([]byte("late"), seal.TokenSecretAAD("late@pve!x"))
	c, err := in.st.CreateCluster(context.Background(), store.Cluster{Name: "late", TokenID: "late@pve!x", TokenSecretSealed: sealed})
	if err != nil {
		t.Fatal(err)
	}
	in.secrets[c.ID] = "late"
	res, err = RotateSeal(context.Background(), r)
	if err != nil || res.Resealed != 1 {
		t.Fatalf("run again: %+v %v", res, err)
	}
	in.works(newFile)
	if _, err := RotateSeal(context.Background(), SealRotation{Store: in.st, KeyFile: in.keyFile, NewKeyFile: in.keyFile}); err == nil {
		t.Fatal("the current key file as the new one was accepted")
	}
}

func header(t *testing.T, raw string) string {
	t.Helper()
	h, _, _ := strings.Cut(raw, ".")
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
