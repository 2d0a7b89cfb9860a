package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/errs"
)

// The client commands talk to a vmgate server over its API (the client package);
// the rules are the server's, the words and the rendering internal/cli's. Each
// command is a struct whose Run decodes its flags, calls one or a few of the typed
// client's methods through a cli.Session and prints; its
// errors come back explained (cli.ExitError: the exit code, a message in the CLI's
// words, a hint) and main prints them and exits with their code.

// clientCmds are the commands that talk to a running vmgate server.
type clientCmds struct {
	Login   loginCmd   `cmd:"" group:"client" help:"Log in to a vmgate server (or save an API token for it) and keep the login."`
	Logout  logoutCmd  `cmd:"" group:"client" help:"End the session and forget the saved login."`
	Refresh refreshCmd `cmd:"" group:"client" help:"Rotate the saved token now (commands refresh it themselves before it runs out)."`
	Me      meCmd      `cmd:"" group:"client" help:"Show who you are and your grants."`
	Cluster clusterCmd `cmd:"" group:"client" help:"List or show clusters; add or remove them (admin)."`
	Node    nodeCmd    `cmd:"" group:"client" help:"List a cluster's nodes; evacuate one."`
	VM      vmCmd      `cmd:"" name:"vm" group:"client" help:"List VMs; show, start, stop, reboot, suspend, resume or migrate one."`
	CT      ctCmd      `cmd:"" name:"ct" group:"client" help:"List containers; show, start, stop, reboot or migrate an LXC container."`
	Guest   guestCmd   `cmd:"" group:"client" help:"List the guests of both kinds, VMs and containers, of one cluster or of all."`
	Console consoleCmd `cmd:"" group:"client" help:"Open a container's console, or a VM's serial console, on this terminal (Ctrl-] leaves)."` // console.go
	Bulk    bulkCmd    `cmd:"" group:"client" help:"Start, stop, reboot, suspend or resume many VMs of a cluster as one operation."`
	Op      opCmd      `cmd:"" group:"client" help:"List, show, watch or cancel operations on many VMs."`
	Task    taskCmd    `cmd:"" group:"client" help:"List, show, watch or read the log of tasks."`
	Token   tokenCmd   `cmd:"" group:"client" help:"Create, list or delete API tokens for scripts."`
	User    userCmd    `cmd:"" group:"client" help:"Add, list, disable, enable users or set a password (admin)."`
	Grant   grantCmd   `cmd:"" group:"client" help:"Give USER the ROLE (operator or viewer) on CLUSTER (admin)."`
	Revoke  revokeCmd  `cmd:"" group:"client" help:"Take USER's grant on CLUSTER away (admin)."`
	Audit   auditCmd   `cmd:"" group:"client" help:"Read the audit trail, newest first (admin)."`
	Notify  notifyCmd  `cmd:"" group:"client" help:"Notification targets, deliveries and dead letters (admin)."`
	Mapping mappingCmd `cmd:"" name:"group-mapping" group:"client" help:"List, add, replace or delete single sign-on's group mappings (admin)."`
	Get     getCmd     `cmd:"" group:"client" help:"GET an API path and print its data as JSON (e.g. /pve/clusters)."`
}

// conn are the flags of every client command: which server, with which credential.
type conn struct {
	Server string `env:"VMGATE_SERVER" placeholder:"URL" help:"vmgate's base URL (default: the server of your last login, else ${default_server})."`
	Token  string `env:"VMGATE_TOKEN" placeholder:"vmg_…" help:"An API token to use instead of the saved login (for scripts)."`
	CAFile string `name:"ca-file" env:"VMGATE_CA_FILE" placeholder:"PEM" help:"CA (or self-signed certificate) to check an https:// server against, instead of the system's; kept with the login."`
}

func (c conn) options() cli.Options {
	ca := c.CAFile
	if ca != "" {
		if abs, err := filepath.Abs(ca); err == nil {
			ca = abs
		}
	}
	return cli.Options{Server: c.Server, Token: c.Token, CAFile: ca, UserAgent: "vmgate-cli/" + version}
}

// output is the -o flag of the commands that read.
type output struct {
	Output string `short:"o" enum:"auto,table,wide,json" default:"auto" help:"${output_help}"`
}

// print writes raw (the API's data as it came) as JSON, or the table it makes,
// as -o says: a table fits 100 columns, -o wide shows every column whole.
func (o output) print(raw any, table func() cli.TableOf) error {
	f, err := cli.ChooseFormat(o.Output, os.Stdout)
	if err != nil {
		return err
	}
	if f == cli.JSON {
		return cli.WriteJSON(os.Stdout, raw)
	}
	t := table()
	t.Wide = f == cli.Wide
	return t.Write(os.Stdout)
}

// printList prints a list: its items as the API gave them as JSON, or the table
// of their decoded form.
func printList[T any](o output, l client.Listing[T], table func([]T) cli.TableOf) error {
	return o.print(l.Raw, func() cli.TableOf { return table(l.Items) })
}

// idOrName resolves ref, a positive id or else a name, against list: the id of
// the item whose name (key's first answer) is ref, ignoring case; missing when
// there is none.
func idOrName[T any](ctx context.Context, ref string, list func(context.Context) (client.Listing[T], error),
	key func(T) (string, int64), missing *cli.ExitError) (int64, error) {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil && id > 0 {
		return id, nil
	}
	l, err := list(ctx)
	if err != nil {
		return 0, err
	}
	for _, v := range l.Items {
		if name, id := key(v); strings.EqualFold(name, ref) {
			return id, nil
		}
	}
	return 0, missing
}

// optionalCluster resolves --cluster when given (0 when not).
func optionalCluster(ctx context.Context, s *cli.Session, cluster string) (int64, error) {
	if cluster == "" {
		return 0, nil
	}
	return clusterID(ctx, s, cluster)
}

// clusterNames maps the ids of the clusters the caller may see to their names,
// for a table that names clusters; a table shows an id it cannot name as the id,
// so a failure to read them is no reason to fail the command.
func clusterNames(ctx context.Context, s *cli.Session) cli.ClusterNames {
	l, err := s.VisibleClusters(ctx)
	if err != nil {
		return cli.ClusterNames{}
	}
	return cli.NamesOf(l.Items)
}

