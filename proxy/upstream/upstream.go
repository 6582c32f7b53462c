// Package upstream is how robotsgate reaches origins: a dialer that
// refuses private addresses (checked on the address dialled, after DNS)
// and robotsgate's own listener, and a Transport tuned for a proxy that
// never reads the environment's proxy variables.
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// ErrPrivateAddress is wrapped by a dial's error, and by a fetch's that
// the Guard refused, when it would reach a loopback, private, link-local
// or unspecified address under block_private, or robotsgate itself: it
// is fetch.ErrPrivateAddress, wrapped by a *fetch.AddressError.
var ErrPrivateAddress = fetch.ErrPrivateAddress

// sharedSpace is 100.64.0.0/10 (RFC 6598), carrier-grade NAT and the
// like: not on the Internet, often inside a provider's network.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// thisNetwork is 0.0.0.0/8, which some systems route to the host itself.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// reserved is 240.0.0.0/4 (RFC 1112, "future use"), with the limited
// broadcast address 255.255.255.255 at its end: never a public site.
var reserved = netip.MustParsePrefix("240.0.0.0/4")

// IsPrivate reports whether a is an address block_private refuses:
// loopback, private (RFC 1918, ULA), link-local, unspecified, and the
// other ranges that never belong to a public site (shared address space,
// "this network", multicast). An IPv6 address that embeds an IPv4 address
// a translator or tunnel would deliver to (NAT64, 6to4, IPv4-compatible)
// is judged by that IPv4 address too.
func IsPrivate(a netip.Addr) bool {
	a = a.Unmap()
	if privateRange(a) {
		return true
	}
	v4, ok := embeddedIPv4(a)
	return ok && privateRange(v4)
}

func privateRange(a netip.Addr) bool {
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() ||
		sharedSpace.Contains(a) || thisNetwork.Contains(a) || reserved.Contains(a)
}

// IPv6 prefixes whose addresses carry an IPv4 address.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056
	v4Compatible   = netip.MustParsePrefix("::/96")           // RFC 4291 2.5.5.1, deprecated
	v4Translated   = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 6145 (SIIT)
)

// embeddedIPv4 returns the IPv4 address an IPv6 address delivers to
// through NAT64 (the well-known prefix, or the local-use /48, whose
// operators may embed at /48 or /96), 6to4, or the IPv4-compatible or
// IPv4-translated forms; false for any other address.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case nat64WellKnown.Contains(a), v4Compatible.Contains(a), v4Translated.Contains(a):
		return last, true
	case nat64Local.Contains(a):
		// RFC 6052 section 2.2: under a /96 the IPv4 address is the last
		// four bytes (and bytes 6-11 are zero); under the /48 itself it is
		// bytes 6-7 and 9-10 (byte 8 is reserved).
		if b[6]|b[7]|b[8]|b[9]|b[10]|b[11] == 0 {
			return last, true
		}
		return netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// refuseAddrs returns why host's addresses ips may not be dialled on port,
// or nil: one is private (with block), or is robotsgate's own listener.
func refuseAddrs(ips []netip.Addr, host, port string, block bool, self *Self) error {
	for _, ip := range ips {
		switch {
		case block && IsPrivate(ip):
			return &fetch.AddressError{Host: host, Addr: ip.String()}
		case self.is(ip, port):
			return &fetch.AddressError{Host: net.JoinHostPort(ip.String(), port), Self: true}
		}
	}
	return nil
}

// Self is the addresses robotsgate listens on, which no proxied
// request, tunnel or robots.txt fetch may dial, block_private or not: a
// request through the proxy to the proxy itself would arrive as a
// loopback client, which the operator endpoints trust. A nil *Self knows
// none.
type Self struct{ p atomic.Pointer[selfSet] }

type selfSet struct {
	port     uint16
	any      bool // listening on every address (0.0.0.0 or ::)
	loopback bool // listening on a loopback address
	ips      map[netip.Addr]bool
}

// Listen records the listener's address; on an unspecified address, the
// machine's own addresses all count.
func (s *Self) Listen(a net.Addr) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return
	}
	ip := ap.Addr().Unmap()
	set := &selfSet{port: ap.Port(), any: ip.IsUnspecified(), loopback: ip.IsLoopback(), ips: map[netip.Addr]bool{ip: true}}
	if set.any {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if pfx, err := netip.ParsePrefix(a.String()); err == nil {
					set.ips[pfx.Addr().Unmap()] = true
				}
			}
		}
	}
	s.p.Store(set)
}

