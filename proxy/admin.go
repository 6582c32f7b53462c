package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// serveAdmin answers requests to the proxy itself: /healthz, /metrics and
// the robots.txt cache; the cache only to the clients adminAllowed admits.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" && r.URL.Path != "/metrics" && !sameOrigin(r) {
		http.Error(w, "robotsgate: the operator endpoints answer no request sent by a page of another site", http.StatusForbidden)
		return
	}
	switch {
	case r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
		if s.cluster != nil { // a detail: the instance is healthy without Redis
			io.WriteString(w, clusterLine(s.cluster.Status()))
		}
	case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
		s.metrics.handler.ServeHTTP(w, r)
	case r.URL.Path == "/robots" && r.Method == http.MethodGet:
		if _, ok := s.pol.Load().adminAllowed(r, openWithoutAuth); !ok {
			adminForbidden(w)
			return
		}
		s.serveRobotsEntry(w, r)
	case r.URL.Path == "/robots/purge" && r.Method == http.MethodPost:
		if _, ok := s.pol.Load().adminAllowed(r, loopbackOrUser); !ok {
			adminForbidden(w)
			return
		}
		o, err := fetch.ParseOrigin(r.URL.Query().Get("origin"))
		if err != nil {
			http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
			return
		}
		held := s.cache.Purge(o)
		if s.cluster != nil { // the other instances forget it too
			s.cluster.PublishPurge(r.Context(), o)
		}
		if !held {
			http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "purged %s\n", o)
	case r.URL.Path == "/status" || r.URL.Path == "/status.json":
		if s.statusAllowed(w, r) {
			s.serveStatus(w, r)
		}
	case r.URL.Path == "/v1/decide":
		user, ok := s.pol.Load().adminAllowed(r, loopbackOrUser)
		if !ok {
			adminForbidden(w)
			return
		}
		s.serveDecide(w, r, user)
	default:
		http.NotFound(w, r)
	}
}

