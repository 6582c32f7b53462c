package upstream

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/internal/rotate"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage/source"
)

// OptionsFor returns the transport Options of cfg's [upstream] and
// [limits]; next is upstream.proxy, parsed. Lookup, Conns and Self are
// the caller's to add.
func OptionsFor(cfg *config.Config, next *url.URL) Options {
	return Options{
		Timeout:        cfg.Upstream.Timeout,
		BlockPrivate:   cfg.Upstream.BlockPrivate,
		Proxy:          next,
		CA:             cfg.Upstream.CA,
		MaxIdle:        cfg.Limits.MaxConnections,
		MaxHeaderBytes: cfg.Limits.MaxHeaderBytes,
	}
}

// FetchOptions are how robotsgate's own fetches (robots.txt, the usage
// files, each redirect hop of either) reach origins: NewFetchTransport's.
type FetchOptions struct {
	// Transport is the proxy's: robots.txt is fetched with its dialer
	// (block_private, upstream.proxy) and trusts the same roots.
	Transport *http.Transport
	Proxy     *url.URL // upstream.proxy; nil: direct
	// Guard checks every fetch and redirect hop before it is sent, to an
	// origin or to the next hop (block_private, robotsgate's own
	// address); nil: none (check, which applies no block_private).
	Guard *Guard
	// Signer, if set, returns the signer of every fetch and redirect hop
	// ([identity]); nil from it: unsigned.
	Signer func() *identity.Signer
	// OnSign, if set, counts each signed fetch.
	OnSign func()
}

// FetchTransport sends robotsgate's own fetches: each request is checked
// by the guard first (one refused is neither signed nor sent), then
// signed, then sent on a transport of fetch's (fetch.NewTransport) with
// the proxy's dialer, roots and next hop, rotated as the proxy's own
// transport is (a fetch from each of a crawl's many origins would
// otherwise leave a kilobyte behind). It is safe for concurrent use.
type FetchTransport struct {
	rt      http.RoundTripper
	rotated *rotate.Transport
}

// NewFetchTransport returns the FetchTransport of o.
func NewFetchTransport(o FetchOptions) *FetchTransport {
	rotated := rotate.New(fetch.NewTransport(fetch.TransportOptions{
		Proxy:       o.Proxy,
		RootCAs:     o.Transport.TLSClientConfig.RootCAs,
		DialContext: o.Transport.DialContext,
	}), 0)
	var tr http.RoundTripper = rotated
	if o.Signer != nil { // every fetch and redirect hop signed, as forwarded requests are
		tr = &identity.Transport{Base: tr, Signer: o.Signer, OnSign: o.OnSign}
	}
	// Outermost: a hop refused is neither signed nor sent. The fetcher
	// follows redirects itself, one request each, so every hop is checked.
	return &FetchTransport{rt: o.Guard.Transport(tr), rotated: rotated}
}

// RoundTrip checks, signs and sends req.
func (t *FetchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.rt.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the transport
// under it, and those that go idle later.
func (t *FetchTransport) CloseIdleConnections() { t.rotated.CloseIdleConnections() }

// RobotsOptions are what NewRobotsCache and NewUsageFiles need besides
// [robots].
type RobotsOptions struct {
	// Transport sends every fetch and redirect hop: a FetchTransport, or
	// a RoundTripper that hands each request to the one in force (the
	// server's, whose [upstream] a reload may replace). Required.
	Transport http.RoundTripper
	Version   string // replaces "VERSION" in fetch_user_agent
	Now       func() time.Time
	Parse     []robots.Option // how fetched files are parsed
	// OnFetch, Store and OnBadRecord are fetch.CacheOptions'; each may be
	// nil.
	OnFetch     func(fetch.Origin, *fetch.Result)
	Store       fetch.Store
	OnBadRecord func(fetch.Origin, error)
	// Keeper is handed every body of a site's file read, robots.txt and
	// usage files alike (fetch.CacheOptions.Keeper); nil: none.
	Keeper evidence.Keeper
}

// NewRobotsCache builds the robots.txt fetcher and cache of rc, the
// [robots] table.
func NewRobotsCache(rc *config.RobotsConfig, o RobotsOptions) (*fetch.Cache, error) {
	return fetch.NewCache(fetch.CacheOptions{
		Fetcher:          robotsFetcher(rc, o),
		Parse:            o.Parse,
		TTL:              rc.CacheTTL,
		UnreachableLimit: rc.UnreachableLimit,
		RetryAfter:       rc.RetryAfter,
		MaxBytes:         rc.CacheMaxBytes,
		MaxFetches:       rc.MaxFetches,
		Now:              o.Now,
		OnFetch:          o.OnFetch,
		OnBadRecord:      o.OnBadRecord,
		Store:            o.Store,
		Keeper:           o.Keeper,
		PeerWait:         rc.FetchTimeout + 2*time.Second,
	})
}

// NewUsageFiles builds the fetcher and caches of the files besides
// robots.txt that sites state usage preferences in (tdmrep.json, RSL
// licences), fetched and kept as robots.txt is under rc, shared through
// store (nil: this process alone); onFetch, if not nil, hears of each
// fetch (fetch.FilesOptions). The kinds held are those the usage sources
// read (source.FileKinds).
func NewUsageFiles(rc *config.RobotsConfig, o RobotsOptions, store fetch.DocStore, onFetch func(url string, outcome fetch.Outcome, problem string)) *fetch.Files {
	return fetch.NewFiles(fetch.FilesOptions{
		Fetcher:    robotsFetcher(rc, o),
		Kinds:      source.FileKinds(o.Parse...),
		TTL:        rc.CacheTTL,
		RetryAfter: rc.RetryAfter,
		MaxBytes:   max(rc.CacheMaxBytes/32, 4<<20), // of each kind: as the robots.txt cache's hot tier
		MaxFetches: max(rc.MaxFetches/4, 1),         // of each kind: what is left of robots.txt's bound
		Now:        o.Now,
		OnFetch:    onFetch,
		Store:      store,
		Keeper:     o.Keeper,
	})
}

// robotsFetcher returns a fetcher of robots.txt, and of the other files
// sites publish about their content, for rc.
func robotsFetcher(rc *config.RobotsConfig, o RobotsOptions) *fetch.Fetcher {
	redirects := rc.MaxRedirects
	if redirects == 0 {
		redirects = -1 // FetcherOptions: 0 is the default, negative is none
	}
	return fetch.NewFetcher(fetch.FetcherOptions{
		Transport:          o.Transport,
		UserAgent:          strings.ReplaceAll(rc.FetchUserAgent, "VERSION", o.Version),
		MaxBytes:           rc.MaxBytes,
		MaxRedirects:       redirects,
		Timeout:            rc.FetchTimeout,
		AuthErrorsDisallow: rc.AuthErrors == "disallow",
		Now:                o.Now,
	})
}
