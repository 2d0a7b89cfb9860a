// Package keys administers vmgate's own keys for `vmgate admin keys`: a new JWT
// signing key (RotateSigning) and a new key file for everything sealed at rest
// (RotateSeal). Both work on the database directly, while vmgate runs or not, and
// both are audited (actions keys.rotate_signing and keys.rotate_seal, with the
// outcome). docs/security.md item 26; docs/deploy.md has the procedures and
// docs/decisions/0015-sealed-and-rotatable-keys.md the reasons.
//
// # Signing keys
//
// RotateSigning adds a key; the newest signs. Running vmgates learn of it from the
// change feed (within a second) or from the first token that names it, and the
// previous key verifies until the longest token lifetime and auth.KeyRetireGrace
// have passed; then vmgate refuses and deletes it (internal/auth).
//
// # The key file
//
// RotateSeal re-encrypts every sealed secret — the signing keys, the clusters'
// PVE token secrets and the audit chain's key — under a new key, in one transaction, and then puts the new
// key file in the old one's place, keeping the old key beside it (backups made
// before the rotation need it). Each step can be interrupted and the command run
// again with the same arguments:
//
//  1. the new key file is created unless it exists (0600, complete or absent);
//  2. one transaction opens every value with the old or the new key (a sealed
//     value names the key that sealed it) and seals with the new one what the new
//     one did not seal; a crash before the commit changes nothing, a run after it
//     finds nothing left to do;
//  3. the old key file is linked to KEYFILE.<old key id>.old;
//  4. the new key file is renamed over the old one (atomic).
//
// Between 2 and 4 the database is sealed with a key the configured key file does
// not hold: a vmgate started then refuses to start and names both key ids, and
// running RotateSeal again (or starting with --secret-key-file NEW
// --previous-secret-key-file OLD) resolves it. After 4, running it again with the
// same arguments is a second rotation, to yet another new key — harmless.
package keys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// Store is what the rotations need of the store; every store.Store is one.
type Store interface {
	SigningKeys(ctx context.Context) ([]store.SigningKey, error)
	AddSigningKey(ctx context.Context, k store.SigningKey) error
	ResealSecrets(ctx context.Context, fn func(store.SealedSecret) ([]byte, error)) (int, error)
}

// SigningRotation is what RotateSigning did.
type SigningRotation struct {
	KID      string // the new key's: it signs from now on
	Previous string // the key it supersedes, which verifies for a while yet
}

// RotateSigning adds a new signing key, sealed with sl, and audits it. It first
// checks that sl opens the keys already stored: a key sealed with another key
// file would stop every vmgate at its next start.
func RotateSigning(ctx context.Context, st Store, sl *seal.Sealer, trail *audit.Trail, now time.Time) (SigningRotation, error) {
	r, err := rotateSigning(ctx, st, sl, now)
	rec := store.AuditRecord{At: now, Action: "keys.rotate_signing", Result: audit.Result(err),
		Params: audit.Params(map[string]any{"via": "cli", "previous": r.Previous})}
	if err == nil {
		rec.Target = "signing_key:" + r.KID
	}
	trail.Append(ctx, rec)
	return r, err
}

func rotateSigning(ctx context.Context, st Store, sl *seal.Sealer, now time.Time) (SigningRotation, error) {
	keys, err := st.SigningKeys(ctx)
	if err != nil {
		return SigningRotation{}, err
	}
	var r SigningRotation
	for _, k := range keys {
		if !k.Sealed {
			return r, fmt.Errorf("signing key %s is not sealed yet: start vmgate once with this database and key file first", k.ID)
		}
		if _, err := sl.Open(k.Secret, seal.SigningKeyAAD(k.ID)); err != nil {
			return r, fmt.Errorf("signing key %s: %w", k.ID, err)
		}
		r.Previous = k.ID
	}
	k, err := auth.NewSigningKey(sl, now)
	if err != nil {
		return r, err
	}
	if err := st.AddSigningKey(ctx, k); err != nil {
		return r, fmt.Errorf("add the signing key: %w", err)
	}
	r.KID = k.ID
	return r, nil
}

// SealRotation says what RotateSeal rotates.
type SealRotation struct {
	Store Store
	// KeyFile is the key file vmgate runs with (--secret-key-file). It is read,
	// never created.
	KeyFile string
	// Previous are key files that may have sealed values too (a rotation that was
	// run with --no-install and not finished: --previous-secret-key-file).
	Previous []string
	// NewKeyFile gets the new key: created (0600) when it does not exist, used as
	// it is when it does (a run again after a crash).
	NewKeyFile string
	// Install puts the new key at KeyFile once the transaction committed, keeping
	// the old key as KeyFile.<old key id>.old. Without it the key files stay as
	// they are and vmgate must be started with --secret-key-file NewKeyFile.
	Install bool
	Audit   *audit.Trail
	Now     func() time.Time // default time.Now

	// crash, when set, runs after each step and ends the rotation there when it
	// returns an error (tests: an interruption at every step).
	crash func(step string) error
}

