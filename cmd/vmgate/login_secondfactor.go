package main

import (
	"context"
	"net/http"
	"os"
	"strings"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// secondStep finishes a password login that asked for a second factor (issue 23
// §2): the code from --second-factor ($VMGATE_SECOND_FACTOR), else asked for
// without echo on a terminal, else the next line of standard input. Six digits
// are a TOTP code, anything else a recovery code; a passkey needs the web UI.
func (c *loginCmd) secondStep(ctx context.Context, s *cli.Session, t client.LoginToken) (client.LoginToken, error) {
	if t.SecondFactor == nil {
		return t, nil
	}
	code := c.SecondFactor
	if code == "" {
		var err error
		code, err = cli.ReadPassword("second factor for "+c.Email+" (6 digits or a recovery code): ", os.Stdin, os.Stderr)
		if err != nil {
			return t, cli.UsageErrorf("this account has a second factor: %v (or --second-factor)", err)
		}
	}
	code = strings.TrimSpace(code)
	a := client.SecondFactorAnswer{Ticket: t.SecondFactor.Ticket}
	if digits := strings.NewReplacer(" ", "", "-", "").Replace(code); len(digits) == 6 && strings.Trim(digits, "0123456789") == "" {
		a.TOTP = digits
	} else {
		a.RecoveryCode = code
	}
	done, err := s.LoginSecondFactor(ctx, a)
	if client.StatusOf(err) == http.StatusUnauthorized {
		return t, &cli.ExitError{Code: cli.ExitAuth, Err: err, Msg: "the second factor is wrong, used or too late (" + s.Server + ")",
			Hint: "log in again: vmgate login --server " + s.Server + " --email " + c.Email}
	}
	return done, err
}
