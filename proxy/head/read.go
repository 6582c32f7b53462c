package head

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/robotsgate/robotsgate/usage"
	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/transform"
)

// errRawBound ends the body's bytes where robotsgate stops reading them
// (maxHeadRaw): a compressed page that decoded to less than its head by
// then has a head robotsgate cannot know.
var errRawBound = errors.New("the head did not end within the first 128 KiB sent")

// boundedReader reads a page decoded from its coding, at most left bytes
// of it (then errHeadBound), telling the page's end from robotsgate's
// bounds: a decoder that fails because raw was cut at maxHeadRaw fails
// with errRawBound; a compressed stream cut short by the origin ends the
// page there (io.EOF), as browsers show what arrived.
type boundedReader struct {
	r    io.Reader
	raw  *recorder
	left int
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errHeadBound
	}
	n, err := b.r.Read(p[:min(len(p), b.left)])
	b.left -= n
	switch {
	case err == nil, err == io.EOF:
	case errors.Is(err, errRawBound) || len(b.raw.buf) >= b.raw.max:
		err = errRawBound
	case err == io.ErrUnexpectedEOF:
		err = io.EOF
	}
	return n, err
}

// pageStart holds the first bytes of a page, decoded into UTF-8, read
// from r as the trackers reading it ask for them.
type pageStart struct {
	r   io.Reader
	buf []byte
	end error // io.EOF at the page's end, errHeadBound, errRawBound, or why reading failed
}

// more reads what r has next into buf, or sets end.
func (p *pageStart) more() {
	if len(p.buf) == cap(p.buf) {
		p.buf = slices.Grow(p.buf, max(4<<10, len(p.buf)))
	}
	n, err := p.r.Read(p.buf[len(p.buf):cap(p.buf)])
	p.buf = p.buf[:len(p.buf)+n]
	if err != nil {
		p.end = err
	}
}

// pageCursor reads a pageStart from off on, reading more of the page as it
// goes; at the end of what can be read it says io.EOF (pageStart.end
// tells which end it was).
type pageCursor struct {
	p   *pageStart
	off int
}

func (c *pageCursor) Read(b []byte) (int, error) {
	for c.off == len(c.p.buf) {
		if c.p.end != nil {
			return 0, io.EOF
		}
		c.p.more()
	}
	n := copy(b, c.p.buf[c.off:])
	c.off += n
	return n, nil
}

