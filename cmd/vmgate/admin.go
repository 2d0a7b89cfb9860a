package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// adminCmd works directly on the database, for bootstrap and recovery. It takes the
// same --database/--data-dir/--secret-key-file as the server (and their VMGATE_*
// variables).
type adminCmd struct {
	Database              string        `env:"VMGATE_DATABASE" help:"sqlite:///path/vmgate.db or postgres://... (default: <data-dir>/vmgate.db)."`
	DataDir               string        `env:"VMGATE_DATA_DIR" default:"." help:"Directory of the SQLite database."`
	SecretKeyFile         string        `env:"VMGATE_SECRET_KEY_FILE" help:"The server's key file (default: <data-dir>/vmgate.key); never created here."`
	PreviousSecretKeyFile string        `env:"VMGATE_PREVIOUS_SECRET_KEY_FILE" help:"The key file of a rotation not yet finished, as the server takes it."`
	User                  adminUserCmd  `cmd:"" help:"Create, list or disable users."`
	Keys                  adminKeysCmd  `cmd:"" help:"Rotate the JWT signing key or the key file that seals secrets."`
	Audit                 adminAuditCmd `cmd:"" help:"Check the audit trail."`
}

type adminAuditCmd struct {
	Verify adminAuditVerifyCmd `cmd:"" help:"Walk the audit trail's hash chain: exit 0 when it is intact, 1 naming the first row changed, inserted or removed."`
}

type adminAuditVerifyCmd struct{}

