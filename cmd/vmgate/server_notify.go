package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// notifyFlags are the notifications' flags (issue 24, internal/notify).
type notifyFlags struct {
	NotifyDenyCIDR []string `name:"notify-deny-cidr" default:"169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32,168.63.129.16/32,0.0.0.0/8,::/128" env:"VMGATE_NOTIFY_DENY_CIDR" help:"Addresses and CIDRs vmgate never sends a notification to, checked after resolving the target's name (default: link-local, the clouds' metadata addresses, the unspecified ones)."`
	NotifyHealth   bool     `name:"notify-health" default:"true" negatable:"" env:"VMGATE_NOTIFY_HEALTH" help:"Watch every cluster's health (one /nodes read every 15 s, one replica per cluster) for node and cluster notifications."`
	// NotifyPoll is how often the sender looks for work. Hidden: tests and the
	// benchmark change it.
	NotifyPoll time.Duration `name:"notify-poll" hidden:"" default:"250ms" env:"VMGATE_NOTIFY_POLL" help:"How often the outbox is looked at."`
	// NotifyFirstRetry and NotifyLease are the backoff's first wait and how
	// long a killed process keeps the deliveries it was sending. Hidden: tests
	// shorten them.
	NotifyFirstRetry time.Duration `name:"notify-first-retry" hidden:"" default:"30s" env:"VMGATE_NOTIFY_FIRST_RETRY" help:"The first wait before sending again."`
	NotifyLease      time.Duration `name:"notify-lease" hidden:"" default:"1m" env:"VMGATE_NOTIFY_LEASE" help:"How long a dead process keeps the deliveries it was sending."`
}

// notifyApp is the notifications' part of a composed vmgate.
type notifyApp struct {
	svc    *notify.Service
	sender *notify.Sender
	health *notify.Health // nil without --notify-health
}

// composeNotify builds the targets' use cases, the sender and the health watch.
func (c *serverCmd) composeNotify(st store.Store, sealer *seal.Sealer, fl *fleet.Service, trail *audit.Trail, owner string,
	log *slog.Logger) (*notifyApp, error) {
	deny, err := notify.ParseCIDRs(c.NotifyDenyCIDR)
	if err != nil {
		return nil, fmt.Errorf("--notify-deny-cidr: %w", err)
	}
	n := &notifyApp{}
	// --public-url (how browsers reach vmgate) makes the messages' links absolute.
	n.sender = notify.NewSender(notify.SenderConfig{Store: st, Sealer: sealer, Owner: owner, Logger: log,
		BaseURL: c.PublicURL, Deny: deny, Poll: c.NotifyPoll, FirstRetry: c.NotifyFirstRetry, Lease: c.NotifyLease,
		SendTimeout: min(notify.DefaultSendTimeout, c.NotifyLease/4)})
	n.svc = notify.NewService(st, sealer, trail, n.sender, nil)
	if c.NotifyHealth {
		n.health = notify.NewHealth(st, func(ctx context.Context, clusterID int64) ([]pve.Node, error) {
			cl, err := fl.Client(ctx, clusterID)
			if err != nil {
				return nil, err
			}
			return cl.Nodes(ctx)
		}, owner, nil, log)
	}
	return n, nil
}

// workers are the notifications' background work.
func (n *notifyApp) workers() []func(context.Context) error {
	ws := []func(context.Context) error{n.sender.Run}
	if n.health != nil {
		ws = append(ws, n.health.Run)
	}
	return ws
}

// noteVerifyFailed writes audit.verify_failed to the outbox when the chain is
// broken (not when the store could not be read: that says nothing of the
// chain); the server's sender delivers it.
func noteVerifyFailed(ctx context.Context, st store.Store, err error) {
	var br *audit.ChainBreak
	if !errors.As(err, &br) {
		return
	}
	if werr := st.EnqueueNotifications(ctx, []store.NotifyEvent{notify.AuditVerifyFailed(br.ID, err.Error(), time.Now())}); werr != nil {
		show("could not write the notification of the broken chain: %v", werr)
	}
}