// signalContext ends on Ctrl-C or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// withSession runs fn with a session of the server c names, and explains its error.
func withSession(c conn, fn func(ctx context.Context, s *cli.Session) error) error {
	ctx, cancel := signalContext()
	defer cancel()
	s, err := cli.Connect(ctx, c.options())
	if err != nil {
		return cli.Explain(err, c.Server)
	}
	if err := fn(ctx, s); err != nil {
		return s.Explain(err)
	}
	return nil
}

// ---- login, logout, refresh, me, get ----

type loginCmd struct {
	conn
	Email         string `env:"VMGATE_EMAIL" help:"Your e-mail (not with --token)."`
	PasswordStdin bool   `help:"Read the password from one line of standard input (without it: asked for without echo on a terminal, $VMGATE_PASSWORD, or one line of a piped stdin)."`
	SSO           bool   `name:"sso" help:"Log in with the server's single sign-on in a browser (RFC 8252: a loopback port of this command receives the browser's return)."`
	NoBrowser     bool   `help:"With --sso: only print the address to open, do not start a browser."`
	SecondFactor  string `name:"second-factor" env:"VMGATE_SECOND_FACTOR" help:"For an account with a second factor: a TOTP code or a recovery code (without it: asked for, or the next line of stdin)."`
}

func (c *loginCmd) Run() error {
	ctx, cancel := signalContext()
	defer cancel()
	s, err := cli.Open(c.options())
	if err != nil {
		return cli.Explain(err, c.Server)
	}
	if c.Token != "" {
		return s.Explain(c.saveToken(ctx, s))
	}
	if c.SSO {
		return c.ssoLogin(ctx, s)
	}
	if strings.TrimSpace(c.Email) == "" {
		return cli.UsageErrorf("--email is required (or --token to keep an API token)")
	}
	pw := os.Getenv("VMGATE_PASSWORD")
	switch {
	case c.PasswordStdin:
		pw, err = cli.ReadLine(os.Stdin)
	case pw == "":
		pw, err = cli.ReadPassword("password for "+c.Email+" on "+s.Server+": ", os.Stdin, os.Stderr)
	}
	if err != nil {
		return cli.UsageErrorf("%v", err)
	}
	s.SetToken("")
	t, err := s.Login(ctx, c.Email, pw)
	if client.StatusOf(err) == http.StatusUnauthorized {
		// At login a 401 is the credentials, not a session (issue 19 item 7).
		return &cli.ExitError{Code: cli.ExitAuth, Err: err, Msg: "e-mail or password is wrong (" + s.Server + ")",
			Hint: "try again: vmgate login --server " + s.Server + " --email " + c.Email}
	}
	if err == nil {
		t, err = c.secondStep(ctx, s, t) // login_secondfactor.go
	}
	var exit *cli.ExitError
	if errors.As(err, &exit) {
		return err
	}
	if err != nil {
		return s.Explain(err)
	}
	if err := cli.SaveLogin(s.Server, cli.Login{Email: c.Email, Token: t.Token, ExpiresAt: t.ExpiresAt, CAFile: s.CAFile()}); err != nil {
		return err
	}
	say("logged in to %s as %s", s.Server, c.Email)
	return nil
}

// saveToken checks an API token with GET /user/me and keeps it as the server's login.
func (c *loginCmd) saveToken(ctx context.Context, s *cli.Session) error {
	me, err := s.Me(ctx)
	if err != nil {
		return err
	}
	if err := cli.SaveLogin(s.Server, cli.Login{Email: me.Email, Token: c.Token, CAFile: s.CAFile()}); err != nil {
		return err
	}
	say("%s: commands use this API token of %s from now on", s.Server, me.Email)
	return nil
}

type logoutCmd struct{ conn }

func (c *logoutCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		if s.FromFlag {
			return cli.UsageErrorf("logout ends a login session; an API token is revoked with `vmgate token rm ID`")
		}
		if !strings.HasPrefix(s.Token(), "vmg_") {
			if err := s.Logout(ctx); err != nil && client.StatusOf(err) != http.StatusUnauthorized {
				return err
			}
		}
		if err := cli.ForgetLogin(s.Server); err != nil {
			return err
		}
		say("logged out of %s", s.Server)
		return nil
	})
}

type refreshCmd struct{ conn }

func (c *refreshCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		if s.FromFlag || strings.HasPrefix(s.Token(), "vmg_") {
			return cli.UsageErrorf("an API token is not refreshed: it lasts until it expires or is deleted")
		}
		t, err := s.Refresh(ctx)
		if err != nil {
			return err
		}
		return cli.UpdateConfig(func(cfg *cli.Config) error {
			l := cfg.Servers[s.Server]
			l.Token, l.ExpiresAt = t.Token, t.ExpiresAt
			cfg.Servers[s.Server] = l
			return nil
		})
	})
}

type meCmd struct {
	conn
	output
}

func (c *meCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		me, err := s.Me(ctx)
		if err != nil {
			return err
		}
		return c.print(me.JSON(), func() cli.TableOf { return cli.MeTable(me, s.Server, clusterNames(ctx, s)) })
	})
}

type getCmd struct {
	conn
	Path string `arg:"" help:"Path under /api/v1, e.g. /pve/clusters or /pve/clusters/1/vms."`
}

func (c *getCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		p, q, _ := strings.Cut(c.Path, "?")
		query, err := url.ParseQuery(q)
		if err != nil {
			return cli.UsageErrorf("the query of %q: %v", c.Path, err)
		}
		resp, err := s.Do(ctx, http.MethodGet, "/api/v1/"+strings.TrimPrefix(p, "/"), query, nil, nil)
		if err != nil {
			return err
		}
		var v any
		if len(resp.Data) > 0 {
			json.Unmarshal(resp.Data, &v)
		}
		// The data goes to stdout as it is; what the envelope says about it, to stderr.
		if resp.AsOf != nil {
			say("as of %s", resp.AsOf.Local().Format("15:04:05.000"))
		}
		if resp.NextCursor != "" {
			say("more: add cursor=%s to the query for the next page", url.QueryEscape(resp.NextCursor))
		}
		return cli.WriteJSON(os.Stdout, v)
	})
}

