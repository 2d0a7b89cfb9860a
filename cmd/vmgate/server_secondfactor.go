package main

import (
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/store"
)

// secondFactorFlags are the server's flags of second factors (issue 23 §2).
type secondFactorFlags struct {
	Require2FA string `name:"require-2fa" default:"none" enum:"none,admins,all" env:"VMGATE_REQUIRE_2FA" help:"Who must have a second factor: none, admins or all; a user who must but has none is led to enrol at the next login and can do nothing else."`
	PublicURL  string `name:"public-url" env:"VMGATE_PUBLIC_URL" help:"How browsers reach vmgate (https://vmgate.example.com): the origin and RP ID of passkeys. Without it passkeys are off; TOTP and recovery codes work."`
}

// secondFactors builds the second factors' use cases and makes every password
// login ask them for a second step.
func (c *serverCmd) secondFactors(st store.Store, a *auth.Service, sealer *seal.Sealer, trail *audit.Trail) (*secondfactor.Service, error) {
	policy, err := secondfactor.ParsePolicy(c.Require2FA)
	if err != nil {
		return nil, err
	}
	sf, err := secondfactor.New(secondfactor.Config{Store: st, Sessions: a, Sealer: sealer, Audit: trail,
		PublicURL: c.PublicURL, Require: policy})
	if err != nil {
		return nil, err
	}
	a.SetSecondStep(sf)
	return sf, nil
}
