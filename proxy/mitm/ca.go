// Package mitm is robotsgate's certificate authority for MITM tunnels:
// the CA (made on first start, or given), the leaf certificates it signs
// for each CONNECT host, and the TLS config that presents them.
package mitm

import (
	"container/list"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// CA is robotsgate's own certificate authority, which signs the leaf
// certificates it presents to clients in MITM mode. It is never goproxy's
// built-in CA, whose key is public.
type CA struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertPath string
	KeyPath  string
	// Created says the CA was made by the LoadOrCreate that returned it:
	// clients trust no certificate of it yet.
	Created bool
	certDER []byte
}

// caValidity is how long a CA made by robotsgate is valid.
const caValidity = 10 * 365 * 24 * time.Hour

// Files names a CA's certificate and key files.
type Files struct {
	Cert, Key string
	// Given: the config names them ([tls] ca_cert and ca_key), and they
	// are never made; otherwise they are the state directory's, made on
	// first use.
	Given bool
}

// FilesOf returns the CA files of cfg: [tls] ca_cert and ca_key, or
// StateFiles of its state directory.
func FilesOf(cfg *config.Config) (Files, error) {
	if cfg.TLS.CACert != "" {
		return Files{Cert: cfg.TLS.CACert, Key: cfg.TLS.CAKey, Given: true}, nil
	}
	dir, err := cfg.StateDir()
	if err != nil {
		return Files{}, err
	}
	return StateFiles(dir), nil
}

// StateFiles are the CA files in a state directory: ca.pem and ca-key.pem.
func StateFiles(dir string) Files {
	return Files{Cert: filepath.Join(dir, "ca.pem"), Key: filepath.Join(dir, "ca-key.pem")}
}

// LoadOrCreate loads the CA of f, or, when neither file exists and they
// are a state directory's, creates one: ECDSA P-256, named for robotsgate
// and this host, the key written with mode 0600. It refuses a certificate
// and key that do not match, an expired CA, a certificate that is not a
// CA, and a key file that others can read.
func LoadOrCreate(f Files, now time.Time) (*CA, error) {
	_, certErr := os.Stat(f.Cert)
	_, keyErr := os.Stat(f.Key)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) && !f.Given:
		return createCA(f.Cert, f.Key, now)
	case certErr != nil:
		return nil, fmt.Errorf("CA certificate %s: %w", f.Cert, certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("CA key %s: %w", f.Key, keyErr)
	}
	return loadCA(f.Cert, f.Key, f.Given, now)
}

// maxCAFile bounds what is read of a CA certificate or key file: a
// certificate chain or a key is a few KiB.
const maxCAFile = 1 << 20

// readCAFile reads a CA file: one under state_dir without following a
// symbolic link (robotsgate made it; a link there is someone else's), one
// the config names following links (a Kubernetes Secret's files are
// links); either way only a regular file, within maxCAFile, never waiting
// on a FIFO. It returns the file's mode.
func readCAFile(path string, configured bool) ([]byte, fs.FileMode, error) {
	if configured {
		return statefile.ReadFollowing(path, maxCAFile)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, 0, err
	}
	b, err := statefile.ReadFile(path, maxCAFile)
	return b, fi.Mode(), err
}

func createCA(certPath, keyPath string, now time.Time) (*CA, error) {
	for _, dir := range []string{filepath.Dir(certPath), filepath.Dir(keyPath)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create CA directory: %w", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown host"
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("CA serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "robotsgate CA (" + host + ")", Organization: []string{"robotsgate"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	// The key first, created exclusively with mode 0600: never a moment
	// when it is readable by others.
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("write CA key: %w", err)
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		os.Remove(keyPath)
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, CertPath: certPath, KeyPath: keyPath, Created: true, certDER: der}, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func loadCA(certPath, keyPath string, configured bool, now time.Time) (*CA, error) {
	keyPEM, mode, err := readCAFile(keyPath, configured)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	if mode.Perm()&0o027 != 0 { // read by the group is allowed: a Kubernetes Secret for a pod with an fsGroup is 0440
		return nil, fmt.Errorf("CA key %s is readable by others (mode %#o): run chmod 600 %s", keyPath, mode.Perm(), keyPath)
	}
	certPEM, _, err := readCAFile(certPath, configured)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s and key %s: %w", certPath, keyPath, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate %s: %w", certPath, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s is not a CA certificate (it cannot sign certificates)", certPath)
	}
	if now.After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("CA certificate %s is not valid now (valid %s to %s)", certPath, cert.NotBefore.Format(time.DateOnly), cert.NotAfter.Format(time.DateOnly))
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s cannot sign", keyPath)
	}
	return &CA{Cert: cert, Key: signer, CertPath: certPath, KeyPath: keyPath, certDER: pair.Certificate[0]}, nil
}

// ClientAddr is where a client on this machine reaches a proxy listening
// on listen: a wildcard host (":8080", "0.0.0.0:8080", "[::]:8080") is
// reached on loopback.
func ClientAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return listen
}

