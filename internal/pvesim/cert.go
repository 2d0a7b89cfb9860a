package pvesim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// nodeCert is a node's self-signed certificate, like pveproxy's pve-ssl.pem
// (which PVE signs with the cluster CA; see the package doc).
type nodeCert struct {
	tls         tls.Certificate
	pem         []byte
	fingerprint string // SHA-256 of the DER, "AB:CD:..."
}

func newNodeCert(name, ip string) (*nodeCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:         name + ".pvesim.local",
			Organization:       []string{"PVE Cluster Node"},
			OrganizationalUnit: []string{"PVE Cluster Node"},
		},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.AddDate(2, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{name, name + ".pvesim.local", "localhost"},
		IPAddresses: []net.IP{net.ParseIP(ip), net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return &nodeCert{
		tls:         tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		pem:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		fingerprint: Fingerprint(der),
	}, nil
}

// Fingerprint renders the SHA-256 of a DER certificate as PVE shows it:
// upper-case hex pairs joined by colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}
