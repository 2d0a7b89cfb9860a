package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// devBName is the second emulated cluster of dev mode: the target of remote
// migrations (issue 22).
const devBName = "dev-b"

// startDevB starts the second emulated cluster, dev-b (nodes pveb1 and pveb2,
// storage tank, bridges vmbr1 and vmbr2), and registers it as cluster 2 through
// the same code path as POST /api/v1/clusters (a kept data dir updates it).
func (c *serverCmd) startDevB(ctx, serveCtx context.Context, a *app, log *slog.Logger) (_ *pvesim.Server, err error) {
	sim := pvesim.DevClusterB(pvesim.Options{Speed: c.DevSpeed})
	srv, err := sim.Serve(serveCtx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		return nil, fmt.Errorf("start the emulated cluster %s: %w", devBName, err)
	}
	defer func() {
		if err != nil {
			srv.Close()
		}
	}()
	eps := srv.Endpoints()
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	spec := fleet.ClusterSpec{
		Name: devBName, Endpoints: []string{eps[0].URL}, TokenID: tokenID, TokenSecret: secret,
		TLSFingerprint: eps[0].Fingerprint,
	}
	existing, err := a.fleet.List(ctx)
	if err != nil {
		return nil, err
	}
	var cl fleet.Cluster
	found := false
	for _, e := range existing {
		if e.Name == devBName {
			found = true
			cl, err = a.fleet.Update(ctx, e.ID, fleet.ClusterPatch{
				Endpoints: &spec.Endpoints, TokenID: &spec.TokenID, TokenSecret: &spec.TokenSecret,
				TLSFingerprint: &spec.TLSFingerprint,
			})
		}
	}
	if !found {
		cl, err = a.fleet.Register(ctx, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("register the emulated cluster %s: %w", devBName, err)
	}
	log.Info("dev mode", "cluster", cl.ID, "name", devBName, "emulator", eps[0].URL)
	return srv, nil
}