// IsOrigin reports whether o names robotsgate's own listener: by address,
// or as "localhost". (Other names that resolve to it are caught when they
// are dialled.)
func (s *Self) IsOrigin(o fetch.Origin) bool {
	if s == nil || s.p.Load() == nil || s.p.Load().port != uint16(o.Port) {
		return false // the common case: no parsing
	}
	if ip, err := netip.ParseAddr(o.Host); err == nil {
		return s.isAddr(ip, uint16(o.Port))
	}
	return o.Host == "localhost" && s.isAddr(netip.IPv6Loopback(), uint16(o.Port))
}

// is reports whether ip:port (as a dialer has them) reaches robotsgate's
// own listener; see isAddr.
func (s *Self) is(ip netip.Addr, port string) bool {
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && s.isAddr(ip, uint16(p))
}

// isAddr reports whether ip:port reaches robotsgate's own listener: its
// address, an unspecified one, or any loopback address when it listens on
// loopback or everywhere.
func (s *Self) isAddr(ip netip.Addr, port uint16) bool {
	if s == nil {
		return false
	}
	set := s.p.Load()
	if set == nil || port != set.port {
		return false
	}
	ip = ip.Unmap()
	switch {
	case set.ips[ip], ip.IsUnspecified():
		return true
	case ip.IsLoopback():
		return set.any || set.loopback
	}
	return false
}

// LookupFunc resolves a host name, as net.Resolver.LookupNetIP.
type LookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// guardedDialer dials TCP, resolving names with lookup, and, when block is
// set, refuses a host any of whose addresses is private: the check is on
// the addresses actually dialled, after DNS, so a name that resolves inward
// is caught even if it did not at step 2. exempt is the one host:port
// allowed anyway (the upstream proxy).
func guardedDialer(timeout time.Duration, block bool, exempt string, lookup LookupFunc, set *Conns, self *Self) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if block {
		// A last check on the socket's own address, whatever dialled it.
		d.Control = func(network, address string, _ syscall.RawConn) error {
			if ap, err := netip.ParseAddrPort(address); err == nil && IsPrivate(ap.Addr()) {
				return fmt.Errorf("dial %s: %w", address, &fetch.AddressError{Host: ap.Addr().String()})
			}
			return nil
		}
	}
	open := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if exempt != "" && addr == exempt {
			c, err := open.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return set.add(c)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else {
			lctx, cancel := context.WithTimeout(ctx, timeout)
			ips, err = lookup(lctx, "ip", host)
			cancel()
			if err != nil {
				return nil, &net.OpError{Op: "dial", Net: network, Err: err}
			}
		}
		if err := refuseAddrs(ips, host, port, block, self); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		var firstErr error
		for _, ip := range ips {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			if err == nil {
				return set.add(c)
			}
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		if firstErr == nil {
			firstErr = &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
		}
		return nil, firstErr
	}
}

// ProxyURL parses upstream.proxy: an http:// or https:// URL,
// credentials in it sent to the next hop.
func ProxyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := "(unparsable)"
		if err == nil {
			shown = u.Redacted()
		}
		return nil, fmt.Errorf("%q is not an http:// or https:// proxy URL", shown)
	}
	return u, nil
}