// Run verifies the chain and prints whether it is keyed and its head, which is
// worth keeping elsewhere: comparing it later reveals a chain rewritten from some
// row on.
func (adminAuditVerifyCmd) Run(a *adminCmd) error {
	return a.withKeyedStore(nil, func(ctx context.Context, st store.Store, sl *seal.Sealer) error {
		v, err := audit.Verify(ctx, st, sl)
		if err != nil {
			noteVerifyFailed(ctx, st, err) // server_notify.go
			return err
		}
		first := "none"
		if v.Rows > 0 {
			first = fmt.Sprintf("%d to %d", v.FirstID, v.HeadID)
		}
		show("audit chain intact: %d rows (ids %s), checkpoint %d, head %d %s", v.Rows, first, v.CheckpointID,
			v.HeadID, v.HeadChain)
		switch {
		case v.KeyedFrom == 0:
			show("not keyed: a writer of the database alone could have rewritten it consistently; " +
				"vmgate keys it the first time it opens the database with its key file")
		case v.KeyedAt.IsZero():
			show("keyed from row %d with the key file's audit key: rows before it verify by the unkeyed rule", v.KeyedFrom)
		default:
			show("keyed from row %d (since %s) with the key file's audit key: rows before it verify by the unkeyed rule",
				v.KeyedFrom, v.KeyedAt.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

type adminUserCmd struct {
	Create  adminUserCreateCmd  `cmd:"" help:"Create a user."`
	List    adminUserListCmd    `cmd:"" help:"List users."`
	Disable adminUserDisableCmd `cmd:"" help:"Disable a user and end their sessions at once."`
}

// withStore opens the database the server would use, runs fn and closes it.
func (a *adminCmd) withStore(fn func(ctx context.Context, st store.Store) error) error {
	return a.withKeyedStore(nil, func(ctx context.Context, st store.Store, _ *seal.Sealer) error { return fn(ctx, st) })
}

// withHost opens the database (withKeyedStore) and runs fn with the account use
// cases of the host's administrator: the API's rules without a login
// (accounts.Host), auth.Offline for the passwords and the sessions, since the
// signing keys may not exist yet, and the audit trail, flushed before the command
// ends.
func (a *adminCmd) withHost(fn func(ctx context.Context, h *accounts.Host) error) error {
	return a.withKeyedStore(nil, func(ctx context.Context, st store.Store, _ *seal.Sealer) error {
		trail := audit.New(st, audit.Options{})
		defer trail.Flush(ctx)
		off, err := auth.NewOffline(st, auth.OfflineConfig{Audit: trail.Record})
		if err != nil {
			return err
		}
		return fn(ctx, accounts.NewHost(accounts.HostConfig{Store: st, Auth: off, Audit: trail, Via: "cli"}))
	})
}

// withKeyedStore is withStore with the key file's Sealer, which the store needs to
// append to the audit chain once it is keyed (docs/security.md item 30): it seals with
// --secret-key-file and opens with it, --previous-secret-key-file and the files
// in more that exist (a rotation's new key file). Without a key file (before the
// server's first start created it) the Sealer is nil and the store appends only
// to a chain that is not keyed yet.
func (a *adminCmd) withKeyedStore(more []string, fn func(ctx context.Context, st store.Store, sl *seal.Sealer) error) error {
	s := serverCmd{Database: a.Database, DataDir: a.DataDir, SecretKeyFile: a.SecretKeyFile}
	if _, err := s.paths(); err != nil {
		return err
	}
	a.SecretKeyFile = s.SecretKeyFile
	sl, err := a.sealer(more)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.OpenWith(ctx, s.Database, store.Options{Sealer: sl})
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(ctx, st, sl)
}

// sealer reads the key files withKeyedStore names; nil when --secret-key-file
// does not exist.
func (a *adminCmd) sealer(more []string) (*seal.Sealer, error) {
	key, err := seal.ReadKey(a.SecretKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var others [][]byte
	for _, f := range append([]string{a.PreviousSecretKeyFile}, more...) {
		if f == "" {
			continue
		}
		k, err := seal.ReadKey(f)
		if errors.Is(err, fs.ErrNotExist) && f != a.PreviousSecretKeyFile {
			continue // a rotation's new key file, not made yet
		}
		if err != nil {
			return nil, err
		}
		others = append(others, k)
	}
	return seal.New(key, others...)
}

type adminUserCreateCmd struct {
	Email         string `required:"" help:"E-mail (the login name)."`
	Nickname      string `help:"Display name."`
	Role          string `default:"user" enum:"admin,user" help:"Global role: admin or user."`
	PasswordStdin bool   `help:"Read the password from standard input: typed without echo on a terminal, else one line (otherwise $VMGATE_PASSWORD)."`
}

func (c *adminUserCreateCmd) Run(a *adminCmd) error {
	pw := os.Getenv("VMGATE_PASSWORD")
	if c.PasswordStdin {
		// On a terminal (systemd-run --pty, a first install by hand) the password is
		// typed: no echo, as vmgate login reads it.
		var err error
		if pw, err = cli.ReadPassword("password for "+c.Email+": ", os.Stdin, os.Stderr); err != nil {
			return err
		}
	}
	if pw == "" {
		return errors.New("give the password with --password-stdin or $VMGATE_PASSWORD")
	}
	return a.withHost(func(ctx context.Context, h *accounts.Host) error {
		u, err := h.CreateUser(ctx, accounts.NewUser{Email: c.Email, Nickname: c.Nickname, Password: pw, Role: c.Role})
		if err != nil {
			return err
		}
		show("created user %d %s (%s)", u.ID, u.Email, u.Role)
		return nil
	})
}

type adminUserListCmd struct{}

func (adminUserListCmd) Run(a *adminCmd) error {
	return a.withStore(func(ctx context.Context, st store.Store) error {
		users, err := st.ListUsers(ctx)
		if err != nil {
			return err
		}
		t := cli.TableOf{Header: []string{"ID", "EMAIL", "NICKNAME", "ROLE", "DISABLED"}}
		for _, u := range users {
			t.Add(strconv.FormatInt(u.ID, 10), u.Email, u.Nickname, u.Role, strconv.FormatBool(u.Disabled))
		}
		return t.Write(os.Stdout)
	})
}

type adminUserDisableCmd struct {
	Email string `required:"" help:"E-mail of the user to disable."`
}

// Run disables the user and ends their sessions under the API's rules (the last
// enabled admin stays); a running server learns of it through the store's change
// feed and refuses their tokens within its poll interval.
func (c *adminUserDisableCmd) Run(a *adminCmd) error {
	return a.withHost(func(ctx context.Context, h *accounts.Host) error {
		u, ended, err := h.DisableUser(ctx, c.Email)
		if e, ok := errs.As(err); ok && e.Reason == errs.ReasonLastAdmin {
			return &cli.ExitError{Code: cli.ExitFailed, Msg: e.Message, Err: err,
				Hint: "create another admin first: vmgate admin user create --role admin --email ..."}
		}
		if err != nil {
			return err
		}
		show("disabled user %d %s; ended %d session(s)", u.ID, u.Email, ended)
		return nil
	})
}
