package head

import (
	"io"
	"net/http"
	"sync"
)

// MayHaveTrailer reports whether resp's body can end with a trailer:
// HTTP/1 without chunked coding has none, and nothing is to be watched
// for (WatchTrailer).
func MayHaveTrailer(resp *http.Response) bool {
	return resp.ProtoMajor >= 2 || len(resp.TransferEncoding) > 0
}

// WatchTrailer has judge called once resp's body has ended, when its
// trailer states usage preferences. A trailer arrives with the body's
// end, after every byte of it went to the client: it cannot withhold
// them, and RFC 9110 (§6.5.1) lets no field move from a trailer into the
// header section unless its definition allows it, which X-Robots-Tag's
// does not. So judge only sees statements (to log and count them, for the
// operator to drop what was received); the trailer itself reaches the
// client as the origin sent it.
//
// What judge gets is a header section to judge as one would resp's: the
// trailer's fields that state usage preferences (X-Robots-Tag,
// Content-Usage, Content-Signal, Tdm-Reservation), the Content-Type of
// resp's header, and Tdm-Reservation "0" when the trailer has none (the
// reservation of tdmrep.json was judged with the header section: only
// the trailer's own statements are judged here). A trailer with none of
// those fields is not judged.
func WatchTrailer(resp *http.Response, judge func(statements http.Header)) {
	resp.Body = &trailerWatch{ReadCloser: resp.Body, resp: resp, judge: judge}
}

// trailerWatch calls judge with resp's trailer's statements once its body
// has ended (io.EOF), when the trailer has been read into resp.Trailer.
type trailerWatch struct {
	io.ReadCloser
	resp  *http.Response
	judge func(http.Header)
	once  sync.Once
}

func (w *trailerWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if err == io.EOF && w.resp.Trailer != nil {
		w.once.Do(w.judgeTrailer)
	}
	return n, err
}

// judgeTrailer calls judge with the statements of resp's trailer, if it
// has any.
func (w *trailerWatch) judgeTrailer() {
	h := http.Header{}
	// The fields that state usage preferences, as a header section's are
	// read.
	for _, name := range [...]string{"X-Robots-Tag", "Content-Usage", "Content-Signal", "Tdm-Reservation"} {
		if v := w.resp.Trailer[name]; len(v) > 0 {
			h[name] = v
		}
	}
	if len(h) == 0 {
		return
	}
	h["Content-Type"] = w.resp.Header["Content-Type"]
	if len(h["Tdm-Reservation"]) == 0 {
		h["Tdm-Reservation"] = []string{"0"}
	}
	w.judge(h)
}
