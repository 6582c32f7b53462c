package report

import (
	"io"
	"strconv"
	"time"
)

// genDecisions are the synthetic records' decisions, in proportion.
var genDecisions = []struct{ decision, msg string }{
	{"allowed", "allowed"}, {"allowed", "allowed"}, {"allowed", "allowed"}, {"allowed", "allowed"},
	{"disallowed", "blocked"}, {"disallowed", "blocked"}, {"would-block", "would-block"},
	{"denied", "override"}, {"paced", "paced"}, {"unreachable", "unreachable"},
	{"upstream-error", "refused"}, {"auth-required", "refused"}, {"private-address", "refused"},
}

// genStart is the time of the first synthetic record.
var genStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// gen describes a synthetic audit log with proxy-like fields.
type gen struct {
	lines   int           // records to write
	origins int           // distinct origins, used in turn
	step    time.Duration // between records' times
}

// decision returns the decision of record i.
func (g gen) decision(i int) string { return genDecisions[i%len(genDecisions)].decision }

// appendLine appends record i, newline included, as proxy.Audit writes it.
func (g gen) appendLine(b []byte, i int) []byte {
	d := genDecisions[i%len(genDecisions)]
	var hb, tb, rb [32]byte
	host := strconv.AppendInt(append(hb[:0], "site"...), int64(i%g.origins), 10)
	host = append(host, ".example"...)
	token := strconv.AppendInt(append(tb[:0], "Bot"...), int64(i%7), 10)
	rule := rb[:0]
	if d.decision == "disallowed" || d.decision == "would-block" {
		rule = strconv.AppendInt(append(rule, "disallow: /private/"...), int64(i%11), 10)
	}
	level := "WARN"
	if d.decision == "allowed" {
		level = "INFO"
	}
	b = append(b, `{"time":"`...)
	b = genStart.Add(time.Duration(i)*g.step).AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","level":"`...)
	b = append(b, level...)
	b = append(b, `","msg":"`...)
	b = append(b, d.msg...)
	b = append(b, `","client":"10.0.0.7","user":"","method":"GET","url":"https://`...)
	b = append(b, host...)
	b = append(b, `/private/page?id=`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","path":"/private/page?id=`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","origin":"https://`...)
	b = append(b, host...)
	b = append(b, `:443","user_agent":"Mozilla/5.0 (compatible; `...)
	b = append(b, token...)
	b = append(b, `/1.0; +https://example.org/bot)","agent":["`...)
	b = append(b, token...)
	b = append(b, `"],"token":"`...)
	b = append(b, token...)
	b = append(b, `","purpose":[],"robots_url":"https://`...)
	b = append(b, host...)
	b = append(b, `/robots.txt","rule":"`...)
	b = append(b, rule...)
	b = append(b, `","line":2,"status":403,"decision":"`...)
	b = append(b, d.decision...)
	b = append(b, `","reason":"disallowed by robots.txt"}`+"\n"...)
	return b
}

// reader streams the synthetic log, generating it as it is read.
func (g gen) reader() *genReader { return &genReader{g: g} }

// genReader is an io.Reader of a gen's lines.
type genReader struct {
	g   gen
	i   int
	buf []byte
	off int
	n   int64 // bytes read
}

func (r *genReader) Read(p []byte) (int, error) {
	if r.off == len(r.buf) {
		if r.i == r.g.lines {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for ; r.i < r.g.lines && len(r.buf) < 32<<10; r.i++ {
			r.buf = r.g.appendLine(r.buf, r.i)
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	r.n += int64(n)
	return n, nil
}