// ---- clusters and nodes ----

type clusterCmd struct {
	List clusterListCmd `cmd:"" help:"List the clusters you may see, with your role and their status."`
	Show clusterShowCmd `cmd:"" help:"Show a cluster: its endpoints and trust (admin; others see the list's row)."`
	Add  clusterAddCmd  `cmd:"" help:"Register a PVE cluster with its API token (admin)."`
	Rm   clusterRmCmd   `cmd:"" help:"Remove a cluster and its grants (admin); its tasks and audit records stay."`

	RollingMaintenance clusterRollingCmd `cmd:"" name:"rolling-maintenance" help:"Drain, patch, reboot and restore the cluster's nodes one after another (planned first)."`
}

type clusterListCmd struct {
	conn
	output
}

func (c *clusterListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		l, err := s.VisibleClusters(ctx)
		if err != nil {
			return err
		}
		return printList(c.output, l, cli.ClustersTable)
	})
}

// clusterID resolves a cluster given by id or name against the clusters the
// caller may see.
func clusterID(ctx context.Context, s *cli.Session, ref string) (int64, error) {
	return idOrName(ctx, ref, s.VisibleClusters, func(c client.ClusterView) (string, int64) { return c.Name, c.ID },
		&cli.ExitError{Code: cli.ExitNotFound, Msg: fmt.Sprintf("no cluster %q among yours", ref),
			Hint: "see them with: vmgate cluster list"})
}

// clusterFlag is --cluster for the commands that read one cluster: by id or name,
// and when omitted, the only cluster the caller may see.
type clusterFlag struct {
	Cluster string `env:"VMGATE_CLUSTER" placeholder:"ID|NAME" help:"The cluster, by id or name (default: your only one)."`
}

func (f clusterFlag) resolve(ctx context.Context, s *cli.Session) (int64, error) {
	if f.Cluster != "" {
		return clusterID(ctx, s, f.Cluster)
	}
	l, err := s.VisibleClusters(ctx)
	if err != nil {
		return 0, err
	}
	list := l.Items
	switch len(list) {
	case 0:
		return 0, &cli.ExitError{Code: cli.ExitNotFound, Msg: "you may see no cluster",
			Hint: "an admin gives you one: vmgate grant USER CLUSTER ROLE"}
	case 1:
		return list[0].ID, nil
	}
	names := make([]string, 0, len(list))
	for _, c := range list {
		names = append(names, fmt.Sprintf("%d (%s)", c.ID, c.Name))
	}
	return 0, cli.UsageErrorf("give --cluster: one of %s", strings.Join(names, ", "))
}

type clusterShowCmd struct {
	conn
	output
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
}

func (c *clusterShowCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		cl, err := s.Cluster(ctx, id)
		if client.StatusOf(err) == http.StatusForbidden {
			// Not an admin: the row of the list is what this caller may know.
			l, err := s.VisibleClusters(ctx)
			if err != nil {
				return err
			}
			for i, v := range l.Items {
				if v.ID == id {
					return c.print(l.Raw[i], func() cli.TableOf { return cli.ClustersTable(l.Items[i : i+1]) })
				}
			}
			return &cli.ExitError{Code: cli.ExitNotFound, Msg: fmt.Sprintf("cluster %d not found", id)}
		}
		if err != nil {
			return err
		}
		return c.print(cl.JSON(), func() cli.TableOf { return cli.ClusterTable(cl) })
	})
}

type clusterAddCmd struct {
	conn
	output
	Name                string   `arg:"" help:"A name for the cluster (letters, digits, . _ -)."`
	Endpoint            []string `required:"" placeholder:"URL" help:"A node's API address, https://host:8006 (repeat for more; vmgate learns the others)."`
	PVETokenID          string   `name:"pve-token-id" required:"" placeholder:"USER@REALM!NAME" help:"The PVE API token vmgate acts with."`
	PVETokenSecretStdin bool     `name:"pve-token-secret-stdin" help:"Read the PVE token's secret from one line of standard input (else $VMGATE_PVE_TOKEN_SECRET, or asked for without echo)."`
	Fingerprint         string   `placeholder:"AB:CD:…" help:"Pin the SHA-256 fingerprint of the endpoint's certificate."`
	CACert              string   `name:"ca-cert" type:"existingfile" placeholder:"PEM" help:"Trust the cluster's certificates signed by this CA bundle."`
	InsecureSkipVerify  bool     `help:"Do not check the cluster's certificates at all (tests only)."`
}

func (c *clusterAddCmd) Run() error {
	secret := os.Getenv("VMGATE_PVE_TOKEN_SECRET")
	var err error
	switch {
	case c.PVETokenSecretStdin:
		secret, err = cli.ReadLine(os.Stdin)
	case secret == "":
		secret, err = cli.ReadPassword("secret of "+c.PVETokenID+": ", os.Stdin, os.Stderr)
	}
	if err != nil {
		return cli.UsageErrorf("%v", err)
	}
	req := client.ClusterCreate{Name: c.Name, Endpoints: c.Endpoint, TokenID: c.PVETokenID, TokenSecret: secret,
		TLSFingerprint: c.Fingerprint, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return cli.UsageErrorf("--ca-cert: %v", err)
		}
		req.CACert = string(pem)
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		cl, err := s.RegisterCluster(ctx, req)
		if err != nil {
			return err
		}
		return c.print(cl.JSON(), func() cli.TableOf { return cli.ClusterTable(cl) })
	})
}

type clusterRmCmd struct {
	conn
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
}

func (c *clusterRmCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		if err := s.DeleteCluster(ctx, id); err != nil {
			return err
		}
		say("cluster %d removed", id)
		return nil
	})
}