// statusAllowed applies the operator surface's access rule to the status
// page and its JSON, answering a refused request: with [auth] users, 401
// with a Basic challenge, so that a browser asks for the login.
func (s *Server) statusAllowed(w http.ResponseWriter, r *http.Request) bool {
	p := s.pol.Load()
	if _, ok := p.adminAllowed(r, loopbackOrUser); ok {
		return true
	}
	if p.auth != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="robotsgate", charset="UTF-8"`)
		http.Error(w, "robotsgate: log in as an [auth] user", http.StatusUnauthorized)
		return false
	}
	adminForbidden(w)
	return false
}

// clusterLine describes the fleet's Redis for /healthz.
func clusterLine(st cluster.Status) string {
	if st.Up {
		return fmt.Sprintf("cluster: redis up (%d errors since start)\n", st.Errors)
	}
	return fmt.Sprintf("cluster: redis down since %s, going on alone (%d errors since start; last: %s)\n",
		st.Since.UTC().Format(time.RFC3339), st.Errors, st.LastError)
}

// adminAccess says who may use an endpoint of the proxy itself.
type adminAccess int

const (
	// openWithoutAuth: anyone when [auth] has no users; otherwise loopback
	// clients and authenticated users (GET /robots).
	openWithoutAuth adminAccess = iota
	// loopbackOrUser: loopback clients and authenticated users only, with
	// or without [auth] users (POST /robots/purge and the operator surface).
	loopbackOrUser
)

// adminAllowed reports whether r may use an endpoint of the proxy itself
// whose rule is access, and the [auth] user it authenticated as, if any.
// Loopback clients may, when they name the proxy by its own address
// (localHost); one that sends credentials is checked like any other, so
// that its user's [[agents]] rules apply (and wrong ones are refused).
// Others need the Basic credentials of an [auth] user, in
// Authorization or Proxy-Authorization, checked (and rate-limited) as
// proxy requests are. The client is the connection's peer: behind a
// reverse proxy on the same host, every client looks like loopback.
func (p *Policy) adminAllowed(r *http.Request, access adminAccess) (string, bool) {
	if p.auth != nil && (r.Header.Get("Authorization") != "" || r.Header.Get("Proxy-Authorization") != "") {
		return p.auth.CheckRequest(r, true)
	}
	if clientAddr(r).IsLoopback() && p.localHost(r) {
		return "", true
	}
	if p.auth == nil {
		return "", access == openWithoutAuth
	}
	return "", false
}

// localHost reports whether a request names the proxy by its own address:
// its Host is an IP address or "localhost" (any port), or the listen host.
// Only such a request is let in on the loopback rule: a page that a local
// browser loaded from a rebound DNS name sends that name, and gets no
// further than the credentials rule.
func (p *Policy) localHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	listenHost, _, _ := net.SplitHostPort(p.cfg.Listen)
	_, err := netip.ParseAddr(host)
	return err == nil || strings.EqualFold(host, "localhost") || strings.EqualFold(host, listenHost)
}

// sameOrigin reports whether a request to the proxy itself carries no
// Origin of another site: a page posting across sites does.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// adminForbidden is the 403 answer to a client adminAllowed refused.
func adminForbidden(w http.ResponseWriter) {
	http.Error(w, "robotsgate: only for loopback clients and authenticated users", http.StatusForbidden)
}

// robotsEntry is the JSON of GET /robots?origin=O.
type robotsEntry struct {
	Origin    string       `json:"origin"`
	RobotsURL string       `json:"robots_url"`
	Outcome   string       `json:"outcome"`
	Status    int          `json:"status"`
	FetchedAt *time.Time   `json:"fetched_at"`
	Expires   *time.Time   `json:"expires"`
	Stale     bool         `json:"stale"`
	LastError string       `json:"last_error"`
	RetryAt   *time.Time   `json:"retry_at"`
	Bytes     int          `json:"bytes"`
	Truncated bool         `json:"truncated"`
	Sitemaps  []string     `json:"sitemaps"`
	Groups    []groupEntry `json:"groups"`
}

type groupEntry struct {
	Agents     []string        `json:"agents"`
	Line       int             `json:"line"`
	Rules      int             `json:"rules"`
	CrawlDelay *float64        `json:"crawl_delay"`
	Usage      []statementJSON `json:"usage"` // its Content-Usage and Content-Signal statements, and those before any group
}

func (s *Server) serveRobotsEntry(w http.ResponseWriter, r *http.Request) {
	o, err := fetch.ParseOrigin(r.URL.Query().Get("origin"))
	if err != nil {
		http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
		return
	}
	a, ok := s.cache.Peek(o)
	if !ok {
		http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
		return
	}
	e := robotsEntry{Origin: o.String(), RobotsURL: o.RobotsURL(), Stale: a.Stale, LastError: a.LastError, Groups: []groupEntry{}, Sitemaps: []string{}}
	if !a.RetryAt.IsZero() {
		e.RetryAt = &a.RetryAt
	}
	if en := a.Entry; en != nil {
		e.Outcome, e.Status, e.Truncated = string(en.Outcome), en.Status, en.Truncated
		e.FetchedAt, e.Expires = &en.FetchedAt, &en.Expires
		e.Bytes = en.Rules.Size()
		if en.Rules != nil {
			e.Sitemaps = append(e.Sitemaps, en.Rules.Sitemaps()...)
			statements := en.Rules.Statements()
			for i, g := range en.Rules.Groups() {
				ge := groupEntry{Agents: g.Agents, Line: g.Line, Rules: g.Rules, Usage: []statementJSON{}}
				for _, st := range statements {
					if st.Group == i || st.Group < 0 {
						ge.Usage = append(ge.Usage, statementJSONOf(&st))
					}
				}
				if g.CrawlDelay >= 0 {
					cd := g.CrawlDelay
					ge.CrawlDelay = &cd
				}
				e.Groups = append(e.Groups, ge)
			}
		}
	} else {
		e.Outcome, e.Status = string(fetch.Unreachable), a.LastStatus
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(e)
}
