package source

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
	"golang.org/x/net/idna"
)

// RSL is an RSL 1.0 (Really Simple Licensing) document, which a robots.txt
// names with a License line: the licences of a site's content. Each
// <content url="…"> element covers the URLs its pattern matches; within
// it, each <license> says what uses it permits and prohibits
// (<permits type="usage">, <prohibits type="usage">), and a server
// attribute names a licence server that issues the token a crawler needs
// first. It is immutable and safe for concurrent use.
type RSL struct {
	url      string // where it was fetched from, for the evidence
	contents []rslContent
}

// rslContent is one <content> element.
type rslContent struct {
	url      string // as written
	origin   string // "scheme://host[:port]" of an absolute url, canonical (see canonicalOrigin); "" for a path
	wildcard bool   // origin's host holds "*": a pattern matched against the request's host
	pattern  string // the path pattern, escaped as robots.txt patterns are (normalised WithNormalization)
	server   string // the licence server, if any
	licenses []rslLicense
}

// rslLicense is one <license> element: the usage values it permits and
// prohibits, as written (space-separated lists joined), and which purposes
// those name.
type rslLicense struct {
	permits, prohibits   string
	hasPermits           bool
	permitted, forbidden [usage.NumPurposes]bool
}

// ErrRSL is wrapped by ParseRSL's errors: the document is not an RSL
// document.
var ErrRSL = errors.New("not an RSL document")

// maxRSLContents bounds the <content> elements kept; maxRSLDepth the
// nesting of elements read.
const (
	maxRSLContents = 10_000
	maxRSLDepth    = 64
)

// ParseRSL reads an RSL document fetched from url. Its root must be an
// <rsl> element (in any namespace, or none); <content> elements without a
// url are skipped, as are elements it does not know. A body that is not
// well-formed XML, or whose root is not <rsl>, is an error wrapping ErrRSL
// (what that means for a request is the caller's: robotsgate refuses AI
// purposes under a licence it cannot read). With WithNormalization, content
// patterns are normalised as a proxy normalises request paths.
func ParseRSL(url string, body []byte, opts ...robots.Option) (*RSL, error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	d.Entity = nil // the five predefined entities only: no expansion to blow up
	l := &RSL{url: url}
	var (
		depth   int
		root    = true
		content *rslContent
		license *rslLicense
		field   *string // the permits or prohibits list being read
		purpose *[usage.NumPurposes]bool
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if root {
				return nil, fmt.Errorf("%w: empty", ErrRSL)
			}
			return l, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRSL, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth > maxRSLDepth {
				return nil, fmt.Errorf("%w: elements nested deeper than %d", ErrRSL, maxRSLDepth)
			}
			name := t.Name.Local
			switch {
			case root:
				if name != "rsl" {
					return nil, fmt.Errorf("%w: root element <%s>", ErrRSL, name)
				}
				root = false
			case depth == 2 && name == "content" && len(l.contents) < maxRSLContents:
				c := rslContent{url: strings.TrimSpace(attr(t, "url")), server: strings.TrimSpace(attr(t, "server"))}
				if c.url == "" {
					continue
				}
				c.origin, c.pattern = splitContentURL(c.url, opts)
				c.wildcard = strings.Contains(c.origin, "*")
				l.contents = append(l.contents, c)
				content = &l.contents[len(l.contents)-1]
			case depth == 3 && name == "license" && content != nil:
				content.licenses = append(content.licenses, rslLicense{})
				license = &content.licenses[len(content.licenses)-1]
			case depth == 4 && license != nil && (name == "permits" || name == "prohibits") && attr(t, "type") == "usage":
				if name == "permits" {
					field, purpose, license.hasPermits = &license.permits, &license.permitted, true
				} else {
					field, purpose = &license.prohibits, &license.forbidden
				}
			}
		case xml.EndElement:
			switch depth {
			case 2:
				content = nil
			case 3:
				license = nil
			case 4:
				field, purpose = nil, nil
			}
			depth--
		case xml.CharData:
			if field == nil {
				continue
			}
			for _, v := range strings.Fields(string(t)) {
				if len(*field) < 1024 {
					*field = strings.TrimSpace(*field + " " + v)
				}
				for _, p := range rslPurposes(v) {
					purpose[p] = true
				}
			}
		}
	}
}