type nodeCmd struct {
	List        nodeListCmd        `cmd:"" help:"List a cluster's nodes."`
	Evacuate    nodeEvacuateCmd    `cmd:"" help:"Move every VM off a node (planned first: PVE's pre-check, 90 % of each target's memory)."`
	Maintenance nodeMaintenanceCmd `cmd:"" help:"Put a node in maintenance (emptied, no guest started there) and take it out (guests restored)."`
}

type nodeListCmd struct {
	conn
	output
	clusterFlag
}

func (c *nodeListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := c.resolve(ctx, s)
		if err != nil {
			return err
		}
		l, err := s.Nodes(ctx, id)
		if err != nil {
			return err
		}
		return printList(c.output, l, cli.NodesTable)
	})
}

// ---- users, grants, audit ----

type userCmd struct {
	List    userListCmd    `cmd:"" help:"List users (admin)."`
	Add     userAddCmd     `cmd:"" help:"Add a user (admin)."`
	Disable userDisableCmd `cmd:"" help:"Disable a user: their sessions and API tokens stop at once (admin)."`
	Enable  userEnableCmd  `cmd:"" help:"Enable a disabled user again (admin)."`
	Passwd  userPasswdCmd  `cmd:"" help:"Set a user's password; their sessions end (admin)."`
}

type userListCmd struct {
	conn
	output
}

func (c *userListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		l, err := s.Users(ctx)
		if err != nil {
			return err
		}
		return printList(c.output, l, cli.UsersTable)
	})
}

// userID resolves a user given by id or e-mail.
func userID(ctx context.Context, s *cli.Session, ref string) (int64, error) {
	return idOrName(ctx, ref, s.Users, func(u client.User) (string, int64) { return u.Email, u.ID },
		&cli.ExitError{Code: cli.ExitNotFound, Msg: fmt.Sprintf("no user %q", ref), Hint: "see them with: vmgate user list"})
}

// newPassword reads a password to set: one line of stdin with --password-stdin or
// when stdin is piped, else twice without echo.
func newPassword(stdinFlag bool, who string) (string, error) {
	if stdinFlag || !cli.IsTerminal(os.Stdin) {
		return cli.ReadLine(os.Stdin)
	}
	pw, err := cli.ReadPassword("new password for "+who+": ", os.Stdin, os.Stderr)
	if err != nil {
		return "", err
	}
	again, err := cli.ReadPassword("again: ", os.Stdin, os.Stderr)
	if err != nil {
		return "", err
	}
	if pw != again {
		return "", errors.New("the two passwords differ")
	}
	return pw, nil
}

type userAddCmd struct {
	conn
	output
	Email         string `arg:"" help:"The user's e-mail, their login name."`
	Nickname      string `help:"A display name."`
	Role          string `enum:"user,admin" default:"user" help:"user (acts where granted) or admin (everything)."`
	PasswordStdin bool   `help:"Read the password from one line of standard input."`
}

func (c *userAddCmd) Run() error {
	pw, err := newPassword(c.PasswordStdin, c.Email)
	if err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		u, err := s.CreateUser(ctx, client.UserCreate{Email: c.Email, Nickname: c.Nickname, Password: pw, Role: c.Role})
		if err != nil {
			return err
		}
		return c.print(u.JSON(), func() cli.TableOf { return cli.UsersTable([]client.User{u}) })
	})
}

// userSetCmd is what disable and enable share.
type userSetCmd struct {
	conn
	User string `arg:"" placeholder:"ID|EMAIL" help:"The user, by id or e-mail."`
}

func (c *userSetCmd) patch(disabled bool) error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := userID(ctx, s, c.User)
		if err != nil {
			return err
		}
		if _, err := s.UpdateUser(ctx, id, client.UserPatch{Disabled: &disabled}); err != nil {
			return err
		}
		what := "enabled"
		if disabled {
			what = "disabled: their sessions and API tokens stopped"
		}
		say("user %d %s", id, what)
		return nil
	})
}

type userDisableCmd struct{ userSetCmd }

func (c *userDisableCmd) Run() error { return c.patch(true) }

type userEnableCmd struct{ userSetCmd }

func (c *userEnableCmd) Run() error { return c.patch(false) }

type userPasswdCmd struct {
	conn
	User          string `arg:"" placeholder:"ID|EMAIL" help:"The user, by id or e-mail."`
	PasswordStdin bool   `help:"Read the password from one line of standard input."`
}

func (c *userPasswdCmd) Run() error {
	pw, err := newPassword(c.PasswordStdin, c.User)
	if err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := userID(ctx, s, c.User)
		if err != nil {
			return err
		}
		if _, err := s.UpdateUser(ctx, id, client.UserPatch{Password: &pw}); err != nil {
			return err
		}
		say("password of user %d set; their sessions ended", id)
		return nil
	})
}

type grantCmd struct {
	conn
	User    string `arg:"" placeholder:"ID|EMAIL" help:"The user, by id or e-mail."`
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
	Role    string `arg:"" enum:"operator,viewer" help:"operator (power, migrate, read) or viewer (read)."`
	// Pools and Tags scope the grant (grantscope.go); neither: the whole cluster.
	Pools []string `name:"pool" placeholder:"POOL" help:"Narrow the grant to the guests of this PVE pool (repeatable; with --tag: either)."`
	Tags  []string `name:"tag" placeholder:"TAG" help:"Narrow the grant to the guests with this PVE tag (repeatable)."`
}

func (c *grantCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		uid, cid, err := userAndCluster(ctx, s, c.User, c.Cluster)
		if err != nil {
			return err
		}
		g, err := s.PutScopedGrant(ctx, cid, uid, c.Role, grantScope(c.Pools, c.Tags))
		if err != nil {
			return err
		}
		say("user %d is %s on cluster %d%s", uid, c.Role, cid, scopeText(g.Scope))
		return nil
	})
}

type revokeCmd struct {
	conn
	User    string `arg:"" placeholder:"ID|EMAIL" help:"The user, by id or e-mail."`
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
}

func (c *revokeCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		uid, cid, err := userAndCluster(ctx, s, c.User, c.Cluster)
		if err != nil {
			return err
		}
		if err := s.DeleteGrant(ctx, cid, uid); err != nil {
			return err
		}
		say("user %d has no grant on cluster %d any more", uid, cid)
		return nil
	})
}

