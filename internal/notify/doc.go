// Package notify tells people when something happens, and loses nothing on the
// way (issue 24, docs/decisions/0115–0117).
//
//   - Targets are where notifications go (webhook, Slack, Teams, ntfy, Gotify,
//     SMTP): admins manage them through Service; their secrets are sealed with
//     the key file and never returned (docs/security.md item 44).
//   - Events are written to an outbox in the store, in the transaction of the
//     change that causes them where there is one (store.WithOutbox): a task's
//     end, an operation's end, an audit record. The constructors here (TaskFailed,
//     OperationFinished, ...) are what the use cases put in it.
//   - Sender fans each event out to the targets whose filters match, and sends
//     each target's deliveries in event order, one message at a time, under a
//     lease, at least once, with the event id in a header; it retries with
//     exponential backoff and jitter for 24 h, then dead-letters; a target's
//     rate limit folds a burst into one digest.
//   - Health watches each cluster (one light PVE read every 15 s, one replica at
//     a time under a lease) and writes node and cluster events on changes.
package notify
