package robots

import (
	"strings"
)

// refAllowed is a deliberately naive transliteration of Google's reference
// (robots.cc: RobotsTxtParser::Parse, RobotsMatcher, Matches), kept
// independent of the package's parser and index so that the two can be
// compared by tests and fuzzing. It returns the reference's
// OneAgentAllowedByRobots and matching_line().
func refAllowed(body, agent, url string) (allowed bool, line int) {
	path := PathOf(url)
	if i := strings.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	type match struct{ prio, line int }
	none := match{-1, 0}
	allowS, allowG, disS, disG := none, none, none, none
	var seenGlobal, seenSpecific, everSpecific, seenSep bool

	var handleAllow func(ln int, v string)
	handleAllow = func(ln int, v string) {
		if !seenGlobal && !seenSpecific {
			return
		}
		seenSep = true
		if refMatches(path, v) {
			p := len(v)
			if seenSpecific {
				if allowS.prio < p {
					allowS = match{p, ln}
				}
			} else if allowG.prio < p {
				allowG = match{p, ln}
			}
			return
		}
		if s := strings.LastIndexByte(v, '/'); s >= 0 && strings.HasPrefix(v[s:], "/index.htm") {
			handleAllow(ln, v[:s+1]+"$")
		}
	}
	handleDisallow := func(ln int, v string) {
		if !seenGlobal && !seenSpecific {
			return
		}
		seenSep = true
		if refMatches(path, v) {
			p := len(v)
			if seenSpecific {
				if disS.prio < p {
					disS = match{p, ln}
				}
			} else if disG.prio < p {
				disG = match{p, ln}
			}
		}
	}
	handleUA := func(v string) {
		if seenSep {
			seenSpecific, seenGlobal, seenSep = false, false, false
		}
		if len(v) >= 1 && v[0] == '*' && (len(v) == 1 || strings.ContainsRune(" \t\n\v\f\r", rune(v[1]))) {
			seenGlobal = true
			return
		}
		n := 0
		for n < len(v) && (v[n] >= 'a' && v[n] <= 'z' || v[n] >= 'A' && v[n] <= 'Z' || v[n] == '-' || v[n] == '_') {
			n++
		}
		if asciiEqualFold(v[:n], agent) {
			everSpecific, seenSpecific = true, true
		}
	}
	emit := func(ln int, raw []byte) {
		s := string(raw)
		if i := strings.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		s = strings.Trim(s, " \t\n\v\f\r")
		sep := strings.IndexByte(s, ':')
		if sep < 0 {
			sep = strings.IndexAny(s, " \t")
			if sep >= 0 {
				val := strings.TrimLeft(s[sep:], " \t")
				if strings.ContainsAny(val, " \t") {
					return
				}
			}
		}
		if sep < 0 {
			return
		}
		key := strings.Trim(s[:sep], " \t\n\v\f\r")
		if key == "" {
			return
		}
		val := strings.Trim(s[sep+1:], " \t\n\v\f\r")
		has := func(p ...string) bool {
			for _, x := range p {
				if len(key) >= len(x) && asciiEqualFold(key[:len(x)], x) {
					return true
				}
			}
			return false
		}
		switch {
		case has("user-agent", "useragent", "user agent"):
			handleUA(val)
		case has("allow"):
			handleAllow(ln, refEscape(val))
		case has("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"):
			handleDisallow(ln, refEscape(val))
		}
	}

	bom := []byte{0xEF, 0xBB, 0xBF}
	bomPos := 0
	var buf []byte
	lineNum := 0
	lastCR := false
	for i := 0; i < len(body); i++ {
		ch := body[i]
		if bomPos < 3 {
			b := bom[bomPos]
			bomPos++
			if ch == b {
				continue
			}
		}
		bomPos = 3
		if ch != '\n' && ch != '\r' {
			if len(buf) < 2083*8-1 {
				buf = append(buf, ch)
			}
			continue
		}
		if !(len(buf) == 0 && lastCR && ch == '\n') {
			lineNum++
			emit(lineNum, buf)
		}
		buf = buf[:0]
		lastCR = ch == '\r'
	}
	lineNum++
	emit(lineNum, buf)

	higher := func(d, a match) int {
		if d.prio > a.prio {
			return d.line
		}
		return a.line
	}
	switch {
	case allowS.prio > 0 || disS.prio > 0:
		allowed = !(disS.prio > allowS.prio)
	case everSpecific:
		allowed = true
	case disG.prio > 0 || allowG.prio > 0:
		allowed = !(disG.prio > allowG.prio)
	default:
		allowed = true
	}
	if everSpecific {
		return allowed, higher(disS, allowS)
	}
	return allowed, higher(disG, allowG)
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// refMatches is the reference's Matches: a set of positions advanced one
// pattern byte at a time.
func refMatches(path, pattern string) bool {
	pos := make([]int, len(path)+1)
	numpos := 1
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c == '$' && i+1 == len(pattern) {
			return pos[numpos-1] == len(path)
		}
		if c == '*' {
			numpos = len(path) - pos[0] + 1
			for j := 1; j < numpos; j++ {
				pos[j] = pos[j-1] + 1
			}
			continue
		}
		n := 0
		for j := 0; j < numpos; j++ {
			if pos[j] < len(path) && path[pos[j]] == c {
				pos[n] = pos[j] + 1
				n++
			}
		}
		numpos = n
		if numpos == 0 {
			return false
		}
	}
	return true
}

// refEscape is the reference's MaybeEscapePattern.
func refEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHexRef(s[i+1]) && isHexRef(s[i+2]) {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(s[i+1 : i+3]))
			i += 2
		} else if c&0x80 != 0 {
			b.WriteByte('%')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHexRef(c byte) bool { return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0 }
