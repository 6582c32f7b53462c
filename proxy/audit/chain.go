package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
)

// The audit log's chain (docs/auditors.md). Every line carries prev: the
// hex SHA-256 of the bytes of the line before it, without its trailing
// newline. The first line of a file continues from the last line of the
// file before it (after a rotation), or from ZeroHead at the very start
// of a chain. A checkpoint line signs the head of the chain, the hash of
// the line before it.

// ZeroHead is the prev of the first line of a chain: 64 zeros.
const ZeroHead = "0000000000000000000000000000000000000000000000000000000000000000"

// MaxLine bounds an audit line, for the Log reading a file's last line
// and for Verify: a line longer than 1 MiB is not one robotsgate wrote.
const MaxLine = 1 << 20

// Hash is the SHA-256 of one line's bytes, without its trailing newline.
type Hash [sha256.Size]byte

// LineHash returns the hash of line, a line with or without its "\n".
func LineHash(line []byte) Hash {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	return sha256.Sum256(line)
}

// String is h in lower-case hex, as prev and head write it.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash reads a hash written in hex.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("%q is not a SHA-256 in hex (64 hex digits)", s)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("%q is not a SHA-256 in hex (64 hex digits)", s)
	}
	return h, nil
}

// checkpointDomain prefixes what a checkpoint signs, so that a signature
// made with an [identity] key can never be taken for an HTTP message
// signature (whose signature base starts with a component name in quotes)
// nor for anything else that key signs.
const checkpointDomain = "robotsgate audit checkpoint v1\n"

// SignedMessage is what a checkpoint's sig signs: "robotsgate audit
// checkpoint v1\n" followed by the head in hex.
func SignedMessage(head string) []byte { return []byte(checkpointDomain + head) }

// Sign signs head with priv: the sig of a checkpoint, in standard base64.
func Sign(priv ed25519.PrivateKey, head string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(priv, SignedMessage(head)))
}

// VerifySig reports whether sig (standard base64) is pub's signature of
// head.
func VerifySig(pub ed25519.PublicKey, head, sig string) bool {
	b, err := base64.StdEncoding.DecodeString(sig)
	return err == nil && len(b) == ed25519.SignatureSize && ed25519.Verify(pub, SignedMessage(head), b)
}

// The events of a checkpoint.
const (
	EventStart    = "start"    // the process opened the log: signs the head it continues from
	EventInterval = "interval" // checkpoint_interval passed with lines written
	EventRotate   = "rotate"   // written to the old file at a reopen, before the switch
	EventShutdown = "shutdown" // the log was closed
)

// MsgCheckpoint is a checkpoint line's msg.
const MsgCheckpoint Msg = "checkpoint"

// Checkpoint is a signed checkpoint line: lines written by this process
// since its previous checkpoint (not counting checkpoints), head (the
// hash of the line before, equal to its prev) and sig, Ed25519 over
// SignedMessage(head) with the key whose JWK thumbprint is Key.
type Checkpoint struct {
	Time  Time   `json:"time"`
	Level string `json:"level"` // "INFO"
	Msg   Msg    `json:"msg"`   // "checkpoint"
	Prev  string `json:"prev"`
	Event string `json:"event"`
	Lines int    `json:"lines"`
	Head  string `json:"head"`
	Sig   string `json:"sig"`
	Key   string `json:"key"`
}

// tail is what tailOf finds at the end of a file.
type tail struct {
	head  Hash // its last line's hash
	empty bool // the file has no line
	cut   bool // its last line had no "\n": tailOf ended it
}

// tailOf returns the hash of f's last line, and whether f is empty. A
// last line cut short (a write that a kill -9 or a full disk left without
// its "\n") is ended with "\n" first, so that it stays a line of its own,
// which the chain then continues from (verify reports it). f is open for
// reading and appending.
func tailOf(f *os.File) (tail, error) {
	info, err := f.Stat()
	if err != nil {
		return tail{}, err
	}
	if info.Size() == 0 {
		return tail{empty: true}, nil
	}
	h, ended, err := tailHash(f, info.Size())
	if err != nil {
		return tail{}, err
	}
	if !ended {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return tail{}, fmt.Errorf("end its last line, cut short: %w", err)
		}
	}
	return tail{head: h, cut: !ended}, nil
}

// headFile is what <state_dir>/audit-head remembers: the chain's head
// when it was written, and the file it was the last line of.
type headFile struct {
	Path string `json:"path"`
	Head string `json:"head"`
	Time Time   `json:"time"`
}

// readHead returns the head remembered at path; ok false when there is
// none (no file).
func readHead(path string) (h Hash, ok bool, err error) {
	b, err := statefile.ReadFile(path, 4<<10)
	if errors.Is(err, os.ErrNotExist) {
		return h, false, nil
	}
	if err != nil {
		return h, false, err
	}
	var hf headFile
	if err := json.Unmarshal(b, &hf); err != nil {
		return h, false, fmt.Errorf("%s: %w", path, err)
	}
	if h, err = ParseHash(hf.Head); err != nil {
		return h, false, fmt.Errorf("%s: head: %w", path, err)
	}
	return h, true, nil
}

// writeHead remembers head at path, written whole (beside, then renamed).
func writeHead(path, file string, head Hash, t time.Time) error {
	b, _ := json.Marshal(headFile{Path: file, Head: head.String(), Time: Time(t)}) // strings only
	return replaceFile(path, append(b, '\n'), 0o600)
}

// replaceFile writes data to path whole (statefile.WriteFile), making its
// directory (0700) first.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return statefile.WriteFile(path, data, mode)
}