// The steps after which a rotation may be interrupted.
const (
	stepNewKey    = "new key file written"
	stepResealing = "resealing, not committed"
	stepCommitted = "committed"
	stepOldKept   = "old key kept"
)

// SealResult is what RotateSeal did.
type SealResult struct {
	From, To   string // key ids: the key file's before, the new one
	Resealed   int    // values sealed again (0 when a run before committed them)
	Installed  bool   // KeyFile holds the new key now
	OldKeyFile string // where the old key was kept, when installed
}

// RotateSeal re-seals every sealed secret under NewKeyFile's key, in one
// transaction, then installs it; see the package doc for the steps and how each
// interruption recovers. It is audited, success or failure.
func RotateSeal(ctx context.Context, r SealRotation) (SealResult, error) {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.crash == nil {
		r.crash = func(string) error { return nil }
	}
	res, err := rotateSeal(ctx, r)
	r.Audit.Append(ctx, store.AuditRecord{At: r.Now(), Action: "keys.rotate_seal", Target: "seal_key:" + res.To,
		Result: audit.Result(err), Params: audit.Params(map[string]any{"via": "cli", "from": res.From, "to": res.To,
			"resealed": res.Resealed, "installed": res.Installed})})
	return res, err
}

func rotateSeal(ctx context.Context, r SealRotation) (SealResult, error) {
	var res SealResult
	cur, err := seal.ReadKey(r.KeyFile)
	if err != nil {
		return res, fmt.Errorf("the current key file: %w", err)
	}
	res.From = seal.KeyID(cur)
	var previous [][]byte
	for _, p := range r.Previous {
		k, err := seal.ReadKey(p)
		if err != nil {
			return res, fmt.Errorf("a previous key file: %w", err)
		}
		if seal.KeyID(k) != res.From {
			previous = append(previous, k)
		}
	}
	if abs(r.NewKeyFile) == abs(r.KeyFile) {
		return res, errors.New("the new key file is the current one: name a new file")
	}
	next, err := seal.LoadOrCreateKey(r.NewKeyFile)
	if err != nil {
		return res, fmt.Errorf("the new key file: %w", err)
	}
	res.To = seal.KeyID(next)
	if res.To == res.From {
		return res, fmt.Errorf("%s holds the current key (%s): a rotation needs a new one", r.NewKeyFile, res.From)
	}
	sl, err := seal.New(next, append([][]byte{cur}, previous...)...)
	if err != nil {
		return res, err
	}
	if err := r.crash(stepNewKey); err != nil {
		return res, err
	}

	res.Resealed, err = r.Store.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		aad, err := additionalData(sec)
		if err != nil {
			return nil, err
		}
		plain := sec.Value
		if !sec.Clear {
			if sl.SealedWithCurrent(sec.Value) {
				return nil, nil // sealed by a run that committed before
			}
			if plain, err = sl.Open(sec.Value, aad); err != nil {
				return nil, err
			}
		}
		v, err := sl.Seal(plain, aad)
		if err == nil {
			err = r.crash(stepResealing)
		}
		return v, err
	})
	if err != nil {
		return res, err
	}
	if err := r.crash(stepCommitted); err != nil {
		return res, err
	}
	if !r.Install {
		return res, nil
	}
	res.OldKeyFile = fmt.Sprintf("%s.%s.old", r.KeyFile, res.From)
	if err := os.Link(r.KeyFile, res.OldKeyFile); err != nil && !errors.Is(err, fs.ErrExist) {
		return res, fmt.Errorf("keep the old key file: %w", err)
	}
	if err := r.crash(stepOldKept); err != nil {
		return res, err
	}
	if err := os.Rename(r.NewKeyFile, r.KeyFile); err != nil {
		return res, fmt.Errorf("install the new key file: %w", err)
	}
	if err := syncDir(filepath.Dir(r.KeyFile)); err != nil {
		return res, err
	}
	res.Installed = true
	return res, nil
}

// additionalData is what a sealed value of the store is bound to (internal/seal).
// A kind this vmgate does not know stops the rotation: better than leaving a
// secret under the old key.
func additionalData(sec store.SealedSecret) ([]byte, error) {
	switch sec.Kind {
	case store.SealedSigningKey:
		return seal.SigningKeyAAD(sec.Name), nil
	case store.SealedClusterToken:
		return seal.TokenSecretAAD(sec.Name), nil
	case store.SealedAuditKey:
		return seal.AuditKeyAAD(sec.Name), nil
	case store.SealedNotifySecret:
		return seal.NotifySecretAAD(sec.Name), nil
	}
	return nil, fmt.Errorf("a sealed secret of unknown kind %q", sec.Kind)
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
