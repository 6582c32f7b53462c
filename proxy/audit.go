package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/robots"
)

// Audit writes one JSON object per line for every decision that is not a
// plain allow (and for allowed ones when asked): DESIGN.md's audit log. It
// never shares its stream with operational logs, and a failed write is
// reported there, never turning a block into a pass.
type Audit struct {
	out io.Writer    // stdout when path is ""
	log *slog.Logger // operational log, for write failures
	now func() time.Time

	mu sync.Mutex
	f  *os.File
	h  slog.Handler
}

// newAudit opens the audit log: path appended to, or out when path is "".
func newAudit(path string, out io.Writer, log *slog.Logger, now func() time.Time) (*Audit, error) {
	a := &Audit{out: out, log: log, now: now}
	if err := a.Open(path); err != nil {
		return nil, err
	}
	return a, nil
}

// Open (re)opens the audit log at path ("" = the Audit's stdout), closing
// the file it wrote to before: after log rotation, or when audit.file
// changes on reload. It holds the lock that writes take, so every record
// goes whole to the old file or the new one; on failure the old one stays.
func (a *Audit) Open(path string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var f *os.File
	w := a.out
	if path != "" {
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err != nil {
			return fmt.Errorf("open audit log: %w", err)
		}
		w = f
	}
	if a.f != nil {
		a.f.Close()
	}
	a.f, a.h = f, slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: utcMillis})
	return nil
}

// auditTimeFormat is RFC 3339 with milliseconds.
const auditTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// utcMillis writes the record's time in RFC 3339, UTC, with milliseconds
// ("2026-11-23T08:41:38.637Z"), which SIEMs and jq's fromdateiso8601-style
// tools parse.
func utcMillis(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.String(slog.TimeKey, a.Value.Time().UTC().Format(auditTimeFormat))
	}
	return a
}

// Close closes the audit file, if any.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// auditRecord is one line of the audit log; every field is always written.
type auditRecord struct {
	msg       string // blocked, would-block, unreachable, override, paced, allowed, refused
	client    netip.Addr
	user      string
	method    string
	url       string
	path      string
	origin    string
	userAgent string
	agents    []string
	token     string
	purposes  []string
	robotsURL string
	rule      string
	line      int
	status    int
	decision  string
	reason    string
}

// write writes one record; a failure is reported on the operational log.
func (a *Audit) write(r *auditRecord, t time.Time) {
	level := slog.LevelInfo
	if r.msg != "allowed" {
		level = slog.LevelWarn
	}
	rec := slog.NewRecord(t, level, r.msg, 0)
	client := ""
	if r.client.IsValid() {
		client = r.client.Unmap().String()
	}
	agents := r.agents
	if agents == nil {
		agents = []string{}
	}
	rec.AddAttrs(
		slog.String("client", client),
		slog.String("user", r.user),
		slog.String("method", r.method),
		slog.String("url", r.url),
		slog.String("path", r.path),
		slog.String("origin", r.origin),
		slog.String("user_agent", r.userAgent),
		slog.Any("agent", agents),
		slog.String("token", r.token),
		slog.Any("purpose", r.purposes),
		slog.String("robots_url", r.robotsURL),
		slog.String("rule", r.rule),
		slog.Int("line", r.line),
		slog.Int("status", r.status),
		slog.String("decision", r.decision),
		slog.String("reason", r.reason),
	)
	a.mu.Lock()
	err := a.h.Handle(context.Background(), rec)
	a.mu.Unlock()
	if err != nil {
		a.log.Error("audit log write failed", "err", err, "msg", r.msg, "url", r.url)
	}
}

// record writes the audit line for a decision, when it is to be logged.
func (s *Server) record(p *Policy, r *http.Request, d *Decision, status int, connectHost string) {
	msg := auditMsg(d)
	if msg == "allowed" && !p.cfg.Audit.LogAllowed {
		return
	}
	rec := &auditRecord{
		msg:       msg,
		user:      d.User,
		client:    clientAddr(r),
		method:    r.Method,
		url:       displayURL(r),
		userAgent: r.Header.Get("User-Agent"),
		agents:    d.Agents.Slice(),
		token:     d.Token,
		purposes:  d.Purposes.Names(),
		robotsURL: d.RobotsURL(),
		rule:      d.Verdict.Rule(),
		line:      d.Verdict.Line,
		status:    status,
		decision:  d.Action,
		reason:    d.Reason,
	}
	if d.Refusal.Statement != "" {
		rec.rule, rec.line = d.Refusal.Rule(), d.Refusal.Line
	}
	if !d.Origin.IsZero() {
		rec.origin = d.Origin.String()
		if d.Target != "" {
			// Canonical: no userinfo, no default port, the decided host,
			// https:// inside a MITM tunnel.
			rec.url, rec.path = d.Origin.URL(d.Target), robots.Normalize(d.Target)
		}
	}
	if connectHost != "" {
		rec.url = connectHost
	}
	t := s.audit.now() // one time for the log line and its copy on /status.json
	s.audit.write(rec, t)
	if msg != "allowed" {
		s.status.remember(rec.marshal(t))
	}
}

// marshal returns the record as the audit log writes it, for /status.json.
func (r *auditRecord) marshal(t time.Time) json.RawMessage {
	level := "WARN"
	if r.msg == "allowed" {
		level = "INFO"
	}
	client := ""
	if r.client.IsValid() {
		client = r.client.Unmap().String()
	}
	agents, purposes := r.agents, r.purposes
	if agents == nil {
		agents = []string{}
	}
	if purposes == nil {
		purposes = []string{}
	}
	b, _ := json.Marshal(struct {
		Time      string   `json:"time"`
		Level     string   `json:"level"`
		Msg       string   `json:"msg"`
		Client    string   `json:"client"`
		User      string   `json:"user"`
		Method    string   `json:"method"`
		URL       string   `json:"url"`
		Path      string   `json:"path"`
		Origin    string   `json:"origin"`
		UserAgent string   `json:"user_agent"`
		Agent     []string `json:"agent"`
		Token     string   `json:"token"`
		Purpose   []string `json:"purpose"`
		RobotsURL string   `json:"robots_url"`
		Rule      string   `json:"rule"`
		Line      int      `json:"line"`
		Status    int      `json:"status"`
		Decision  string   `json:"decision"`
		Reason    string   `json:"reason"`
	}{t.UTC().Format(auditTimeFormat), level, r.msg, client, r.user, r.method, r.url, r.path, r.origin, r.userAgent,
		agents, r.token, purposes, r.robotsURL, r.rule, r.line, r.status, r.decision, r.reason})
	return b
}

// auditMsg is the audit log's msg for a decision.
func auditMsg(d *Decision) string {
	switch d.Action {
	case ActionDisallowed, ActionUsageRefused:
		return "blocked"
	case ActionDenied:
		return "override"
	case ActionUnreachable:
		return "unreachable"
	case ActionWouldBlock:
		return "would-block"
	case ActionPaced:
		return "paced"
	case ActionAllowed:
		if d.Site != nil && d.Site.Policy == "allow" {
			return "override"
		}
		return "allowed"
	}
	return "refused"
}
