// Package audit is robotsgate's evidence, rendered from a policy.Decision
// in one place: the audit log's Record (which the log, the status page and
// the report command all read and write through its JSON tags), the
// Result of check -json and the decision API, and the Log that writes
// records, one JSON object per line.
package audit

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
)

// Record is one line of the audit log (docs/data-teams.md, "Audit log"). Every field
// is always written: "" or 0 when empty, [] for an empty array.
type Record struct {
	Time      Time          `json:"time"`
	Level     string        `json:"level"` // "INFO" for allowed, "WARN" for the rest
	Msg       Msg           `json:"msg"`
	Client    string        `json:"client"` // the client's IP address
	User      string        `json:"user"`   // the proxy user; for a failed login, the name tried
	Method    string        `json:"method"`
	URL       string        `json:"url"`  // canonical; host:port for a CONNECT
	Path      string        `json:"path"` // the normalised path and query decided on
	Origin    string        `json:"origin"`
	UserAgent string        `json:"user_agent"`
	Agent     []string      `json:"agent"` // the tokens obeyed
	Token     string        `json:"token"` // the token whose rules decided
	Purpose   []string      `json:"purpose"`
	RobotsURL string        `json:"robots_url"`
	Rule      string        `json:"rule"`
	Line      int           `json:"line"`
	Status    int           `json:"status"` // sent to the client; 0 when none could be (client-left on HTTP/2)
	Decision  policy.Action `json:"decision"`
	Reason    string        `json:"reason"`
	Charged   string        `json:"charged"` // what the site charged for the request (pay-per-crawl): "USD 0.01"; "" when nothing
	// Copies are the copies of the site's files that decided (robots.txt
	// first, then each usage file consulted); [] when none did
	// (unreachable, a private target, a [[sites]] rule).
	Copies []Copy `json:"copies"`
	// Prev is the hex SHA-256 of the line before this one in the log's
	// chain (docs/auditors.md); the Log sets it as it writes.
	Prev string `json:"prev"`
}

// Copy is one entry of a record's copies: a copy of a site's file, by the
// SHA-256 of its body ("" for an answer with no body, such as a 404), when
// it was fetched and its HTTP status.
type Copy struct {
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
	Fetched Time   `json:"fetched"`
	Status  int    `json:"status"`
}

// Msg is a record's msg: what kind of event it is.
type Msg string

// The msgs of docs/data-teams.md's audit log.
const (
	MsgBlocked     Msg = "blocked"
	MsgWouldBlock  Msg = "would-block"
	MsgUnreachable Msg = "unreachable"
	MsgOverride    Msg = "override"
	MsgPaced       Msg = "paced"
	MsgAllowed     Msg = "allowed"
	MsgRefused     Msg = "refused"
	// MsgClientLeft: the client went away before robotsgate answered
	// (decision client-left): on HTTP/1 a 503 is still written (status
	// 503), which only a client that closed just its sending side reads;
	// on HTTP/2 nothing can be (status 0).
	MsgClientLeft Msg = "client-left"
)

// MsgOf is the msg of a decision's record.
func MsgOf(d *policy.Decision) Msg {
	switch d.Action {
	case policy.ActionDisallowed, policy.ActionUsageRefused:
		return MsgBlocked
	case policy.ActionDenied:
		return MsgOverride
	case policy.ActionUnreachable:
		return MsgUnreachable
	case policy.ActionWouldBlock:
		return MsgWouldBlock
	case policy.ActionPaced:
		return MsgPaced
	case policy.ActionClientLeft:
		return MsgClientLeft
	case policy.ActionAllowed:
		if d.Site != nil && d.Site.Policy == policy.SiteAllow {
			return MsgOverride
		}
		return MsgAllowed
	}
	return MsgRefused
}

// RecordOf renders a decision's evidence, answered with status, as a
// record written at t. The request's own facts (client, method, URL as
// sent, User-Agent) are the caller's to add: RecordOf fills URL and Path
// only when the decision holds an origin and a target, with the
// canonical URL (no userinfo, no default port, the decided host, https://
// inside a MITM tunnel).
func RecordOf(t time.Time, d *policy.Decision, status int) Record {
	msg := MsgOf(d)
	r := Record{
		Time:      Time(t),
		Level:     "WARN",
		Msg:       msg,
		User:      d.User,
		Agent:     d.Agents.Slice(),
		Token:     d.Token,
		Purpose:   d.Purposes.Names(),
		RobotsURL: d.RobotsURL(),
		Status:    status,
		Decision:  d.Action,
		Reason:    d.Reason,
	}
	if msg == MsgAllowed {
		r.Level = "INFO"
	}
	r.Rule, r.Line = RuleOf(d)
	if !d.Origin.IsZero() {
		r.Origin = d.Origin.String()
		if d.Target != "" {
			r.URL, r.Path = d.Origin.URL(d.Target), robots.Normalize(d.Target)
		}
	}
	if r.Agent == nil {
		r.Agent = []string{}
	}
	if r.Purpose == nil {
		r.Purpose = []string{}
	}
	r.Copies = CopiesOf(d.Copies())
	return r
}

// CopiesOf renders a decision's copies (policy.Decision.Copies) as a
// record names them: the hex SHA-256 of each body ("" for an answer with
// none), its fetch time in TimeFormat; [] when there are none.
func CopiesOf(cs []evidence.Copy) []Copy {
	out := make([]Copy, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = Copy{URL: c.URL, SHA256: c.Hex(), Fetched: Time(c.Fetched), Status: c.Status}
	}
	return out
}

// SetCharged sets what a site charged for the request (pay-per-crawl);
// nothing when a is zero.
func (r *Record) SetCharged(a pay.Amount) {
	if a.Currency != "" {
		r.Charged = a.String()
	}
}

// SetClient sets the client's address ("" when unknown).
func (r *Record) SetClient(a netip.Addr) {
	if a.IsValid() {
		r.Client = a.Unmap().String()
	}
}

// RuleOf is the rule that decided d, and its line: the usage statement
// that refused it, or the robots.txt rule of its verdict.
func RuleOf(d *policy.Decision) (string, int) {
	if d.Refusal.Statement != "" {
		return d.Refusal.Rule(), d.Refusal.Line
	}
	return d.Verdict.Rule(), d.Verdict.Line
}

// TimeFormat is the audit log's time: RFC 3339 in UTC with milliseconds
// ("2026-11-23T08:41:38.637Z").
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time is a record's time, written in TimeFormat; read from any RFC 3339
// time.
type Time time.Time

// MarshalText writes t in TimeFormat.
func (t Time) MarshalText() ([]byte, error) {
	return time.Time(t).UTC().AppendFormat(nil, TimeFormat), nil
}

// UnmarshalText reads an RFC 3339 time.
func (t *Time) UnmarshalText(b []byte) error {
	x, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return fmt.Errorf("time %q is not RFC 3339", b)
	}
	*t = Time(x)
	return nil
}
