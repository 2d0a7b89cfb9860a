package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/keys"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// adminKeysCmd rotates vmgate's own keys (internal/keys; docs/deploy.md).
type adminKeysCmd struct {
	RotateSigning adminKeysRotateSigningCmd `cmd:"" help:"Add a new JWT signing key; it signs from now on, the old one verifies until its tokens have expired."`
	RotateSeal    adminKeysRotateSealCmd    `cmd:"" help:"Seal every secret under a new key file, in one transaction; safe to run again after an interruption."`
}

// newSealer seals with key and opens with it and with the key in previousFile, the
// old key file of a rotation, when given.
func newSealer(key []byte, previousFile string) (*seal.Sealer, error) {
	var previous [][]byte
	if previousFile != "" {
		old, err := seal.ReadKey(previousFile)
		if err != nil {
			return nil, fmt.Errorf("--previous-secret-key-file: %w", err)
		}
		previous = append(previous, old)
	}
	return seal.New(key, previous...)
}

type adminKeysRotateSigningCmd struct{}

// Run adds the key. Running servers learn of it from the change feed (about a
// second) and sign with it from then on.
func (adminKeysRotateSigningCmd) Run(a *adminCmd) error {
	return a.withStore(func(ctx context.Context, st store.Store) error {
		key, err := seal.ReadKey(a.SecretKeyFile)
		if err != nil {
			return err
		}
		sl, err := newSealer(key, a.PreviousSecretKeyFile)
		if err != nil {
			return err
		}
		r, err := keys.RotateSigning(ctx, st, sl, audit.New(st, audit.Options{}), time.Now())
		if err != nil {
			return err
		}
		show("new signing key %s signs from now on (running servers switch within seconds)", r.KID)
		if r.Previous != "" {
			show("signing key %s still verifies for the longest token lifetime (--token-ttl, 1h by default) and %s more, then is retired",
				r.Previous, auth.KeyRetireGrace)
		}
		return nil
	})
}

type adminKeysRotateSealCmd struct {
	NewKeyFile string `required:"" type:"path" help:"The new key file: created (0600) if absent, used as it is if present (a run again after an interruption)."`
	NoInstall  bool   `help:"Leave the key files as they are (start vmgate with --secret-key-file NEW yourself); by default NEW replaces --secret-key-file, the old key kept as <file>.<id>.old."`
}

// Run rotates. Stop vmgate first, or follow docs/deploy.md's procedure for
// replicas that keep serving.
func (c *adminKeysRotateSealCmd) Run(a *adminCmd) error {
	// The new key file opens the audit chain's key when a run before this one
	// committed and was interrupted.
	return a.withKeyedStore([]string{c.NewKeyFile}, func(ctx context.Context, st store.Store, _ *seal.Sealer) error {
		var previous []string
		if a.PreviousSecretKeyFile != "" {
			previous = append(previous, a.PreviousSecretKeyFile)
		}
		res, err := keys.RotateSeal(ctx, keys.SealRotation{
			Store: st, KeyFile: a.SecretKeyFile, Previous: previous, NewKeyFile: c.NewKeyFile,
			Install: !c.NoInstall, Audit: audit.New(st, audit.Options{}),
		})
		if err != nil && res.To != "" && res.To != res.From {
			return fmt.Errorf("%w\nnothing is lost: run the same command again to finish (docs/deploy.md)", err)
		}
		if err != nil {
			return err
		}
		show("sealed %d secret(s) again, under key %s (was %s)", res.Resealed, res.To, res.From)
		if res.Installed {
			show("%s holds the new key; the old one is kept in %s: keep it with the backups made before now, away from them",
				a.SecretKeyFile, res.OldKeyFile)
		} else {
			abs, _ := filepath.Abs(c.NewKeyFile)
			show("start vmgate with --secret-key-file %s", abs)
		}
		return nil
	})
}
