package main

import (
	"context"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// mappingCmd manages single sign-on's group mappings (docs/decisions/0110):
// an admin's login session only.
type mappingCmd struct {
	List groupMappingListCmd `cmd:"" help:"List the group mappings (admin)."`
	Add  groupMappingAddCmd  `cmd:"" help:"Map a group of the identity provider to a role and grants (admin)."`
	Set  groupMappingSetCmd  `cmd:"" help:"Replace a group mapping (admin)."`
	Rm   groupMappingRmCmd   `cmd:"" help:"Delete a group mapping; its grants go at each member's next login (admin)."`
}

type groupMappingListCmd struct {
	conn
	output
}

func (c *groupMappingListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		l, err := s.GroupMappings(ctx)
		if err != nil {
			return err
		}
		return c.print(l, func() cli.TableOf { return cli.GroupMappingsTable(l) })
	})
}

// groupMappingSpec are the flags that say what a mapping gives.
type groupMappingSpec struct {
	Role  string   `enum:"user,admin" default:"user" help:"The role the group's members get: user (acts where granted) or admin."`
	Grant []string `placeholder:"CLUSTER=ROLE[:pool=P][:tag=T]" help:"A grant the group's members get: a cluster by id or name, operator or viewer, optionally narrowed to the guests of PVE pools or tags (:pool=team-a:tag=web; repeatable)."`
}

func (f groupMappingSpec) input(ctx context.Context, s *cli.Session, group string) (client.GroupMappingInput, error) {
	in := client.GroupMappingInput{Group: group, Role: f.Role, Grants: []client.GroupMappingGrant{}}
	for _, g := range f.Grant {
		cluster, role, scope, err := cli.ParseMappedGrant(g)
		if err != nil {
			return in, err
		}
		cid, err := clusterID(ctx, s, cluster)
		if err != nil {
			return in, err
		}
		in.Grants = append(in.Grants, client.GroupMappingGrant{ClusterID: cid, Role: role, Scope: scope})
	}
	return in, nil
}

type groupMappingAddCmd struct {
	conn
	output
	Group string `arg:"" help:"The group, as the provider's groups claim names it."`
	groupMappingSpec
}

func (c *groupMappingAddCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		in, err := c.input(ctx, s, c.Group)
		if err != nil {
			return err
		}
		m, err := s.CreateGroupMapping(ctx, in)
		if err != nil {
			return err
		}
		return c.print(m, func() cli.TableOf { return cli.GroupMappingsTable([]client.GroupMapping{m}) })
	})
}

type groupMappingSetCmd struct {
	conn
	output
	ID    int64  `arg:"" help:"The mapping's id (vmgate group-mapping list)."`
	Group string `arg:"" help:"The group, as the provider's groups claim names it."`
	groupMappingSpec
}

func (c *groupMappingSetCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		in, err := c.input(ctx, s, c.Group)
		if err != nil {
			return err
		}
		m, err := s.UpdateGroupMapping(ctx, c.ID, in)
		if err != nil {
			return err
		}
		return c.print(m, func() cli.TableOf { return cli.GroupMappingsTable([]client.GroupMapping{m}) })
	})
}

type groupMappingRmCmd struct {
	conn
	ID int64 `arg:"" help:"The mapping's id (vmgate group-mapping list)."`
}

func (c *groupMappingRmCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		if err := s.DeleteGroupMapping(ctx, c.ID); err != nil {
			return err
		}
		say("group mapping %d deleted", c.ID)
		return nil
	})
}
