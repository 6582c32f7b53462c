// Package head reads the head of an HTML or XHTML answer as a browser
// builds it, within byte and time bounds a hostile origin cannot stretch,
// for what its <meta> elements say of usage (docs/data-teams.md, "AI-training
// and TDM opt-outs"), and puts what it read back in front of the body, byte
// for byte. It also watches a body's end for usage statements in its
// trailer, which come too late to withhold anything. The proxy's forward
// path calls it (docs/development.md, "The forward path").
package head

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/usage"
)

// maxHead is how much of an HTML page robotsgate reads, for the <meta>
// elements of its head, before anything of it goes to the client, when a
// request declares purposes (docs/data-teams.md, "AI-training and TDM
// opt-outs"); the rest then streams.
const maxHead = 64 << 10

// readableEncodings are the content codings robotsgate can read a page's
// head through. A request that declares purposes asks its origin for
// these only (AcceptReadable), so that its answer can be judged.
var readableEncodings = [...]string{"gzip", "x-gzip", "deflate", "zstd", "identity"}

// AcceptReadable keeps, of the Accept-Encoding field's codings in h, those
// robotsgate can read a head through (br is not one). A field that keeps
// none asks for identity; no field stays none.
func AcceptReadable(h http.Header) {
	vals := h["Accept-Encoding"]
	if len(vals) == 0 {
		return
	}
	var kept []string
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			coding, _, _ := strings.Cut(strings.TrimSpace(item), ";")
			for _, r := range readableEncodings {
				if strings.EqualFold(strings.TrimSpace(coding), r) {
					kept = append(kept, strings.TrimSpace(item))
					break
				}
			}
		}
	}
	if len(kept) == 0 {
		h["Accept-Encoding"] = []string{"identity"}
		return
	}
	h["Accept-Encoding"] = []string{strings.Join(kept, ", ")}
}

// Reader reads the heads of HTML answers (Read) within bounds a hostile
// origin cannot stretch: at most zstdHeads zstd frames decoded at once,
// each with a bounded window, and every head read within its timeout. One
// Reader serves every request at once; NewReader makes it.
type Reader struct {
	timeoutNanos atomic.Int64  // upstream.timeout's, set again by a reload
	zstd         chan struct{} // a token per zstd decode under way
}

// zstdHeads is how many zstd-encoded heads are decoded at once: a frame
// may ask for a window of up to zstdWindow, held while its head is read.
const (
	zstdHeads  = 8
	zstdWindow = 8 << 20
)

// NewReader returns a Reader that reads each head within timeout
// (upstream.timeout's).
func NewReader(timeout time.Duration) *Reader {
	hr := &Reader{zstd: make(chan struct{}, zstdHeads)}
	hr.SetTimeout(timeout)
	return hr
}

// SetTimeout makes timeout the bound of each head read from now on (a
// reload's upstream.timeout); reads under way keep theirs.
func (hr *Reader) SetTimeout(timeout time.Duration) { hr.timeoutNanos.Store(int64(timeout)) }

// timeout is the bound of a head read.
func (hr *Reader) timeout() time.Duration { return time.Duration(hr.timeoutNanos.Load()) }

// Read reads the head of resp's HTML page as browsers build it (the HTML
// standard's tree construction, golang.org/x/net/html, over the page
// decoded as its encoding sniffing says: byte order mark, the charset of
// the last Content-Type, a <meta charset> in the first 1024 bytes,
// windows-1252; for application/xhtml+xml, an XML parser:
// readXHTMLHeadOf), at most 64 KiB of it, decoded from its coding, until
// the head is complete, and returns what the <meta> elements of the head
// say for tokens (those the request obeys). What was read goes back in
// front of resp's body, byte for byte as the origin sent it, to be sent
// on. A head robotsgate cannot know (still open when the bound is
// reached, in a coding it does not read or several, a 206's part, the
// replacement encoding, not arrived within the timeout) refuses every
// declared purpose: a statement no one can read must not open the gate
// for them.
func (hr *Reader) Read(resp *http.Response, tokens []string) usage.Usage {
	raw := &recorder{r: resp.Body, max: maxHeadRaw}
	// A body that stalls is closed when the time is up: its read returns.
	timeout := hr.timeout()
	stop := time.AfterFunc(timeout, func() { resp.Body.Close() })
	u, err := hr.judgeHead(resp, raw, tokens)
	timedOut := !stop.Stop()
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(raw.buf), resp.Body), Closer: resp.Body}
	switch {
	case timedOut:
		err = fmt.Errorf("not read within %v", timeout)
	case err == nil && resp.StatusCode == http.StatusPartialContent:
		err = errors.New("a part of the page (206)")
	}
	if err != nil {
		return unreadableHead(err)
	}
	return u
}