func userAndCluster(ctx context.Context, s *cli.Session, user, cluster string) (int64, int64, error) {
	uid, err := userID(ctx, s, user)
	if err != nil {
		return 0, 0, err
	}
	cid, err := clusterID(ctx, s, cluster)
	return uid, cid, err
}

type auditCmd struct {
	conn
	output
	Limit   int           `default:"50" help:"At most this many records (1 to 1000)."`
	Before  int64         `help:"Only records older than this id (the next page: the smallest id of the last)."`
	User    string        `placeholder:"ID|EMAIL" help:"Only what this user did."`
	Action  string        `help:"Only this action (auth.login_failed, vm.migrate, token.create, ...)."`
	Cluster string        `placeholder:"ID|NAME" help:"Only this cluster."`
	Result  string        `help:"Only this result (ok, denied, ...)."`
	Since   time.Duration `help:"Only the last so long (e.g. 24h)."`
}

func (c *auditCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		f := client.AuditFilter{Limit: c.Limit, Before: c.Before, Action: c.Action, Result: c.Result}
		if c.User != "" {
			id, err := userID(ctx, s, c.User)
			if err != nil {
				return err
			}
			f.UserID = id
		}
		cid, err := optionalCluster(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		f.ClusterID = cid
		if c.Since > 0 {
			f.From = time.Now().Add(-c.Since)
		}
		l, err := s.Audit(ctx, f)
		if err != nil {
			return err
		}
		names := clusterNames(ctx, s)
		return printList(c.output, l, func(list []client.AuditRecord) cli.TableOf { return cli.AuditTable(list, names) })
	})
}

// ---- API tokens ----

type tokenCmd struct {
	Create tokenCreateCmd `cmd:"" help:"Create an API token; its secret is printed once."`
	List   tokenListCmd   `cmd:"" help:"List API tokens (yours, or a user's with --user: admin); never their secrets."`
	Rm     tokenRmCmd     `cmd:"" help:"Delete an API token: it stops working at once."`
}

type tokenCreateCmd struct {
	conn
	output
	Name          string   `arg:"" help:"A name that says what uses it (unique among your tokens)."`
	ExpiresInDays int      `placeholder:"DAYS" help:"Days it lasts: 1 to 365 (default 90)."`
	Grant         []string `placeholder:"CLUSTER:ROLE" help:"Limit it to this cluster (id or name) and role, operator or viewer; repeat for more (default: all of your grants)."`
}

func (c *tokenCreateCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		req := client.TokenCreate{Name: c.Name, ExpiresInDays: c.ExpiresInDays}
		if len(c.Grant) > 0 {
			for _, g := range c.Grant {
				ref, role, ok := strings.Cut(g, ":")
				if !ok || (role != "operator" && role != "viewer") {
					return cli.UsageErrorf("--grant %q: want CLUSTER:ROLE, ROLE operator or viewer", g)
				}
				id, err := clusterID(ctx, s, ref)
				if err != nil {
					return err
				}
				req.Grants = append(req.Grants, client.Grant{ClusterID: id, Role: role})
			}
		}
		tok, err := s.CreateToken(ctx, req)
		if err != nil {
			return err
		}
		f, err := cli.ChooseFormat(c.Output, os.Stdout)
		if err != nil {
			return err
		}
		if f == cli.JSON {
			return cli.WriteJSON(os.Stdout, tok.JSON())
		}
		// The secret alone on stdout, for TOKEN=$(vmgate token create ci -o table);
		// what it is, on stderr.
		show("%s", tok.Token)
		say("API token %s (%s) until %s, grants: %s", tok.ID, tok.Name, cli.Stamp(tok.ExpiresAt), cli.GrantsText(tok.Grants, clusterNames(ctx, s)))
		say("the secret above is shown this once: keep it in a secret store; send it as --token or $VMGATE_TOKEN")
		return nil
	})
}

type tokenListCmd struct {
	conn
	output
	User string `placeholder:"ID|EMAIL" help:"A user's tokens instead of yours (admin)."`
}

func (c *tokenListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		var (
			l   client.Listing[client.APIToken]
			err error
		)
		if c.User != "" {
			id, err := userID(ctx, s, c.User)
			if err != nil {
				return err
			}
			l, err = s.UserTokens(ctx, id)
		} else {
			l, err = s.Tokens(ctx)
		}
		if err != nil {
			return err
		}
		now, names := time.Now(), clusterNames(ctx, s)
		return printList(c.output, l, func(list []client.APIToken) cli.TableOf { return cli.TokensTable(list, now, names) })
	})
}

type tokenRmCmd struct {
	conn
	ID   string `arg:"" name:"id" help:"The token's id (vmgate token list shows it)."`
	User string `placeholder:"ID|EMAIL" help:"A user's token instead of yours (admin)."`
}

func (c *tokenRmCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		if c.User != "" {
			id, err := userID(ctx, s, c.User)
			if err != nil {
				return err
			}
			if err := s.DeleteUserToken(ctx, id, c.ID); err != nil {
				return err
			}
		} else if err := s.DeleteToken(ctx, c.ID); err != nil {
			return err
		}
		say("API token %s deleted: it stops working at once", c.ID)
		return nil
	})
}

// ---- tasks ----

type taskCmd struct {
	List  taskListCmd  `cmd:"" help:"List the tasks vmgate started, newest first."`
	Show  taskShowCmd  `cmd:"" help:"Show a task."`
	Watch taskWatchCmd `cmd:"" help:"Follow a task to its end."`
	Log   taskLogCmd   `cmd:"" help:"Print a task's log."`
	Abort taskAbortCmd `cmd:"" help:"Stop a running task in PVE (a migration, a hung shutdown) and print how PVE ended it."`
}

type taskListCmd struct {
	conn
	output
	Cluster string `placeholder:"ID|NAME" help:"Only this cluster."`
	VMID    int64  `name:"vmid" help:"Only this VM."`
	Limit   int    `default:"50" help:"At most this many (1 to 500)."`
}

