package seal

// NotifySecretAAD binds a notification target's secret (an HMAC key, a token, an
// SMTP password) to the target's id (internal/notify, docs/security.md item 44).
func NotifySecretAAD(targetID string) []byte {
	return append([]byte("vmgate/notify-target-secret/v1\x00"), targetID...)
}
