package usage

import "strings"

// Robots directives in X-Robots-Tag response headers and in HTML <meta>
// elements: the usage preferences they carry. A response's preferences
// are about that response alone, so they are read per response, not per
// site:
//
//	X-Robots-Tag: noai, noimageai             every crawler
//	X-Robots-Tag: GPTBot: noai                only when GPTBot is obeyed
//	<meta name="robots" content="noai">       every crawler
//	<meta name="GPTBot" content="noindex">    only when GPTBot is obeyed
//	<meta name="tdm-reservation" content="1"> TDMRep: text and data mining reserved
//
// noai refuses ai-train and ai-input; noimageai refuses them for image
// responses; noindex and none refuse search. Every other directive
// (nofollow, max-snippet, unavailable_after, …) says nothing of usage and
// is ignored, as is anything that does not read as a directive: a
// statement that cannot be read states nothing (Google reads robots
// directives the same way).

// fieldRobotsTag is the X-Robots-Tag header's name as statements show it.
const fieldRobotsTag = "x-robots-tag"

// valuedDirectives are the robots directives whose value follows a colon
// ("max-snippet: 20"): a name before a colon that is one of them is not a
// crawler's.
var valuedDirectives = [...]string{"max-snippet", "max-image-preview", "max-video-preview", "unavailable_after"}

// RobotsTagUsage reads the usage preferences of X-Robots-Tag field lines
// (values) for a response to a request that obeys tokens; image tells
// whether the response is an image (Content-Type image/*), which noimageai
// refuses. Each line is a comma-separated list of directives, of which a
// run may start with a crawler's name and a colon ("GPTBot: noai, otherbot:
// noindex"): that run applies only when the crawler is obeyed (ASCII case
// ignored). Lines combine as statements do, a refusal on any line
// refusing. Each verdict's Statement is "x-robots-tag: <the line>",
// lower-cased, and its Source FromHeader.
func RobotsTagUsage(values []string, tokens []string, image bool) Usage {
	var u Usage
	for _, line := range values {
		var st States
		applies := true // no crawler named yet: every crawler
		for item := range strings.SplitSeq(line, ",") {
			item = strings.TrimSpace(item)
			if name, rest, ok := strings.Cut(item, ":"); ok && isCrawlerName(strings.TrimSpace(name)) {
				applies = obeys(tokens, strings.TrimSpace(name))
				item = strings.TrimSpace(rest)
			}
			if applies {
				directiveUsage(item, image, &st)
			}
		}
		setUsage(&u, st, fieldRobotsTag+": "+strings.ToLower(line), FromHeader)
	}
	return u
}

// MetaUsage reads the usage preferences of one HTML <meta> element of a
// page's head, for a request that obeys tokens: name "robots" (every
// crawler) or one of the tokens (that crawler), whose content lists robots
// directives, or "tdm-reservation" (TDMRep: "1" refuses ai-train and
// ai-input). Names are compared ignoring ASCII case. Each verdict's
// Statement is "meta <name>: <content>", lower-cased, and its Source
// FromMeta. An HTML page is no image: noimageai says nothing of it.
func MetaUsage(name, content string, tokens []string) Usage {
	var u Usage
	name = strings.TrimSpace(name)
	var st States
	switch {
	case strings.EqualFold(name, "tdm-reservation"):
		st = ParseTDMReservation(content)
	case strings.EqualFold(name, "robots") || obeys(tokens, name):
		for item := range strings.SplitSeq(content, ",") {
			directiveUsage(strings.TrimSpace(item), false, &st)
		}
	default:
		return u
	}
	setUsage(&u, st, "meta "+strings.ToLower(name)+": "+strings.ToLower(strings.TrimSpace(content)), FromMeta)
	return u
}

// directiveUsage folds what one robots directive says of usage into st.
func directiveUsage(d string, image bool, st *States) {
	switch {
	case strings.EqualFold(d, "noai"):
		st[AITrain], st[AIInput] = Refused, Refused
	case strings.EqualFold(d, "noimageai"):
		if image {
			st[AITrain], st[AIInput] = Refused, Refused
		}
	case strings.EqualFold(d, "noindex"), strings.EqualFold(d, "none"):
		st[Search] = Refused
	}
}

// setUsage records st, stated by statement from source, in u, a refusal
// winning over what u holds.
func setUsage(u *Usage, st States, statement string, source SourceID) {
	for p, s := range st {
		if s > u[p].State {
			u[p] = Verdict{State: s, Statement: statement, Source: source}
		}
	}
}

// isCrawlerName reports whether s, the text before a colon in a robots
// directive list, names a crawler: letters, digits, "_" and "-", and not a
// directive that takes a value.
func isCrawlerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	for _, d := range valuedDirectives {
		if strings.EqualFold(s, d) {
			return false
		}
	}
	return true
}

// obeys reports whether tokens holds name, ignoring ASCII case.
func obeys(tokens []string, name string) bool {
	for _, t := range tokens {
		if strings.EqualFold(t, name) {
			return true
		}
	}
	return false
}