func (c *taskListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		cid, err := optionalCluster(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		l, err := s.Tasks(ctx, client.TaskFilter{ClusterID: cid, VMID: c.VMID, Limit: c.Limit})
		if err != nil {
			return err
		}
		names := clusterNames(ctx, s)
		return printList(c.output, l, func(list []client.Task) cli.TableOf { return cli.TasksTable(list, names) })
	})
}

// taskRef names a task.
type taskRef struct {
	UPID    string `arg:"" name:"upid" help:"The task's id: its UPID (UPID:…), or vmgate's task reference (taskRef, a number) while the UPID is not known."`
	Cluster int64  `placeholder:"ID" help:"Its cluster, for a task vmgate did not start."`
}

type taskShowCmd struct {
	conn
	output
	taskRef
}

func (c *taskShowCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		t, err := s.Task(ctx, c.UPID, client.TaskQuery{ClusterID: c.Cluster})
		if err != nil {
			return err
		}
		return c.print(t.JSON(), func() cli.TableOf {
			tab := cli.TasksTable([]client.Task{t}, clusterNames(ctx, s))
			tab.Header = append(tab.Header, "PROGRESS", "ERROR")
			tab.Flex = append(tab.Flex, "ERROR")
			progress := ""
			if t.Progress != nil {
				progress = fmt.Sprintf("%.0f%%", t.Progress.Percent)
			}
			tab.Rows[0] = append(tab.Rows[0], progress, t.ErrorLine())
			return tab
		})
	})
}

type taskWatchCmd struct {
	conn
	UPID string `arg:"" name:"upid" help:"The task's id: its UPID (UPID:…), or vmgate's task reference (taskRef, a number) while the UPID is not known."`
}

func (c *taskWatchCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		return watch(ctx, s, c.UPID, "watching stopped; the task goes on in vmgate")
	})
}

type taskLogCmd struct {
	conn
	taskRef
}

func (c *taskLogCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		lines, err := s.TaskLog(ctx, c.UPID, c.Cluster)
		if err != nil {
			return err
		}
		for _, l := range lines {
			show("%s", l.T)
		}
		return nil
	})
}

type taskAbortCmd struct {
	conn
	taskRef
}

// Run asks PVE to stop the task, as PVE's own Stop does (the server checks the
// operator grant and audits task.abort), then waits for PVE to end it and
// prints PVE's own words: its exit status ("migration aborted", "received
// interrupt") and its log's error line. A task that ended first is a conflict
// (task_finished).
func (c *taskAbortCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		t, err := s.AbortTask(ctx, c.UPID, c.Cluster)
		if err != nil {
			return err
		}
		id := c.UPID
		if t.UPID() != "" {
			id = t.UPID()
		}
		say("abort %s: PVE was asked to stop it; waiting for its end", id)
		for !t.Finished() {
			t, err = s.Task(ctx, id, client.TaskQuery{ClusterID: c.Cluster, Wait: 30})
			if errors.Is(err, context.Canceled) {
				return &cli.ExitError{Code: cli.ExitInterrupted, Msg: "waiting stopped; PVE was asked to stop the task",
					Hint: "see how it ended: vmgate task show " + id}
			}
			if err != nil {
				return err
			}
		}
		if t.Result == "ok" || t.Result == "warnings" {
			show("the task ended before PVE stopped it: %s", cli.Summary(t, ""))
			return nil
		}
		show("stopped in PVE: %s", t.Exit())
		if line := t.ErrorLine(); line != "" && line != t.Exit() {
			show("PVE's log: %s", line)
		}
		return nil
	})
}

// watch follows a task to its end and prints its summary; Ctrl-C stops watching,
// not the task, and says how to pick it up again.
func watch(ctx context.Context, s *cli.Session, upid, interrupted string) error {
	t, err := cli.Watch(ctx, s.Client, upid, cli.WatchOptions{Progress: os.Stderr, Terminal: cli.IsTerminal(os.Stderr)})
	if errors.Is(err, context.Canceled) {
		return &cli.ExitError{Code: cli.ExitInterrupted, Msg: interrupted, Hint: "follow it again: vmgate task watch " + upid}
	}
	if err != nil {
		return err
	}
	show("%s", cli.Summary(t, pveRate(ctx, s, t)))
	if t.Result == "failed" {
		return &cli.ExitError{Code: cli.ExitFailed, Msg: "the task failed", Hint: "its log: vmgate task log " + upid}
	}
	return nil
}

// pveRate is the average rate PVE's log gives for a migration that ended well
// (issue 19 item 7: PVE's own figure, not one computed here), "" for other
// tasks or when the log cannot be read.
func pveRate(ctx context.Context, s *cli.Session, t client.Task) string {
	if !t.IsMigration || (t.Result != "ok" && t.Result != "warnings") || t.UPID() == "" {
		return ""
	}
	lines, err := s.TaskLog(ctx, t.UPID(), t.ClusterID)
	if err != nil {
		return ""
	}
	return cli.PVERate(lines)
}

// ---- VMs ----

// vmRef names a VM. The cluster is given as everywhere else in the client, by id
// or name; hints repeat it as it was typed.
type vmRef struct {
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
	Node    string `arg:"" help:"Node the VM is on."`
	VMID    int64  `arg:"" name:"vmid" help:"VM id."`
}

func (v vmRef) args() string { return fmt.Sprintf("%s %s %d", v.Cluster, v.Node, v.VMID) }

type vmCmd struct {
	List    vmListCmd    `cmd:"" help:"List a cluster's VMs, filtered; read in pages to the end."`
	Status  vmStatusCmd  `cmd:"" help:"Show a VM's status."`
	Start   vmStartCmd   `cmd:"" help:"Start a VM."`
	Stop    vmStopCmd    `cmd:"" help:"Shut a VM down gracefully and wait for PVE's outcome, or power it off with --force."`
	Reboot  vmRebootCmd  `cmd:"" help:"Reboot a VM."`
	Suspend vmSuspendCmd `cmd:"" help:"Pause a VM, or hibernate it with --to-disk."`
	Resume  vmResumeCmd  `cmd:"" help:"Resume a paused or hibernated VM."`
	Migrate vmMigrateCmd `cmd:"" help:"Migrate a VM to another node and follow the task."`
	// remote.go
	RemoteMigrate vmRemoteMigrateCmd `cmd:"" name:"remote-migrate" help:"Move a VM to another cluster (--dry-run: the pre-check) and follow the task."`
}

