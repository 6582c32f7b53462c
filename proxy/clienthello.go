package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A TLS ClientHello, read far enough to know the site a name-based server
// will serve (tunnel mode, docs/decision.md step 9): its server name (SNI), and
// whether it carries Encrypted Client Hello, whose inner, real server
// name cannot be seen.

// TLS record and handshake constants (RFC 8446).
const (
	recordHandshake      = 0x16
	handshakeClientHello = 0x01
	extServerName        = 0x0000
	extECH               = 0xfe0d // encrypted_client_hello (RFC 9849)
	hostNameType         = 0x00
	maxRecord            = 1<<14 + 256 // a record's fragment, with room for a compressed one
	maxHello             = 1 << 16     // the most of a ClientHello read: real ones are a few KiB
)

// errNotHello says the bytes are not a TLS ClientHello that can be read.
var errNotHello = errors.New("not a TLS ClientHello")

// readClientHello reads, from r, the TLS records that carry the first
// handshake message (a ClientHello may span several) and returns every
// byte read, to be relayed as it came, and the message itself.
func readClientHello(r io.Reader) (read, hello []byte, err error) {
	var header [5]byte
	for {
		if _, err := io.ReadFull(r, header[:]); err != nil {
			return read, nil, fmt.Errorf("%w: %v", errNotHello, err)
		}
		read = append(read, header[:]...)
		n := int(binary.BigEndian.Uint16(header[3:]))
		// crypto/tls takes any version below 16.0 on a first record, and
		// a name-based server behind the tunnel is read as it reads.
		if header[0] != recordHandshake || header[1] >= 0x10 || n == 0 || n > maxRecord {
			return read, nil, fmt.Errorf("%w: record type %#x, version %d.%d, length %d", errNotHello, header[0], header[1], header[2], n)
		}
		start := len(read)
		read = append(read, make([]byte, n)...)
		if got, err := io.ReadFull(r, read[start:]); err != nil {
			return read[:start+got], nil, fmt.Errorf("%w: %v", errNotHello, err)
		}
		hello = append(hello, read[start:]...)
		if len(hello) >= 4 {
			if hello[0] != handshakeClientHello {
				return read, nil, fmt.Errorf("%w: handshake type %d", errNotHello, hello[0])
			}
			size := 4 + (int(hello[1])<<16 | int(hello[2])<<8 | int(hello[3]))
			if size > maxHello {
				return read, nil, fmt.Errorf("%w: %d bytes", errNotHello, size)
			}
			if len(hello) >= size {
				return read, hello[:size], nil
			}
		}
		if len(read) > maxHello+5*64 {
			return read, nil, fmt.Errorf("%w: longer than %d bytes", errNotHello, maxHello)
		}
	}
}

// helloInfo is what a ClientHello says of the site it is for.
type helloInfo struct {
	serverName string // the host_name of its server_name extension, as sent; "" if none
	ech        bool   // it carries encrypted_client_hello: the real server name is inside
}

// parseClientHello reads a ClientHello handshake message (its 4-byte
// header included). It refuses what a careful server refuses: lengths
// that do not add up, an extension twice, a server_name list with two
// host names or an empty one.
func parseClientHello(msg []byte) (helloInfo, error) {
	var info helloInfo
	if len(msg) < 4 || msg[0] != handshakeClientHello {
		return info, errNotHello
	}
	s := cursor(msg[4:])
	if !s.skip(2+32) || !s.skipVector(1) || !s.skipVector(2) || !s.skipVector(1) {
		return info, fmt.Errorf("%w: truncated", errNotHello)
	}
	if len(s) == 0 {
		return info, nil // no extensions
	}
	exts, ok := s.vector(2)
	if !ok || len(s) != 0 {
		return info, fmt.Errorf("%w: extensions' length", errNotHello)
	}
	seen := map[uint16]bool{}
	for len(exts) > 0 {
		typ, ok := exts.uint16()
		if !ok {
			return info, fmt.Errorf("%w: extension type", errNotHello)
		}
		data, ok := exts.vector(2)
		if !ok {
			return info, fmt.Errorf("%w: extension %#x's length", errNotHello, typ)
		}
		if seen[typ] {
			return info, fmt.Errorf("%w: extension %#x twice", errNotHello, typ)
		}
		seen[typ] = true
		switch typ {
		case extECH:
			info.ech = true
		case extServerName:
			name, err := serverNameOf(data)
			if err != nil {
				return info, err
			}
			info.serverName = name
		}
	}
	return info, nil
}

// serverNameOf reads a server_name extension's data (RFC 6066 section 3):
// one host_name, not empty.
func serverNameOf(data cursor) (string, error) {
	list, ok := data.vector(2)
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", fmt.Errorf("%w: server_name list", errNotHello)
	}
	name := ""
	for len(list) > 0 {
		typ, ok := list.uint8()
		if !ok {
			return "", fmt.Errorf("%w: server_name entry", errNotHello)
		}
		v, ok := list.vector(2)
		if !ok {
			return "", fmt.Errorf("%w: server_name entry's length", errNotHello)
		}
		if typ != hostNameType {
			continue // a name type of the future: not a host name
		}
		if name != "" || len(v) == 0 {
			return "", fmt.Errorf("%w: server_name with two host names, or an empty one", errNotHello)
		}
		name = string(v)
	}
	return name, nil
}

// cursor reads a TLS message front to back.
type cursor []byte

func (c *cursor) skip(n int) bool {
	if len(*c) < n {
		return false
	}
	*c = (*c)[n:]
	return true
}

func (c *cursor) uint8() (byte, bool) {
	if len(*c) < 1 {
		return 0, false
	}
	v := (*c)[0]
	*c = (*c)[1:]
	return v, true
}

func (c *cursor) uint16() (uint16, bool) {
	if len(*c) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*c)
	*c = (*c)[2:]
	return v, true
}

// vector reads a vector whose length takes size bytes (1 or 2).
func (c *cursor) vector(size int) (cursor, bool) {
	if len(*c) < size {
		return nil, false
	}
	n := int((*c)[0])
	if size == 2 {
		n = int(binary.BigEndian.Uint16(*c))
	}
	*c = (*c)[size:]
	if len(*c) < n {
		return nil, false
	}
	v := (*c)[:n]
	*c = (*c)[n:]
	return v, true
}

func (c *cursor) skipVector(size int) bool {
	_, ok := c.vector(size)
	return ok
}
