package main

import (
	"context"
	"os"
	"strconv"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// Notifications (issue 24): `vmgate notify target list|add|test|rm`, `vmgate
// notify deliveries` and `vmgate notify retry` (admin).

type notifyCmd struct {
	Target     notifyTargetCmd     `cmd:"" help:"List, add, test or remove notification targets (admin)."`
	Deliveries notifyDeliveriesCmd `cmd:"" help:"List the last deliveries, newest first; --state dead for the dead letters (admin)."`
	Retry      notifyRetryCmd      `cmd:"" help:"Send a dead letter again (admin)."`
}

type notifyTargetCmd struct {
	List notifyTargetListCmd `cmd:"" help:"List the notification targets."`
	Add  notifyTargetAddCmd  `cmd:"" help:"Add a notification target."`
	Test notifyTargetTestCmd `cmd:"" help:"Send a test event to a target now and print what its receiver answered."`
	Rm   notifyTargetRmCmd   `cmd:"" help:"Remove a notification target and its deliveries."`
}

type notifyTargetListCmd struct {
	conn
	output
}

func (c *notifyTargetListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		l, err := s.NotifyTargets(ctx)
		if err != nil {
			return err
		}
		return printList(c.output, l, cli.NotifyTargetsTable)
	})
}

type notifyTargetAddCmd struct {
	conn
	output
	Name        string   `arg:"" help:"A name for the target."`
	Kind        string   `arg:"" enum:"webhook,slack,teams,ntfy,gotify,smtp" help:"webhook, slack, teams, ntfy, gotify or smtp."`
	Endpoint    string   `arg:"" help:"Its URL; for smtp: smtp://[user@]host[:587]?from=a@example.org&to=b@example.org (STARTTLS) or smtps://… (implicit TLS)."`
	SecretStdin bool     `name:"secret-stdin" help:"Read the secret (a webhook's HMAC key, an ntfy or Gotify token, an SMTP password) from one line of standard input (else $VMGATE_NOTIFY_SECRET)."`
	Event       []string `placeholder:"KIND" help:"Only this event (repeat for several; default all): task.failed, operation.finished, node.offline, ..."`
	Cluster     []int64  `placeholder:"ID" help:"Only events of this cluster (repeat for several; default all)."`
	Severity    string   `enum:",info,warning,error,critical" default:"" help:"Only events at least this severe."`
	Rate        int      `placeholder:"N" help:"At most N messages a minute; past it the events wait, the minute's last message a digest (0: no limit)."`
}

func (c *notifyTargetAddCmd) Run() error {
	secret := os.Getenv("VMGATE_NOTIFY_SECRET")
	if c.SecretStdin {
		var err error
		if secret, err = cli.ReadLine(os.Stdin); err != nil {
			return cli.UsageErrorf("%v", err)
		}
	}
	req := client.NotifyTargetCreate{Name: c.Name, Kind: c.Kind, Endpoint: c.Endpoint, Secret: secret, RatePerMinute: c.Rate}
	if len(c.Event) > 0 || len(c.Cluster) > 0 || c.Severity != "" {
		req.Filters = &client.NotifyFilters{Events: c.Event, Clusters: c.Cluster, Severity: c.Severity}
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		tg, err := s.CreateNotifyTarget(ctx, req)
		if err != nil {
			return err
		}
		return c.print(tg.JSON(), func() cli.TableOf { return cli.NotifyTargetsTable([]client.NotifyTarget{tg}) })
	})
}

type notifyTargetTestCmd struct {
	conn
	output
	Target string `arg:"" placeholder:"ID|NAME" help:"The target, by id or name."`
}

func (c *notifyTargetTestCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := notifyTargetID(ctx, s, c.Target)
		if err != nil {
			return err
		}
		res, err := s.TestNotifyTarget(ctx, id)
		if err != nil {
			return err
		}
		if err := c.print(res.JSON(), func() cli.TableOf {
			t := cli.TableOf{Header: []string{"DELIVERED", "STATUS", "ERROR"}, Flex: []string{"ERROR"}}
			t.Add(map[bool]string{true: "yes", false: "no"}[res.Delivered], itoaOrDash(res.Status), res.Error)
			return t
		}); err != nil {
			return err
		}
		if !res.Delivered {
			return cli.Failedf("the test was not delivered")
		}
		return nil
	})
}

type notifyTargetRmCmd struct {
	conn
	Target string `arg:"" placeholder:"ID|NAME" help:"The target, by id or name."`
}

func (c *notifyTargetRmCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := notifyTargetID(ctx, s, c.Target)
		if err != nil {
			return err
		}
		if err := s.DeleteNotifyTarget(ctx, id); err != nil {
			return err
		}
		say("notification target %s removed", id)
		return nil
	})
}

type notifyDeliveriesCmd struct {
	conn
	output
	Target string `placeholder:"ID|NAME" help:"Only this target's."`
	State  string `enum:",pending,delivered,dead" default:"" help:"Only pending, delivered or dead ones."`
	Limit  int    `default:"50" help:"At most this many (1 to 500)."`
}

func (c *notifyDeliveriesCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		f := client.NotifyDeliveryFilter{State: c.State, Limit: c.Limit}
		if c.Target != "" {
			id, err := notifyTargetID(ctx, s, c.Target)
			if err != nil {
				return err
			}
			f.TargetID = id
		}
		l, err := s.NotifyDeliveries(ctx, f)
		if err != nil {
			return err
		}
		return printList(c.output, l, cli.NotifyDeliveriesTable)
	})
}

type notifyRetryCmd struct {
	conn
	output
	Delivery int64 `arg:"" placeholder:"ID" help:"The dead letter's delivery id."`
}

func (c *notifyRetryCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		d, err := s.RetryNotifyDelivery(ctx, c.Delivery)
		if err != nil {
			return err
		}
		return c.print(d.JSON(), func() cli.TableOf { return cli.NotifyDeliveriesTable([]client.NotifyDelivery{d}) })
	})
}

// notifyTargetID resolves a target by id or, failing that, by name.
func notifyTargetID(ctx context.Context, s *cli.Session, ref string) (string, error) {
	l, err := s.NotifyTargets(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range l.Items {
		if t.ID == ref {
			return t.ID, nil
		}
	}
	for _, t := range l.Items {
		if t.Name == ref {
			return t.ID, nil
		}
	}
	return "", cli.UsageErrorf("no notification target %q", ref)
}

func itoaOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}
