package proxy

import (
	"io"
	"net/http"
	"sync"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// watchTrailer has the end of resp's body judged for usage statements
// in its trailer, when d declares purposes. A trailer arrives with the
// body's end, after every byte of it went to the client: it cannot
// withhold them, and RFC 9110 (§6.5.1) lets no field move from a trailer
// into the header section unless its definition allows it, which
// X-Robots-Tag's does not. So a statement there that would have refused
// a declared purpose is logged (a warning naming the URL and the
// statement) and counted (robotsgate_usage_trailer_statements_total), for
// the operator to drop what was received; the trailer itself reaches the
// client as the origin sent it.
func (s *Server) watchTrailer(p *policy.Policy, r *http.Request, d *policy.Decision, resp *http.Response) {
	if d.Purposes == 0 || resp.StatusCode == http.StatusSwitchingProtocols || r.Method == http.MethodHead {
		return
	}
	if resp.ProtoMajor < 2 && len(resp.TransferEncoding) == 0 {
		return // HTTP/1 without chunked coding has no trailer: nothing to watch for
	}
	dc := *d // judged once the body ends, on a copy: d was audited already
	url := r.URL.String()
	resp.Body = &trailerWatch{ReadCloser: resp.Body, resp: resp, judge: func(trailer http.Header) {
		h := http.Header{}
		// The fields that state usage preferences, as JudgeResponse reads
		// them in the header section.
		for _, name := range [...]string{"X-Robots-Tag", "Content-Usage", "Content-Signal", "Tdm-Reservation"} {
			if v := trailer[name]; len(v) > 0 {
				h[name] = v
			}
		}
		if len(h) == 0 {
			return
		}
		h["Content-Type"] = resp.Header["Content-Type"]
		if len(h["Tdm-Reservation"]) == 0 {
			// The reservation of tdmrep.json was judged with the header
			// section: the trailer's own statements only are judged here.
			h["Tdm-Reservation"] = []string{"0"}
		}
		if !p.JudgeResponse(&dc, h, nil) {
			return
		}
		s.metrics.trailerStatements.Inc()
		s.log.Warn("usage statement in a trailer, after the body was sent: not enforced",
			"url", url, "purpose", dc.Refusal.Purpose.String(), "rule", dc.RuleHeader())
	}}
}

// trailerWatch calls judge with resp's trailer once its body has ended
// (io.EOF), when the trailer has been read into resp.Trailer.
type trailerWatch struct {
	io.ReadCloser
	resp  *http.Response
	judge func(http.Header)
	once  sync.Once
}

func (w *trailerWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if err == io.EOF && w.resp.Trailer != nil {
		w.once.Do(func() { w.judge(w.resp.Trailer) })
	}
	return n, err
}
