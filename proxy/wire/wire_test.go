package wire

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCopyFlushing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body    string
		length  int64
		want    string
		wantErr bool
		flushes int
	}{
		{"hello", -1, "hello", false, 1},
		{"hello", 5, "hello", false, 0}, // whole: sent with its head, no flush
		{"hello!", 5, "hello", true, 0}, // longer than said: cut
		{"hell", 5, "hell", false, 1},   // shorter: the caller sees n < length
		{"", -1, "", false, 0},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		flushes := 0
		n, err := CopyFlushing(&out, func() error { flushes++; return nil }, strings.NewReader(tt.body), tt.length)
		if out.String() != tt.want || n != int64(len(tt.want)) || (err != nil) != tt.wantErr || flushes != tt.flushes {
			t.Errorf("CopyFlushing(%q, %d) = %q, %d, %v, %d flushes; want %q, error %v, %d flushes",
				tt.body, tt.length, out.String(), n, err, flushes, tt.want, tt.wantErr, tt.flushes)
		}
	}
}

func TestBufferedConnAndRelay(t *testing.T) {
	t.Parallel()
	client, proxySide := net.Pipe()
	origin, upstream := net.Pipe()
	br := bufio.NewReader(proxySide)
	done := make(chan struct{})
	go func() {
		if _, err := br.Peek(1); err != nil { // a byte taken before the relay
			t.Errorf("Peek: %v", err)
		}
		Relay(&BufferedConn{Conn: proxySide, R: br}, upstream)
		close(done)
	}()
	client.Write([]byte("ping"))
	got := make([]byte, 4)
	origin.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(origin, got); err != nil || string(got) != "ping" {
		t.Fatalf("origin read %q, %v; want %q", got, err, "ping")
	}
	origin.Close() // one side ends: the relay closes the other
	<-done
	if _, err := client.Read(got); err == nil {
		t.Error("client side still open after the relay ended")
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]string{"[::ffff:10.0.0.1]:5": "10.0.0.1", "[::1]:80": "::1", "pipe": "invalid IP"} {
		if got := ClientAddr(&http.Request{RemoteAddr: remote}).String(); got != want {
			t.Errorf("ClientAddr(%q) = %s; want %s", remote, got, want)
		}
	}
}