// listFilter are the filters of the guest lists.
type listFilter struct {
	Node     string `help:"Only the guests on this node."`
	Status   string `help:"Only the guests in this state: running, stopped or unknown."`
	Tag      string `help:"Only the guests with this tag."`
	Q        string `name:"q" help:"Only the guests whose name holds this text (ignoring case) or whose vmid it is."`
	PageSize int    `placeholder:"N" help:"Read the list in pages of N guests (default: one answer)."`
}

func (f listFilter) filter() client.GuestFilter {
	return client.GuestFilter{Node: f.Node, Status: f.Status, Tag: f.Tag, Q: f.Q, PageSize: f.PageSize}
}

type vmListCmd struct {
	conn
	output
	clusterFlag
	listFilter
}

func (c *vmListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := c.resolve(ctx, s)
		if err != nil {
			return err
		}
		l, err := s.VMs(ctx, id, c.filter())
		if err != nil {
			return err
		}
		asOf(len(l.Items), "VMs", l.AsOf)
		return printList(c.output, l, cli.VMsTable)
	})
}

// asOf tells a person on a terminal when the list was read from PVE.
func asOf(n int, what string, at time.Time) {
	if !at.IsZero() && cli.IsTerminal(os.Stderr) {
		say("%d %s, as of %s", n, what, at.Local().Format("15:04:05.000"))
	}
}

type vmStatusCmd struct {
	conn
	output
	vmRef
}

func (c *vmStatusCmd) Run() error { return guestStatus(c.conn, c.output, c.vmRef) }

// guestStatus reads a guest's status and prints it.
func guestStatus(c conn, o output, g guestArg) error {
	return withSession(c, func(ctx context.Context, s *cli.Session) error {
		ref, err := g.ref(ctx, s)
		if err != nil {
			return err
		}
		st, err := s.GuestStatus(ctx, ref)
		if err != nil {
			return g.hint(err, "status")
		}
		return o.print(st.JSON(), func() cli.TableOf { return cli.GuestStatusTable(st) })
	})
}