// TrustHelp explains how to make clients trust the CA at certPath, for a
// proxy listening on listen.
func TrustHelp(certPath, keyPath, listen string) string {
	listen = ClientAddr(listen)
	return fmt.Sprintf(`robotsgate decrypts HTTPS with its own CA; clients must trust it:

  curl:             curl --cacert %[1]s -x http://%[3]s https://example.com/
  Python requests:  verify="%[1]s" per call, or a bundle of the system's roots and it:
                    cat /etc/ssl/certs/ca-certificates.crt %[1]s > bundle.pem
                    export REQUESTS_CA_BUNDLE=$PWD/bundle.pem (it overrides any Session.verify;
                    pointed at this CA alone, sites reached without the proxy fail to verify)
  OpenSSL, Go:      export SSL_CERT_FILE=$PWD/bundle.pem (the same bundle: it replaces the roots)
  Scrapy:           nothing: it does not verify certificates by default (robotsgate verifies upstream)
  Node.js:          export NODE_EXTRA_CA_CERTS=%[1]s
  Chromium, Chrome: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n robotsgate -i %[1]s
                    (certutil: Debian's libnss3-tools; a browser never started has no
                    database yet: mkdir -p ~/.pki/nssdb && certutil -d sql:$HOME/.pki/nssdb
                    -N --empty-password first; restart the browser. Firefox keeps its own:
                    Settings, Certificates, Import)
  Debian/Ubuntu:    sudo cp %[1]s /usr/local/share/ca-certificates/robotsgate.crt && sudo update-ca-certificates
  Dockerfile:       COPY robotsgate-ca.pem /usr/local/share/ca-certificates/robotsgate.crt
                    RUN update-ca-certificates

The running proxy serves the certificate it signs with, whatever its config:
  curl -o robotsgate-ca.pem http://%[3]s/ca.pem

Anyone with the key (%[2]s) can impersonate any site to these clients: keep it private.
`, certPath, keyPath, listen)
}

// leafValidity is how long a leaf certificate is valid; leaves are
// reissued once less than leafRenew of that is left.
const (
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	leafMax      = 10000
)

// leafCache signs and keeps the leaf certificates presented to clients,
// one per host, so that a host costs one signature, not one per
// connection. All leaves share one ECDSA key, made at start.
type leafCache struct {
	ca  *CA
	key *ecdsa.PrivateKey
	now func() time.Time

	mu    sync.Mutex
	byKey map[string]*list.Element // of *leaf
	lru   *list.List
}

type leaf struct {
	host string
	cert *tls.Certificate
}

func newLeafCache(ca *CA, now func() time.Time) (*leafCache, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	return &leafCache{ca: ca, key: key, now: now, byKey: map[string]*list.Element{}, lru: list.New()}, nil
}

// get returns a leaf certificate for host (a DNS name or an IP address),
// signing one if none is cached or the cached one is near its end.
func (c *leafCache) get(host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[host]; ok {
		l := el.Value.(*leaf)
		if now.Add(leafRenew).Before(l.cert.Leaf.NotAfter) {
			c.lru.MoveToFront(el)
			return l.cert, nil
		}
		c.lru.Remove(el)
		delete(c.byKey, host)
	}
	cert, err := c.sign(host, now)
	if err != nil {
		return nil, err
	}
	c.byKey[host] = c.lru.PushFront(&leaf{host: host, cert: cert})
	for c.lru.Len() > leafMax {
		old := c.lru.Remove(c.lru.Back()).(*leaf)
		delete(c.byKey, old.host)
	}
	return cert, nil
}

func (c *leafCache) sign(host string, now time.Time) (*tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.ca.Cert.NotAfter) {
		notAfter = c.ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host, Organization: []string{"robotsgate"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca.Cert, &c.key.PublicKey, c.ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", host, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.ca.certDER}, PrivateKey: c.key, Leaf: parsed}, nil
}

// PEM returns the CA certificate in PEM: what clients must trust.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.certDER})
}

// A Terminator ends the TLS of MITM tunnels: the client's handshake, with
// a leaf for the CONNECT host signed by the CA.
type Terminator struct {
	ca     *CA
	leaves *leafCache
	config *tls.Config
}

// NewTerminator returns a Terminator for ca, on the clock now, that offers
// clients h2 beside HTTP/1.x by ALPN when http2 is true ([tls] http2).
func NewTerminator(ca *CA, now func() time.Time, http2 bool) (*Terminator, error) {
	leaves, err := newLeafCache(ca, now)
	if err != nil {
		return nil, err
	}
	return &Terminator{ca: ca, leaves: leaves, config: serverConfig(http2)}, nil
}

// CA returns the CA whose leaves the Terminator presents.
func (t *Terminator) CA() *CA { return t.ca }

// Terminate is the MITM handshake with the client on conn, with a leaf for
// host (in its normal form: punycode, no trailing dot), within timeout.
// The connection's ConnectionState().NegotiatedProtocol says whether the
// client chose "h2".
func (t *Terminator) Terminate(conn net.Conn, host string, timeout time.Duration) (*tls.Conn, error) {
	leaf, err := t.leaves.get(host)
	if err != nil {
		return nil, err
	}
	c := tls.Server(&leafConn{Conn: conn, leaf: leaf}, t.config)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// serverConfig is the one TLS config presented to clients in every MITM
// tunnel: h2 first when http2 is true (each stream is decided as an
// HTTP/1.1 request is, its :authority held to the CONNECT host as a Host
// header is), then HTTP/1.x; and the leaf of each connection's CONNECT
// host (not its SNI), which Terminate hands over with the connection.
// Being one config, its session ticket keys are shared by every tunnel
// (and rotated by crypto/tls): a client that reconnects resumes its
// session instead of a full handshake.
func serverConfig(http2 bool) *tls.Config {
	protos := []string{"http/1.1", "http/1.0"} // a client that offers only HTTP/1.0 (curl --http1.0) gets it
	if http2 {
		protos = append([]string{"h2"}, protos...)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if lc, ok := hello.Conn.(*leafConn); ok {
				return lc.leaf, nil
			}
			return nil, errors.New("no CONNECT host for this connection")
		},
	}
}

// leafConn is a client connection in a MITM tunnel with the leaf for its
// CONNECT host, for the shared config's GetCertificate.
type leafConn struct {
	net.Conn
	leaf *tls.Certificate
}
