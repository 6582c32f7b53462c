package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkTrackedConnWrite: a write to a connection the listener's
// server still serves, held to a stall bound (a write deadline set before
// it) or not, over real loopback TCP drained by a reader: the bound adds
// no allocation.
func BenchmarkTrackedConnWrite(b *testing.B) {
	for _, stall := range []time.Duration{0, 90 * time.Second} {
		b.Run(map[bool]string{false: "unbounded", true: "bounded"}[stall > 0], func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			t := newConnTracker(1, stall)
			l := t.wrap(ln)
			go func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					return
				}
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
			c, err := l.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			p := make([]byte, 512) // a small kept-alive answer
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := c.Write(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
