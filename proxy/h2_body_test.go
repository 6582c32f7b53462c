package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestClientBodyCutShort: a request that declares content-length 10 and
// ends after 3 bytes, by END_STREAM over h2 or by closing its sending
// side over HTTP/1.1, is the client's failure: answered 400 bad-request
// (not a 502 blaming the origin), audited so, logged at debug and never
// as a WARN against the origin, whose request is cut (it never receives
// it whole).
func TestClientBodyCutShort(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	lo := &loggingOrigin{}
	o.handler = lo.serve
	p := startMITM(t, pki, nil)
	authority := "a.example:" + port
	for _, proto := range []string{"h2", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			mark := "/public?cut-" + strings.ReplaceAll(proto, "/", "")
			var status, gate string
			if proto == "h2" {
				r := p.rawH2(t, authority)
				r.request(1, []byte("abc"), true, ":method", "POST", ":scheme", "https", ":authority", authority, ":path", mark, "content-length", "10")
				st, how := r.stream(t, 1)
				status, gate = st.status(), st.header.Get("x-robots-gate")
				if how != "" {
					t.Errorf("the connection ended (%s); want the stream alone answered", how)
				}
			} else {
				c, br := p.rawTunnel(t, authority, "a.example", false)
				io.WriteString(c, "POST "+mark+" HTTP/1.1\r\nHost: "+authority+"\r\nContent-Length: 10\r\n\r\nabc")
				c.(*tls.Conn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(br), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				resp.Body.Close()
				status, gate = resp.Status[:3], resp.Header.Get("X-Robots-Gate")
			}
			if status != "400" || gate != "bad-request" {
				t.Errorf("answer %q, X-Robots-Gate %q; want 400 bad-request", status, gate)
			}
			var rec map[string]any
			testkit.Eventually(t, "the request's audit record", func() bool {
				for _, l := range p.auditLines(t) {
					if u, _ := l["url"].(string); strings.HasSuffix(u, mark) {
						rec = l
						return true
					}
				}
				return false
			})
			if rec["decision"] != "bad-request" || rec["status"] != 400.0 || !strings.Contains(rec["reason"].(string), "ended the request body") {
				t.Errorf("audit = %v; want bad-request 400, the client's body named", rec)
			}
			for _, q := range lo.markedRequests(mark) {
				if q.BodyErr == nil {
					t.Errorf("the origin received the request whole: %+v", q)
				}
			}
		})
	}
	waitForLog(t, p.log, "request body failed on the client's side")
	if log := p.log.String(); strings.Contains(log, "upstream request failed") {
		t.Errorf("the origin was blamed:\n%s", log)
	}
}
