package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/robotsgate/robotsgate/robots"
)

// serveAdmin answers requests to the proxy itself: /healthz and the
// robots.txt cache.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
		s.metrics.handler.ServeHTTP(w, r)
	case r.URL.Path == "/robots" && r.Method == http.MethodGet:
		s.serveRobotsEntry(w, r)
	case r.URL.Path == "/robots/purge" && r.Method == http.MethodPost:
		p := s.pol.Load()
		authed := false
		if p.auth != nil {
			_, authed = p.auth.check(r, true)
		}
		if c := clientAddr(r); !c.IsLoopback() && !authed {
			http.Error(w, "robotsgate: purge is only for loopback clients and authenticated users", http.StatusForbidden)
			return
		}
		o, err := robots.ParseOrigin(r.URL.Query().Get("origin"))
		if err != nil {
			http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !s.cache.Purge(o) {
			http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "purged %s\n", o)
	default:
		http.NotFound(w, r)
	}
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
	Agents     []string `json:"agents"`
	Line       int      `json:"line"`
	Rules      int      `json:"rules"`
	CrawlDelay *float64 `json:"crawl_delay"`
}

func (s *Server) serveRobotsEntry(w http.ResponseWriter, r *http.Request) {
	o, err := robots.ParseOrigin(r.URL.Query().Get("origin"))
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
			for _, g := range en.Rules.Groups() {
				ge := groupEntry{Agents: g.Agents, Line: g.Line, Rules: g.Rules}
				if g.CrawlDelay >= 0 {
					cd := g.CrawlDelay
					ge.CrawlDelay = &cd
				}
				e.Groups = append(e.Groups, ge)
			}
		}
	} else {
		e.Outcome, e.Status = string(robots.Unreachable), a.LastStatus
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(e)
}
