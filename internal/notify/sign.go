package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a webhook's signature: "t=<unix seconds>,v1=<hex>",
// where v1 is HMAC-SHA256 keyed with the target's secret over the timestamp, a
// dot and the body exactly as sent (docs/security.md item 44). A receiver
// recomputes it, compares in constant time, and refuses a timestamp outside
// its replay window (ReplayWindow): a captured request cannot be replayed
// later, and the event id header lets it drop the repeats vmgate itself sends.
const SignatureHeader = "X-Vmgate-Signature"

// EventIDHeader carries the event id (a digest's: "digest-<first>-<last>"; its
// body lists every event id).
const EventIDHeader = "X-Vmgate-Event-Id"

// ReplayWindow is how far from its own clock a receiver should accept a
// signature's timestamp.
const ReplayWindow = 5 * time.Minute

// Sign returns the signature header's value of body sent at at.
func Sign(secret []byte, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a signature header's value against body at now: the MAC, and
// the timestamp within window of now. It is what a receiver written in Go
// does; docs/notifications.md shows the same in a shell.
func Verify(secret []byte, header string, body []byte, now time.Time, window time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(secret, ts, body)) {
		return errors.New("signature does not match")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return errors.New("signature outside the replay window")
	}
	return nil
}