type vmStartCmd struct {
	conn
	vmRef
	Wait int `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *vmStartCmd) Run() error {
	return power(c.conn, c.vmRef, "start", client.PowerOptions{Wait: &c.Wait})
}

type vmRebootCmd vmStartCmd

func (c *vmRebootCmd) Run() error {
	return power(c.conn, c.vmRef, "reboot", client.PowerOptions{Wait: &c.Wait})
}

type vmStopCmd struct {
	conn
	vmRef
	stopFlags
}

// stopFlags are the flags of a graceful stop or a forced one.
type stopFlags struct {
	Force   bool `help:"Power off at once, even while a graceful shutdown hangs."`
	Timeout *int `help:"Seconds PVE gives the guest to shut down (PVE's default: 60)."`
	Wait    *int `placeholder:"S" help:"Seconds to wait for PVE's outcome (default: the shutdown's timeout and a margin; 0: do not wait)."`
}

// pveShutdownTimeout is PVE's own wait for a graceful shutdown when none is
// given: qemu-server's shutdown (60 s) and lxc-stop's (60 s, pve-container
// passes none). shutdownMargin covers what PVE does around it (a container's
// vm_stop polls 5 s more) and the way to vmgate.
const (
	pveShutdownTimeout = 60
	shutdownMargin     = 15
)

// powerOptions are the power options of a stop. A graceful one waits for PVE's
// outcome by default (issue 19 item 2): the shutdown's timeout and a margin.
func (f stopFlags) powerOptions() client.PowerOptions {
	o := client.PowerOptions{Force: f.Force, Timeout: f.Timeout, Wait: f.Wait}
	if o.Wait == nil && !f.Force {
		wait := pveShutdownTimeout + shutdownMargin
		if f.Timeout != nil {
			wait = *f.Timeout + shutdownMargin
		}
		wait = min(wait, 300) // the API's most; the watch follows the task beyond it
		o.Wait = &wait
	}
	return o
}

func (c *vmStopCmd) Run() error { return power(c.conn, c.vmRef, "stop", c.powerOptions()) }

// guestArg is a command's guest, a VM (vmRef) or a container (ctRef): how a
// person names it, and the command that gets past an error.
type guestArg interface {
	ref(ctx context.Context, s *cli.Session) (client.GuestRef, error)
	hint(err error, op string, target ...string) error
}

func (v vmRef) ref(ctx context.Context, s *cli.Session) (client.GuestRef, error) {
	cid, err := clusterID(ctx, s, v.Cluster)
	return client.VM(cid, v.Node, v.VMID), err
}

func (v vmRef) hint(err error, op string, target ...string) error {
	return vmHint(err, v, op, target...)
}

// power runs one power operation on a guest and prints its outcome. A task that
// still runs when vmgate's wait ends is followed to its end when the command
// waits (a graceful stop), else named with the command that follows it.
func power(c conn, g guestArg, op string, o client.PowerOptions) error {
	return withSession(c, func(ctx context.Context, s *cli.Session) error {
		ref, err := g.ref(ctx, s)
		if err != nil {
			return err
		}
		var res client.PowerResult
		switch op {
		case "start":
			res, err = s.Start(ctx, ref, o)
		case "stop":
			res, err = s.Stop(ctx, ref, o)
		case "reboot":
			res, err = s.Reboot(ctx, ref, o)
		case "suspend":
			res, err = s.Suspend(ctx, ref, o)
		case "resume":
			res, err = s.Resume(ctx, ref, o)
		}
		if err != nil {
			return g.hint(err, op)
		}
		noun := ref.Kind.Noun()
		if res.Running && op == "stop" && !o.Force && (o.Wait == nil || *o.Wait > 0) {
			// PVE's shutdown outlasted vmgate's wait: its outcome is still to come.
			return followStop(ctx, s, g, ref, res.TaskID)
		}
		if res.Running {
			show("%s %s %d: still running in PVE (%s)", op, noun, ref.VMID, res.TaskID)
			say("follow it: vmgate task watch %s", res.TaskID)
			return nil
		}
		show("%s %s %d: done (%s)", op, noun, ref.VMID, res.TaskID)
		return nil
	})
}

// followStop follows a graceful stop's task to its end: done, or PVE's
// shutdown timeout said as vmgate's API says it (shutdown_timeout, exit 4)
// with the command that powers the guest off.
func followStop(ctx context.Context, s *cli.Session, g guestArg, ref client.GuestRef, upid string) error {
	say("stop %s %d: waiting for PVE's shutdown (%s)", ref.Kind.Noun(), ref.VMID, upid)
	t, err := cli.Watch(ctx, s.Client, upid, cli.WatchOptions{})
	if errors.Is(err, context.Canceled) {
		return &cli.ExitError{Code: cli.ExitInterrupted, Msg: "watching stopped; the shutdown goes on in PVE",
			Hint: "follow it again: vmgate task watch " + upid}
	}
	if err != nil {
		return err
	}
	if t.Result == "failed" {
		why := t.ErrorLine()
		if why == "" {
			why = t.Exit()
		}
		low := strings.ToLower(why)
		if strings.Contains(low, "timeout") || strings.Contains(low, "did not stop") {
			return g.hint(&client.APIError{Status: http.StatusConflict, Reason: errs.ReasonShutdownTimeout, TaskID: upid,
				Message: fmt.Sprintf("%s %d did not shut down in time (PVE: %s)", ref.Kind.Noun(), ref.VMID, why),
				Details: map[string]any{}, Header: http.Header{}}, "stop")
		}
		return &cli.ExitError{Code: cli.ExitFailed, Msg: fmt.Sprintf("stop %s %d failed: %s", ref.Kind.Noun(), ref.VMID, why),
			Hint: "its log: vmgate task log " + upid}
	}
	show("stop %s %d: done (%s)", ref.Kind.Noun(), ref.VMID, upid)
	return nil
}

type vmMigrateCmd struct {
	conn
	vmRef
	Target         string `required:"" help:"Target node."`
	Offline        bool   `help:"Refuse a live migration: the VM must be stopped."`
	WithLocalDisks bool   `help:"Also copy local disks."`
	TargetStorage  string `help:"Target storage (PVE storage map)."`
	BWLimit        *int   `name:"bwlimit" help:"Bandwidth limit in KiB/s."`
	NoWatch        bool   `help:"Print the task id and return at once."`
}

func (c *vmMigrateCmd) Run() error {
	req := client.MigrateRequest{Target: c.Target, WithLocalDisks: c.WithLocalDisks, TargetStorage: c.TargetStorage, BWLimit: c.BWLimit}
	if c.Offline {
		f := false
		req.Online = &f
	}
	return migrate(c.conn, c.vmRef, req, c.NoWatch)
}

// migrate starts a guest's migration and follows it to its end (or prints its
// task with --no-watch).
func migrate(c conn, g guestArg, req client.MigrateRequest, noWatch bool) error {
	return withSession(c, func(ctx context.Context, s *cli.Session) error {
		ref, err := g.ref(ctx, s)
		if err != nil {
			return err
		}
		upid, err := s.Migrate(ctx, ref, req)
		if errors.Is(err, context.Canceled) {
			return &cli.ExitError{Code: cli.ExitInterrupted,
				Msg:  "interrupted before vmgate answered: the migration may have started",
				Hint: fmt.Sprintf("look for it: vmgate task list --vmid %d", ref.VMID)}
		}
		if err != nil {
			return g.hint(err, "migrate", req.Target)
		}
		if noWatch {
			show("%s", upid)
			return nil
		}
		noun := ref.Kind.Noun()
		say("migrating %s %d to %s: %s", noun, ref.VMID, req.Target, upid)
		return watch(ctx, s, upid, fmt.Sprintf("interrupted: the migration of %s %d goes on", noun, ref.VMID))
	})
}

// vmHint adds to an API error about a VM the command that gets past it, in the
// CLI's words.
func vmHint(err error, v vmRef, op string, target ...string) error {
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status == http.StatusUnauthorized {
		return err // the session explains it
	}
	e := cli.Explain(err, "")
	switch ae.Reason {
	case errs.ReasonShutdownTimeout:
		e.Hint = "power it off: vmgate vm stop " + v.args() + " --force"
	case errs.ReasonVMPaused:
		if op == "start" {
			e.Hint = "resume it: vmgate vm resume " + v.args()
		} else if op != "suspend" {
			e.Hint = "resume it: vmgate vm resume " + v.args() + " (or power it off: vmgate vm stop " + v.args() + " --force)"
		}
	case errs.ReasonVMLocked, errs.ReasonInProgress:
		e.Hint = fmt.Sprintf("see what runs on it: vmgate task list --cluster %s --vmid %d", v.Cluster, v.VMID)
	case errs.ReasonMigrationBlocked:
		if ae.HasDetail("localDisks") {
			t := "TARGET"
			if len(target) > 0 {
				t = target[0]
			}
			e.Hint = "copy its local disks too: vmgate vm migrate " + v.args() + " --target " + t + " --with-local-disks"
		}
	case "not_found":
		node := ae.Detail("node")
		if ae.Detail("kind") == "lxc" && node != "" {
			e.Hint = fmt.Sprintf("%d is a container: vmgate ct %s %s %s %d", v.VMID, op, v.Cluster, node, v.VMID)
		} else if node != "" && node != v.Node {
			e.Hint = fmt.Sprintf("it is on %s: vmgate vm %s %s %s %d", node, op, v.Cluster, node, v.VMID)
		}
	}
	return e
}

// ---- completion ----

type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

func (c *completionCmd) Run(k *kongContext) error {
	script, err := cli.Completion(c.Shell, k.Model)
	if err != nil {
		return err
	}
	_, err = io.WriteString(os.Stdout, script)
	return err
}