// attr returns the value of t's attribute name (any namespace), or "".
func attr(t xml.StartElement, name string) string {
	for _, a := range t.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// splitContentURL splits a <content> url into the origin it names, if it
// is absolute ("https://example.com:443/news/*" gives "https://example.com"
// and "/news/*"), and its path pattern, as robots.Pattern holds it under
// opts.
func splitContentURL(u string, opts []robots.Option) (origin, pattern string) {
	path := u
	if scheme, rest, ok := strings.Cut(u, "://"); ok && !strings.ContainsAny(scheme, "/*") {
		authority, p, _ := strings.Cut(rest, "/")
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			authority = authority[at+1:] // userinfo names no origin
		}
		origin, path = canonicalOrigin(scheme, authority), "/"+p
	}
	return origin, robots.Pattern(path, opts...)
}

// canonicalOrigin returns "scheme://host[:port]" as a proxy names the
// origin of a request, so that the two compare as strings: the scheme and
// host lower-cased, an internationalised host in its ASCII (punycode) form,
// its trailing dot and the scheme's default port left out. A host that
// IDNA cannot map is kept lower-cased: it names no host a request can
// have. A "*" in the host is kept, a pattern for the host.
func canonicalOrigin(scheme, authority string) string {
	scheme = strings.ToLower(scheme)
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.Contains(authority[i:], "]") {
		host, port = authority[:i], authority[i+1:]
	}
	if port == map[string]string{"http": "80", "https": "443"}[scheme] {
		port = ""
	}
	host = strings.ToLower(host)
	if !isASCII(host) {
		// A wildcard host's stars are no IDNA: its other labels are
		// mapped one by one.
		labels := []string{host}
		if strings.Contains(host, "*") {
			labels = strings.Split(host, ".")
		}
		for i, l := range labels {
			if a, err := idna.Lookup.ToASCII(l); err == nil && !strings.Contains(l, "*") {
				labels[i] = strings.ToLower(a)
			}
		}
		host = strings.Join(labels, ".")
	}
	host = strings.TrimSuffix(host, ".")
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appliesTo reports whether c applies to origin (matchesOrigin), spending
// its cost from b; ok is false when b ran out.
func (c *rslContent) appliesTo(origin string, b *robots.Budget) (applies, ok bool) {
	if !b.SpendPattern(c.pattern) {
		return false, false
	}
	applies = c.matchesOrigin(origin, b)
	return applies, applies || !b.Exhausted()
}

// matchesOrigin reports whether c applies to the origin o
// ("scheme://host[:port]", canonical): a content url that is a path applies
// to every origin; an absolute one to its own, or, with a "*" in its host,
// to every origin its pattern matches ("https://*.example.com" matches
// "https://cdn.example.com", not "https://example.com"). The cost is
// spent from b.
func (c *rslContent) matchesOrigin(o string, b *robots.Budget) bool {
	switch {
	case c.origin == "":
		return true
	case !c.wildcard:
		return c.origin == o
	}
	return b.Spend(len(c.origin)*strings.Count(c.origin, "*")+len(o)) && globMatch(c.origin, o)
}

// globMatch reports whether s matches pattern, in which "*" matches any
// run of bytes and every other byte itself. It backtracks to the last
// star only, in time proportional to len(pattern) * len(s) at worst.
func globMatch(pattern, s string) bool {
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(pattern) && pattern[pi] == s[si]:
			pi++
			si++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}

// rslPurposes returns the purposes an RSL usage value names: "all" every
// one, "ai-all" ai-train and ai-input, "ai-train", "ai-input", "ai-index"
// (ai-input: an index built for AI answers), and "search".
func rslPurposes(v string) []usage.Purpose {
	switch strings.ToLower(v) {
	case "all":
		return []usage.Purpose{usage.AITrain, usage.AIInput, usage.Search}
	case "ai-all":
		return []usage.Purpose{usage.AITrain, usage.AIInput}
	case "ai-train":
		return []usage.Purpose{usage.AITrain}
	case "ai-input", "ai-index":
		return []usage.Purpose{usage.AIInput}
	case "search":
		return []usage.Purpose{usage.Search}
	}
	return nil
}

// Usage answers for the URL scheme://host + path (host as a proxy names
// an origin: lower-case ASCII, no trailing dot, the default port left out;
// path normalised when the document was parsed WithNormalization): the
// <content> element with the longest pattern that matches it decides, the
// first of equally long ones. An absolute content url applies to its own
// origin (compared in the same canonical form), or, with a "*" in its
// host, to every host that pattern matches. Its licences refuse a purpose
// one of them prohibits; else, when one or more of them list what they
// permit, one that none of them permits. A content element with a licence
// server refuses ai-train and ai-input too: its terms need a token first
// (licensed lifts that: robotsgate passes true for a site it holds a
// written licence for). A purpose it permits is granted. Statements are
// "rsl <url>: prohibits usage <values>", "rsl <url>: permits usage
// <values>" and "rsl <url>: license server <server>". A nil RSL states
// nothing.
func (l *RSL) Usage(scheme, host, path string, licensed bool) usage.Usage {
	u, _ := l.UsageWithin(scheme, host, path, licensed, nil)
	return u
}

// UsageWithin is Usage under budget b: it reports false, with an
// unreliable answer, when b runs out.
func (l *RSL) UsageWithin(scheme, host, path string, licensed bool, b *robots.Budget) (usage.Usage, bool) {
	var u usage.Usage
	if l == nil {
		return u, true
	}
	origin := scheme + "://" + host
	var best *rslContent
	sr := robots.NewPathMatcher(path, b)
	for i := range l.contents {
		c := &l.contents[i]
		if best != nil && len(c.pattern) <= len(best.pattern) {
			continue
		}
		applies, ok := c.appliesTo(origin, b)
		if !ok {
			return u, false
		}
		if applies && sr.Matches(c.pattern) {
			best = c
		}
	}
	if best != nil {
		u = l.contentUsage(best, licensed)
	}
	return u, !b.Exhausted()
}

// UsageEverywhere answers, for each purpose, whether the document refuses
// it on every path of the origin scheme://host, as a tunnelling proxy that
// cannot see paths must know: Refused where a content element of the
// origin matches every path ("/", "/*", "*") and every content element of
// the origin refuses it (the first such element's statement is the
// evidence); Unstated otherwise. b bounds the work as for UsageWithin.
func (l *RSL) UsageEverywhere(scheme, host string, licensed bool, b *robots.Budget) (usage.Usage, bool) {
	var u usage.Usage
	if l == nil {
		return u, true
	}
	origin := scheme + "://" + host
	var refused [usage.NumPurposes]int // elements of the origin that refuse each purpose
	var first [usage.NumPurposes]usage.Verdict
	all, whole := 0, false
	for i := range l.contents {
		c := &l.contents[i]
		applies, ok := c.appliesTo(origin, b)
		if !ok {
			return u, false
		}
		if !applies {
			continue
		}
		all++
		whole = whole || robots.MatchesEverything(c.pattern)
		cu := l.contentUsage(c, licensed)
		for p := range usage.NumPurposes {
			if cu[p].State == usage.Refused {
				if refused[p] == 0 {
					first[p] = cu[p]
				}
				refused[p]++
			}
		}
	}
	if whole {
		for p := range usage.NumPurposes {
			if refused[p] == all {
				u[p] = first[p]
			}
		}
	}
	return u, true
}

// contentUsage is what content element c says of each purpose (see Usage).
func (l *RSL) contentUsage(c *rslContent, licensed bool) usage.Usage {
	var u usage.Usage
	prefix := "rsl " + l.url + ": "
	for p := range usage.NumPurposes {
		var refusal, grant string
		permitsListed := false
		for _, lic := range c.licenses {
			switch {
			case lic.forbidden[p]:
				refusal = prefix + "prohibits usage " + lic.prohibits
			case lic.permitted[p]:
				grant = prefix + "permits usage " + lic.permits
			}
			permitsListed = permitsListed || lic.hasPermits
			if refusal != "" {
				break
			}
		}
		switch {
		case refusal != "":
			u[p] = usage.Verdict{State: usage.Refused, Statement: refusal, Source: usage.FromRSL}
		case grant == "" && permitsListed:
			u[p] = usage.Verdict{State: usage.Refused, Statement: prefix + "permits usage " + c.permitsList(), Source: usage.FromRSL}
		case c.server != "" && !licensed && p != usage.Search:
			u[p] = usage.Verdict{State: usage.Refused, Statement: prefix + "license server " + c.server, Source: usage.FromRSL}
		case grant != "":
			u[p] = usage.Verdict{State: usage.Granted, Statement: grant, Source: usage.FromRSL}
		}
	}
	return u
}

// permitsList returns what c's licences permit, their lists joined.
func (c *rslContent) permitsList() string {
	var parts []string
	for _, lic := range c.licenses {
		if lic.hasPermits {
			parts = append(parts, lic.permits)
		}
	}
	return strings.Join(parts, " ")
}

// URL returns where the document was fetched from.
func (l *RSL) URL() string {
	if l == nil {
		return ""
	}
	return l.url
}

// Len returns the number of <content> elements kept.
func (l *RSL) Len() int {
	if l == nil {
		return 0
	}
	return len(l.contents)
}

// MaxLicenses is how many of a robots.txt's License lines are read: a
// site names one, or a few.
const MaxLicenses = 4

// rslSource is the RSL licences a site's robots.txt names on License
// lines, which refuse before the request leaves, as robots.txt's own
// statements do. A licence that cannot be read refuses ai-train and
// ai-input: RSL asks crawlers to comply with its terms before they use
// the content, which no one can do with terms unread.
type rslSource struct{}

// Info declares the source (usage.FromRSL.Info).
func (rslSource) Info() usage.SourceInfo { return usage.FromRSL.Info() }

func (rslSource) Phase() usage.Phase { return usage.BeforeSend }

func (rslSource) FileKind(opts ...robots.Option) fetch.FileKind {
	return fetch.FileKind{
		Name: KindRSL, Accept: "application/rsl+xml, application/xml;q=0.9, */*;q=0.5",
		Parse: func(url string, body []byte) (any, error) { return ParseRSL(url, body, opts...) },
		URLs:  func(_ fetch.Origin, licenses []string) []string { return licenses },
	}
}

// Judge combines what each licence says of the request: of every path of
// in.Paths, or, Everywhere, of every path of the origin.
func (rslSource) Judge(ctx context.Context, in *Input) (usage.Usage, error) {
	var all usage.Usage
	if in.Rules == nil || in.Files == nil { // no robots.txt (4xx, or unreachable past its limit): no License line
		return all, nil
	}
	for i, lic := range in.Rules.Licenses() {
		u, err := judgeLicense(ctx, in, i, lic)
		if err != nil {
			return all, err
		}
		all.Combine(&u)
	}
	return all, nil
}

// judgeLicense answers for the licence the i-th License line, lic, names.
func judgeLicense(ctx context.Context, in *Input, i int, lic string) (usage.Usage, error) {
	url, readable := in.Origin.LicenseURL(lic)
	switch {
	case !readable:
		// A licence robotsgate cannot fetch (RSL names http and https
		// URLs): terms unread.
		return usage.RefuseAI("rsl "+lic+": unread (not an http or https URL)", usage.FromRSL), nil
	case i >= MaxLicenses:
		// More licences than robotsgate reads: terms unread.
		return usage.RefuseAI("rsl "+lic+": unread (more than "+fmt.Sprint(MaxLicenses)+" License lines)", usage.FromRSL), nil
	}
	doc, err := in.Files.Get(ctx, KindRSL, url)
	if fe := unanswered("RSL licence "+url, doc, err); fe != nil {
		return usage.Usage{}, fe
	}
	if !doc.Good() {
		why := doc.Err
		if doc.ParseErr != nil {
			why = doc.ParseErr.Error()
		}
		if why == "" {
			why = fmt.Sprintf("status %d", doc.Status)
		}
		return usage.RefuseAI("rsl "+url+": unreadable ("+why+")", usage.FromRSL), nil
	}
	l := doc.Value.(*RSL)
	if in.Everywhere {
		u, ok := l.UsageEverywhere(in.Origin.Scheme, in.Origin.Authority(), false, in.Budget)
		return u, costly(ok, url)
	}
	var u usage.Usage
	for _, path := range in.Paths {
		v, ok := l.UsageWithin(in.Origin.Scheme, in.Origin.Authority(), path, false, in.Budget)
		if !ok {
			return usage.Usage{}, costly(false, url)
		}
		u.Combine(&v)
	}
	return u, nil
}

// costly is the CostError of the licence at url when judging it ran out of
// budget (!ok); nil otherwise.
func costly(ok bool, url string) error {
	if ok {
		return nil
	}
	return &CostError{What: "the RSL licence " + url}
}
