package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// smuggled is a request hidden in another's content: what an origin that
// ignores the content reads as the next request on the connection.
func smuggled(o *wireOrigin) string {
	return "GET /private/s.txt HTTP/1.1\r\nHost: " + o.addr + "\r\n\r\n"
}

// sendFor is send for a request of method (a HEAD's answer has no body).
func sendFor(t *testing.T, c net.Conn, br *bufio.Reader, method, request string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("answer to %.60q: %v", request, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestContentWithoutMeaningRefused: a request whose method gives content
// no meaning (RFC 9110 section 9.3) and that carries some, which an
// origin reading heads only takes for a request of its own, is refused
// with 400 and never forwarded, in every entry path; the next client on
// another connection gets its own answer. On the code before the fix the
// hidden request reached the origin and its answer was handed to the next
// client.
func TestContentWithoutMeaningRefused(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			host := "Host: " + o.addr + "\r\n"
			hidden := smuggled(o)
			cases := []struct{ method, head, body string }{
				{"GET", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden},
				{"HEAD", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden},
				{"DELETE", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden},
				{"TRACE", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden},
				{"OPTIONS", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden},
				{"GET", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hidden), hidden)},
				{"GET", "Transfer-Encoding: chunked\r\n", "0\r\n\r\n"},              // empty, but framed as content
				{"Get", fmt.Sprintf("Content-Length: %d\r\n", len(hidden)), hidden}, // as servers that ignore case read it
			}
			for _, tc := range cases {
				a, abr := e.open(t, p, o)
				req := tc.method + " " + e.target(o, "/public") + " HTTP/1.1\r\n" + host + tc.head + "\r\n" + tc.body
				resp, body := sendFor(t, a, abr, tc.method, req)
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Robots-Gate") != "bad-request" {
					t.Errorf("%s with %q: %d %q %q; want 400 bad-request", tc.method, tc.head, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
				}
				b, bbr := e.open(t, p, o)
				resp, body = send(t, b, bbr, "GET "+e.target(o, "/b")+" HTTP/1.1\r\n"+host+"\r\n")
				if resp.StatusCode != 200 || body != "answer to /b\n" {
					t.Errorf("%s with %q, then another client's GET /b: %d %q; want its own answer", tc.method, tc.head, resp.StatusCode, body)
				}
			}
			if got := o.received(); strings.Contains(got, "/private") || strings.Contains(got, "/public") {
				t.Errorf("the origin received %q; want no refused request and nothing hidden in one", got)
			}
			// OPTIONS with a Content-Type gives its content a meaning.
			a, abr := e.open(t, p, o)
			resp, body := send(t, a, abr, "OPTIONS "+e.target(o, "/opts")+" HTTP/1.1\r\n"+host+"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi")
			if resp.StatusCode != 200 || body != "answer to /opts\n" {
				t.Errorf("OPTIONS with a Content-Type and content: %d %q; want it forwarded", resp.StatusCode, body)
			}
			var refused int
			for _, rec := range p.auditLines(t) {
				if rec["decision"] == "bad-request" && rec["status"] == 400.0 && strings.Contains(rec["reason"].(string), "RFC 9110") {
					refused++
				}
			}
			if refused != len(cases) {
				t.Errorf("audit: %d bad-request records naming RFC 9110; want %d", refused, len(cases))
			}
		})
	}
}

// TestEveryAnswerIsItsOwn: a request with content that an origin ignores
// (a POST, whose content robotsgate cannot judge) and reads as a request
// of its own may reach that origin, but the answer to it reaches nobody:
// the connection that carried content is never used again, so the next
// client, on another connection or another tunnel, gets the answer to its
// own request. In every entry path.
func TestEveryAnswerIsItsOwn(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			o.ignoreAll.Store(true)
			host := "Host: " + o.addr + "\r\n"
			hidden := smuggled(o)
			for i := range 3 {
				a, abr := e.open(t, p, o)
				resp, body := send(t, a, abr, fmt.Sprintf("POST %s HTTP/1.1\r\n%sContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s",
					e.target(o, "/form"), host, len(hidden), hidden))
				if resp.StatusCode != 200 || body != "answer to /form\n" {
					t.Errorf("POST %d: %d %q; want its own answer", i, resp.StatusCode, body)
				}
				b, bbr := e.open(t, p, o)
				path := fmt.Sprintf("/b%d", i)
				resp, body = send(t, b, bbr, "GET "+e.target(o, path)+" HTTP/1.1\r\n"+host+"\r\n")
				if body != "answer to "+path+"\n" {
					t.Errorf("another client's GET %s after the POST: %d %q; want its own answer", path, resp.StatusCode, body)
				}
				// The same client, on the same connection, next.
				resp, body = send(t, a, abr, "GET "+e.target(o, path+"a")+" HTTP/1.1\r\n"+host+"\r\n")
				if body != "answer to "+path+"a\n" {
					t.Errorf("the POST's client's next GET %sa: %d %q; want its own answer", path, resp.StatusCode, body)
				}
			}
		})
	}
}

// TestConnectPipelined: what a client sends right after its CONNECT, in
// the same write, before the 200 (a plain HTTP request here), is the
// tunnel's first bytes, not lost.
func TestConnectPipelined(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths[2:] { // plain HTTP inside a CONNECT
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			c, err := net.Dial("tcp", p.url.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			head := "CONNECT " + o.addr + " HTTP/1.1\r\nHost: " + o.addr + "\r\n\r\n"
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, head+"GET /x HTTP/1.1\r\nHost: "+o.addr+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the request sent with the CONNECT got no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != "answer to /x\n" {
				t.Errorf("the request sent with the CONNECT: %d %q; want its answer", resp.StatusCode, b)
			}
		})
	}
}

// TestLongTargetRefused: a request-target longer than 8 KiB as received
// (absolute-form included) is answered 414 before anything else; one of
// 8 KiB goes through.
func TestLongTargetRefused(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			c, br := e.open(t, p, o)
			prefix := len(e.target(o, "/"))
			for _, n := range []int{policy.MaxTargetBytes, policy.MaxTargetBytes + 1} {
				target := e.target(o, "/"+strings.Repeat("a", n-prefix))
				resp, _ := send(t, c, br, "GET "+target+" HTTP/1.1\r\nHost: "+o.addr+"\r\n\r\n")
				want := 200
				if n > policy.MaxTargetBytes {
					want = http.StatusRequestURITooLong
				}
				if resp.StatusCode != want {
					t.Errorf("a request-target of %d bytes: %d; want %d", len(target), resp.StatusCode, want)
				}
				if want != 200 && resp.Header.Get("X-Robots-Gate") != "bad-request" {
					t.Errorf("414: X-Robots-Gate %q; want bad-request", resp.Header.Get("X-Robots-Gate"))
				}
			}
		})
	}
}