// maxHeadRaw is how much of a page's body, as sent (compressed), is read
// for its head: room for a compressed head's first block. A coding that
// yields less than the head within it leaves the head unknown.
const maxHeadRaw = 2 * maxHead

// maxUnreadable bounds the reason an unreadable head's statement gives.
const maxUnreadable = 200

// errHeadBound ends the page's bytes where robotsgate stops reading: not
// the page's end (whatever follows may still be the head's).
var errHeadBound = errors.New("the head did not end within the first 64 KiB")

// unreadableHead is the answer for a head that cannot be known: every
// purpose refused, the statement saying why. What it quotes of the
// origin's (a content coding, an XML error) is escaped to printable
// ASCII and clipped to maxUnreadable bytes: the 403's
// X-Robots-Gate-Rule carries it.
func unreadableHead(err error) usage.Usage {
	why := err.Error()
	if strings.ContainsFunc(why, func(r rune) bool { return r < ' ' || r > '~' }) {
		why = strings.Trim(strconv.QuoteToASCII(why), `"`)
	}
	return usage.UnreadableHead(clip(why, maxUnreadable))
}

// judgeHead reads the head of resp from raw, through the one coding its
// Content-Encoding field lines name (if any), and returns what its meta
// elements say for tokens, or why the head cannot be known.
func (hr *Reader) judgeHead(resp *http.Response, raw *recorder, tokens []string) (usage.Usage, error) {
	var codings []string
	for _, v := range resp.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) > 1 {
		return usage.Usage{}, fmt.Errorf("content-encoding %s", strings.Join(codings, ", "))
	}
	coding := ""
	if len(codings) == 1 {
		coding = codings[0]
	}
	if coding == "zstd" {
		select {
		case hr.zstd <- struct{}{}:
			defer func() { <-hr.zstd }()
		case <-time.After(hr.timeout()):
			return usage.Usage{}, errors.New("too many zstd pages read at once")
		}
	}
	dec, err := decoder(coding, raw)
	if err != nil {
		return usage.Usage{}, err
	}
	if c, ok := dec.(io.Closer); ok {
		defer c.Close() // a decoder's, not the body's
	}
	ct, label := header.ContentType(resp.Header)
	page := &boundedReader{r: dec, raw: raw, left: maxHead}
	if ct == xhtmlType { // browsers parse it as XML
		return readXHTMLHeadOf(page, label, tokens)
	}
	return readHeadOf(page, label, tokens)
}

// decoder returns a reader of r's bytes decoded from coding (a
// Content-Encoding value, "" for none).
func decoder(coding string, r io.Reader) (io.Reader, error) {
	switch c := strings.ToLower(strings.TrimSpace(coding)); c {
	case "", "identity":
		return r, nil
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate": // zlib as RFC 9110 says; raw DEFLATE as some servers send
		hdr := make([]byte, 2)
		n, _ := io.ReadFull(r, hdr)
		rest := io.MultiReader(bytes.NewReader(hdr[:n]), r)
		if n == 2 && hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
			return zlib.NewReader(rest)
		}
		return flate.NewReader(rest), nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdWindow), zstd.WithDecoderMaxMemory(zstdWindow+maxHead))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	default:
		return nil, fmt.Errorf("content-encoding %s", c)
	}
}

// recorder reads r, keeping what it read, up to max bytes: then it
// fails with errHeadBound, which is not the page's end.
type recorder struct {
	r   io.Reader
	buf []byte
	max int
}

func (rc *recorder) Read(p []byte) (int, error) {
	if len(rc.buf) >= rc.max {
		return 0, errHeadBound
	}
	p = p[:min(len(p), rc.max-len(rc.buf))]
	n, err := rc.r.Read(p)
	rc.buf = append(rc.buf, p[:n]...)
	return n, err
}

// prefixedBody is a response body whose first bytes were read already.
type prefixedBody struct {
	io.Reader
	io.Closer
}
