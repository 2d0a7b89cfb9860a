package store

import "context"

const auditColumns = `id, at, user_id, user_email, session_id, action, cluster_id, node, vmid, target,
	params, result, upid, address, request_id`

func scanAudit(sc scanner) (AuditRecord, error) {
	var a AuditRecord
	err := sc.Scan(&a.ID, timeCol{&a.At}, &a.UserID, &a.UserEmail, &a.SessionID, &a.Action, &a.ClusterID,
		&a.Node, &a.VMID, &a.Target, &a.Params, &a.Result, &a.UPID, &a.Address, &a.RequestID)
	return a, err
}

// AppendAudit implements Store. It sets ID; a zero At is now.
func (s *sqlStore) AppendAudit(ctx context.Context, a AuditRecord) (AuditRecord, error) {
	rec, err := scanAudit(s.wdb.QueryRowContext(ctx, `
		INSERT INTO audit (at, user_id, user_email, session_id, action, cluster_id, node, vmid, target,
			params, result, upid, address, request_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		RETURNING `+auditColumns,
		s.t(s.stamp(a.At)), a.UserID, a.UserEmail, a.SessionID, a.Action, a.ClusterID, a.Node, a.VMID, a.Target,
		a.Params, a.Result, a.UPID, a.Address, a.RequestID))
	if err != nil {
		return AuditRecord{}, s.fail(err, "append audit record", "append audit record")
	}
	return rec, nil
}

// ListAudit implements Store. A limit of 0 or less means 50; at most 500 come back.
func (s *sqlStore) ListAudit(ctx context.Context, limit int, before int64) ([]AuditRecord, error) {
	limit = clampLimit(limit, 50, 500)
	if before > 0 {
		return queryAll(ctx, s.rdb, "list audit records", scanAudit,
			`SELECT `+auditColumns+` FROM audit WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, limit)
	}
	return queryAll(ctx, s.rdb, "list audit records", scanAudit,
		`SELECT `+auditColumns+` FROM audit ORDER BY id DESC LIMIT $1`, limit)
}