// readHeadOf reads the head of the page r yields (its content, decoded
// from its coding), label the charset its Content-Type names, and returns
// what its meta elements say for tokens; an error when the head cannot be
// known from what r yields.
//
// The page is decoded as the HTML standard's encoding sniffing says; the
// tree builder's insertion modes (headTracker) tell when the head is
// complete and which meta elements it holds (or, where the tracker cannot
// follow a template, html.Parse of the bytes read by then builds the
// head), as the tree of the whole page would. With scripting on, as in
// browsers, a <noscript> in the head is text; with it off (a reader that
// runs no scripts) its meta elements are the head's: when a page has
// one, both readings are made, and a refusal in either refuses.
func readHeadOf(r io.Reader, label string, tokens []string) (usage.Usage, error) {
	p := &pageStart{r: r, buf: make([]byte, 0, 4<<10)}
	for len(p.buf) < 3 && p.end == nil { // room for a byte order mark
		p.more()
	}
	if !certainEncoding(p.buf, label) {
		for len(p.buf) < 1024 && p.end == nil { // what the prescan reads
			p.more()
		}
	}
	enc, name, bom := sniffEncoding(p.buf, label)
	switch name {
	case "replacement": // a label browsers decode to nothing but U+FFFD
		return usage.Usage{}, errors.New("the replacement encoding")
	case "utf-8":
		p.buf = p.buf[:copy(p.buf, p.buf[bom:])] // a byte order mark is no text
	default:
		first := slices.Clone(p.buf[bom:])
		r := p.r
		if p.end != nil {
			r = &failing{p.end}
		}
		p.r = transform.NewReader(io.MultiReader(bytes.NewReader(first), r), enc.NewDecoder())
		p.buf, p.end = p.buf[:0], nil
	}

	// A token that ends where the bytes read end, once they are all that
	// can be read, may be cut (the tokenizer reads "<" at its input's end
	// as text): it completes the head only at the page's real end. One
	// the tokenizer ended before its input did (a tag's ">") is whole: the
	// head is judged without waiting for more of the page.
	complete := func(t *headTracker) bool {
		return t.run() && (t.read < len(p.buf) || p.end == nil || p.end == io.EOF)
	}
	on := newHeadTracker(html.NewTokenizer(&pageCursor{p: p}), true, tokens)
	done := complete(on)
	read := on.read
	readings := []*headTracker{on}
	if on.noscript {
		off := newHeadTracker(html.NewTokenizer(&pageCursor{p: p}), false, tokens)
		done = complete(off) && done
		read = max(read, off.read)
		readings = append(readings, off)
	}
	if !done { // a tracker stops short only at the end of what could be read
		switch err := p.end; {
		case err == io.EOF:
			read = len(p.buf) // the page's end: all of it is read
		case err == nil:
			return usage.Usage{}, errors.New("the tokenizer stopped before the page's end")
		case errors.Is(err, errHeadBound), errors.Is(err, errRawBound):
			return usage.Usage{}, err
		default:
			return usage.Usage{}, fmt.Errorf("read the page: %w", err)
		}
	}
	var u usage.Usage
	for _, t := range readings {
		v := t.u
		if t.lost { // the tree builder's own reading of the bytes read
			var err error
			if v, err = parsedHeadUsage(p.buf[:read], t.scripting, tokens); err != nil {
				return usage.Usage{}, err
			}
		}
		u.Combine(&v)
	}
	return u, nil
}

// parsedHeadUsage builds the tree of page with html.Parse, scripting on
// or off, and returns what its head's meta elements say for tokens.
func parsedHeadUsage(page []byte, scripting bool, tokens []string) (usage.Usage, error) {
	doc, err := html.ParseWithOptions(bytes.NewReader(page), html.ParseOptionEnableScripting(scripting))
	if err != nil { // html.Parse fails only when it panics inside
		return usage.Usage{}, fmt.Errorf("parse the page: %w", err)
	}
	return headUsage(doc, tokens), nil
}

// sniffEncoding returns the encoding of a page whose first bytes are
// first, as the HTML standard's encoding sniffing determines it: a byte
// order mark (bom its length), the charset label of its Content-Type,
// what a <meta> in first names (the prescan), or the default, and the
// encoding's name. A label no encoding has is passed over, as browsers do.
func sniffEncoding(first []byte, label string) (enc encoding.Encoding, name string, bom int) {
	for _, b := range [...]struct {
		bom  string
		name string
	}{{"\xEF\xBB\xBF", "utf-8"}, {"\xFE\xFF", "utf-16be"}, {"\xFF\xFE", "utf-16le"}} {
		if bytes.HasPrefix(first, []byte(b.bom)) {
			enc, name = charset.Lookup(b.name)
			return enc, name, len(b.bom)
		}
	}
	if label != "" {
		if enc, name = charset.Lookup(label); enc != nil {
			return enc, name, 0
		}
	}
	enc, name, _ = charset.DetermineEncoding(first, "")
	return enc, name, 0
}

// certainEncoding reports whether a byte order mark at the start of first
// (at least 3 bytes of the page, unless it is shorter) or label, the
// Content-Type's charset, names the encoding: then no prescan is made,
// and robotsgate waits for no more of the page than its head.
func certainEncoding(first []byte, label string) bool {
	if bytes.HasPrefix(first, []byte("\xEF\xBB\xBF")) || bytes.HasPrefix(first, []byte("\xFE\xFF")) || bytes.HasPrefix(first, []byte("\xFF\xFE")) {
		return true
	}
	enc, _ := charset.Lookup(label)
	return label != "" && enc != nil
}

// failing is a reader that fails with err.
type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }
