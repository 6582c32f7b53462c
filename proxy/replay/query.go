package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// A Query is one URL asked about for one token (the evidence command):
// the request to decide, and how audit records name it.
type Query struct {
	URL       string
	RobotsURL string          // the robots.txt of its origin
	Request   *policy.Request // KindCheck, for the token
	origin    string          // as records write it
	canonical string          // the URL as records write it
	path      string          // normalised, as records write it
}

// NewQuery returns the query of url for token, taken verbatim, or when
// token is "" for the tokens the proxy takes from the User-Agent header ua
// (its [[agents]] rules included; with neither, default_agent).
func (x *Decider) NewQuery(url, token, ua string) (*Query, error) {
	o, err := fetch.ParseOrigin(url)
	if err != nil {
		return nil, err
	}
	req := &policy.Request{Kind: policy.KindCheck, UserAgent: ua}
	switch {
	case token != "":
		req.Agents = []string{token}
	case ua == "":
		req.Agents = []string{x.cfg.DefaultAgent}
	}
	if err := req.SetURL(url); err != nil {
		return nil, err
	}
	return &Query{
		URL: url, RobotsURL: o.RobotsURL(), Request: req,
		origin: o.String(), canonical: o.URL(req.Target), path: robots.Normalize(req.Target),
	}, nil
}

// Records hands fn each record of the audit log read from r that names
// q's URL (by its url, or its origin and path), with its line number;
// lines that are not records, and checkpoints, are passed over.
func (q *Query) Records(r io.Reader, name string, fn func(line int, record []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	for n := 1; sc.Scan(); n++ {
		var rec struct {
			Msg    string `json:"msg"`
			URL    string `json:"url"`
			Origin string `json:"origin"`
			Path   string `json:"path"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Msg == msgCheckpoint {
			continue
		}
		if rec.URL == q.canonical || rec.Origin == q.origin && rec.Path == q.path {
			fn(n, sc.Bytes())
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}