// ReadPool returns the system roots plus the certificates of a PEM file
// (none when path is "").
func ReadPool(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if path == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// Options configure a Transport.
type Options struct {
	Timeout      time.Duration // dial, TLS handshake and response headers
	BlockPrivate bool          // refuse private addresses (block_private)
	Proxy        *url.URL      // the next hop (upstream.proxy); nil: direct
	CA           string        // a PEM file of extra roots (upstream.ca); "": the system's only
	// Roots, if set, are the roots TLS is verified with, as ReadPool
	// returned them for CA (so that what was read once is what is
	// trusted); nil: ReadPool(CA).
	Roots          *x509.CertPool
	MaxIdle        int        // idle connections kept in all
	MaxHeaderBytes int        // a response's header block, at least 64 KiB
	Lookup         LookupFunc // resolves names
	Conns          *Conns     // tracks every connection dialled; nil: none
	Self           *Self      // robotsgate's own listener, never dialled; nil: unknown
}

// NewTransport returns the transport for proxied requests, tuned for a
// proxy: many idle connections per origin (Go's default of two costs a
// proxy most of its throughput), the [upstream] timeouts, TLS verified
// with the system roots and upstream.ca, upstream.proxy or a direct
// connection, and never the environment's proxy variables, which would
// point back at robotsgate. Compression is left to the client and origin.
func NewTransport(o Options) (*http.Transport, error) {
	pool := o.Roots
	if pool == nil {
		var err error
		if pool, err = ReadPool(o.CA); err != nil {
			return nil, err
		}
	}
	exempt := ""
	if u := o.Proxy; u != nil {
		exempt = u.Host
		if u.Port() == "" {
			exempt = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
	}
	t := &http.Transport{
		DialContext:            guardedDialer(o.Timeout, o.BlockPrivate, exempt, o.Lookup, o.Conns, o.Self),
		TLSClientConfig:        &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    o.Timeout,
		ResponseHeaderTimeout:  o.Timeout,
		ExpectContinueTimeout:  time.Second,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           o.MaxIdle,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: int64(max(o.MaxHeaderBytes, 64<<10)),
		DisableCompression:     true,
	}
	if u := o.Proxy; u != nil {
		t.Proxy = http.ProxyURL(u)
	}
	return t, nil
}

// Conns tracks open connections so that they can all be closed at once
// (a shutdown's drain time is up). A nil *Conns tracks nothing.
type Conns struct {
	mu     sync.Mutex
	m      map[*setConn]struct{}
	closed bool // CloseAll was called: no connection is made after it
}

// ErrClosed is why a connection is refused once CloseAll was called:
// net/http's Transport resends a GET whose kept-alive connection closed
// before its answer, and a request cut by a shutdown must not be sent
// again on a new one.
var ErrClosed = errors.New("shutting down: no new upstream connection")

// NewConns returns an empty set.
func NewConns() *Conns { return &Conns{m: map[*setConn]struct{}{}} }

type setConn struct {
	net.Conn
	set  *Conns
	once sync.Once
}

func (s *Conns) add(c net.Conn) (net.Conn, error) {
	if s == nil {
		return c, nil
	}
	sc := &setConn{Conn: c, set: s}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	s.m[sc] = struct{}{}
	s.mu.Unlock()
	return sc, nil
}

func (c *setConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseAll closes every connection in the set, and refuses every
// connection dialled after it (ErrClosed). The set is copied first: each
// Close removes itself from it.
func (s *Conns) CloseAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	conns := make([]*setConn, 0, len(s.m))
	for c := range s.m {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// A PrivateCache remembers for a while whether a host resolves to a
// private address, so that deciding it costs a DNS lookup per host, not
// per request. It is a first line only: the dialer checks every address
// it dials.
type PrivateCache struct {
	resolve LookupFunc
	now     func() time.Time
	mu      sync.Mutex
	hosts   map[string]privateEntry
}

type privateEntry struct {
	private bool
	expires time.Time
}

const (
	privateTTL     = 30 * time.Second
	privateMaxSize = 10000
)

// NewPrivateCache returns a PrivateCache resolving with lookup, on the
// clock now.
func NewPrivateCache(lookup LookupFunc, now func() time.Time) *PrivateCache {
	return &PrivateCache{resolve: lookup, now: now, hosts: map[string]privateEntry{}}
}

// Private reports whether host (a name or an IP address) is, or resolves
// to, a private address; a name not remembered is resolved within
// timeout. A host that does not resolve is left to the fetch and the
// dial, which fail on their own.
func (c *PrivateCache) Private(ctx context.Context, host string, timeout time.Duration) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return IsPrivate(a)
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.hosts[host]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.private
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := c.resolve(ctx, "ip", host)
	if err != nil {
		return false
	}
	private := false
	for _, a := range addrs {
		private = private || IsPrivate(a)
	}
	c.mu.Lock()
	if len(c.hosts) >= privateMaxSize {
		clear(c.hosts)
	}
	c.hosts[host] = privateEntry{private: private, expires: now.Add(privateTTL)}
	c.mu.Unlock()
	return private
}
