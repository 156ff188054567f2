// Package session is what a job's tasks receive of their Juice session: the task environment (Env) and the
// sealed session file that carries it from the controller to the compute node (Seal, Open).
//
// The file is sealed with AES-256-GCM under the cluster key. Its layout (test/vectors/README.md section 4) is a
// clear header line, authenticated as associated data, then the nonce and the ciphertext:
//
//	JUICE-SESSION v2 cluster=<cluster> job=<job id> run=<restart count> reservation=<uuid> key=<key id>\n
//	<12-byte nonce><ciphertext and tag>
//
// Binding the header into the tag is what stops a file from being replayed for another job, run, cluster or
// reservation. The key id (KeyID) names the key that sealed it, so that a key can be rotated while files sealed
// under the previous one are still opened (KeyFile). The plaintext is NAME=VALUE lines that the SPANK plugin
// copies into the task environment: the C side stays a verifier and a copier, and every decision about what a
// task sees is made here, in Go.
//
// Files of version 1 (the same header without reservation and key) are still opened, under any known key: they
// were sealed by a controller older than this one, for a run made ready before an upgrade that may still be
// running; refusing them would fail that run's later steps. Nothing writes them any more.
package session

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/reconcile/session/filename"
)

const (
	magic   = "JUICE-SESSION v2"
	magicV1 = "JUICE-SESSION v1"
)

// MaxFile bounds a session file; the plugin refuses anything larger.
const MaxFile = 64 << 10

// A Binding names the one run a session file opens for, and the reservation that made it.
type Binding struct {
	Cluster string
	JobID   uint32
	Run     int
	// Reservation is the reservation whose session the file carries. Seal requires it; Open checks it unless it
	// is uuid.Nil (the compute node does not know it).
	Reservation uuid.UUID
}

func (b Binding) String() string { return fmt.Sprintf("%s/%d.%d", b.Cluster, b.JobID, b.Run) }

// FileName is the file's name inside the shared state directory (package filename holds it, for the hook).
func FileName(b Binding) string { return filename.Of(b.JobID, b.Run) }

// ParseFileName is FileName's inverse: the job and run of a state directory entry, or ok false for any other
// name (a temporary file of the prolog, say).
func ParseFileName(name string) (job uint32, run int, ok bool) { return filename.Parse(name) }

func header(b Binding, keyID string) string {
	return fmt.Sprintf("%s cluster=%s job=%d run=%d reservation=%s key=%s", magic, b.Cluster, b.JobID, b.Run, b.Reservation, keyID)
}

// keyIDLabel makes a key id something no other use of the key's hash can produce.
const keyIDLabel = "juice-slurm session key id\n"

// KeyID names a key without revealing it: the first 8 bytes of SHA-256 over a fixed label and the key, in
// hexadecimal (16 characters). The C plugin computes the same (juice_key_id).
func KeyID(key []byte) string {
	h := sha256.Sum256(append([]byte(keyIDLabel), key...))
	return hex.EncodeToString(h[:8])
}

// An EnvVar is one line of a session's environment.
type EnvVar struct{ Name, Value string }

var envName = regexp.MustCompile(`^JUICE_[A-Z0-9_]+$`)

// PreviousSuffix names the previous key's file beside the current one: cluster.key.previous. The controller and
// the plugin open files sealed under either; only the current one seals.
const PreviousSuffix = ".previous"

// KeyFile is the cluster key file: 64 hexadecimal characters (openssl rand -hex 32), a secret file (mode 0600,
// re-read when it changes), and beside it the previous key's file (path + PreviousSuffix), which may be absent.
// Whoever reads them can open every job's session.
func KeyFile(path string) *Key {
	return &Key{f: secretfile.New(path, checkKey), prev: secretfile.New(path+PreviousSuffix, checkKey)}
}

// Key is the cluster key, read from its file, and the previous key, if any.
type Key struct{ f, prev *secretfile.File }

// Bytes returns the current key's 32 bytes, as the file holds them now: the one that seals.
func (k *Key) Bytes() ([]byte, error) {
	v, err := k.f.Value()
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	return hex.DecodeString(v)
}

// Previous returns the previous key's 32 bytes, or nil when there is no previous key file. A previous key file
// that is there but bad (its mode, its content) is an error, never taken for an absent one.
func (k *Key) Previous() ([]byte, error) {
	v, err := k.prev.Value()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("previous cluster key: %w", err)
	}
	return hex.DecodeString(v)
}

// All returns the keys a session file may be sealed under: the current one, then the previous one if any.
func (k *Key) All() ([][]byte, error) {
	cur, err := k.Bytes()
	if err != nil {
		return nil, err
	}
	prev, err := k.Previous()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return [][]byte{cur}, nil
	}
	return [][]byte{cur, prev}, nil
}

// CheckKey validates a cluster key file's value (64 hexadecimal characters).
func CheckKey(v string) error { return checkKey(v) }

func checkKey(v string) error {
	if len(v) != 64 {
		return fmt.Errorf("want 64 hexadecimal characters (openssl rand -hex 32), found %d characters", len(v))
	}
	if _, err := hex.DecodeString(v); err != nil {
		return fmt.Errorf("not hexadecimal")
	}
	return nil
}

// Seal seals a run's session environment under key, the current cluster key, for the run and reservation b.
func Seal(key []byte, b Binding, env []EnvVar) ([]byte, error) {
	if strings.ContainsAny(b.Cluster, " \n=") || b.Cluster == "" {
		return nil, fmt.Errorf("seal session for %s: bad cluster name %q", b, b.Cluster)
	}
	if b.Reservation == uuid.Nil {
		return nil, fmt.Errorf("seal session for %s: no reservation named", b)
	}
	var plain bytes.Buffer
	for _, v := range env {
		if !envName.MatchString(v.Name) {
			return nil, fmt.Errorf("seal session for %s: %q is not a JUICE_ variable name", b, v.Name)
		}
		if strings.ContainsAny(v.Value, "\x00\n") {
			return nil, fmt.Errorf("seal session for %s: the value of %s holds a NUL or newline", b, v.Name)
		}
		plain.WriteString(v.Name + "=" + v.Value + "\n")
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	h := header(b, KeyID(key))
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal session: nonce: %w", err)
	}
	out := make([]byte, 0, len(h)+1+len(nonce)+plain.Len()+aead.Overhead())
	out = append(out, h...)
	out = append(out, '\n')
	out = append(out, nonce...)
	out = aead.Seal(out, nonce, plain.Bytes(), []byte(h))
	if len(out) > MaxFile {
		return nil, fmt.Errorf("seal session for %s: %d bytes, more than %d", b, len(out), MaxFile)
	}
	return out, nil
}

// Open verifies and decrypts a session file for the run want, as the SPANK plugin does on the compute node:
// the header must name want's cluster, job and run (and its reservation, unless want.Reservation is uuid.Nil),
// and the key it names must be one of keys (the current and the previous key). It is the Go twin of the C
// opener, for tests, fuzzing and the tools.
func Open(data []byte, want Binding, keys ...[]byte) ([]EnvVar, error) {
	if len(data) > MaxFile {
		return nil, fmt.Errorf("session file: %d bytes, more than %d", len(data), MaxFile)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("session file: no header line")
	}
	h := string(data[:nl])
	got, err := ParseHeader(h)
	if err != nil {
		return nil, err
	}
	if got.Binding.Cluster != want.Cluster || got.Binding.JobID != want.JobID || got.Binding.Run != want.Run {
		return nil, fmt.Errorf("session file is for %s, not %s", got.Binding, want)
	}
	if want.Reservation != uuid.Nil && got.Version == 2 && got.Binding.Reservation != want.Reservation {
		return nil, fmt.Errorf("session file for %s is of reservation %s, not %s (a stale file)", want, got.Binding.Reservation, want.Reservation)
	}
	if want.Reservation != uuid.Nil && got.Version == 1 {
		return nil, fmt.Errorf("session file for %s is of version 1, which names no reservation, and reservation %s was asked for", want, want.Reservation)
	}
	// Which keys to try: the one the header names, or for version 1 (which names none) each.
	try := keys
	if got.Version == 2 {
		try = nil
		for _, k := range keys {
			if KeyID(k) == got.KeyID {
				try = [][]byte{k}
				break
			}
		}
		if try == nil {
			ids := make([]string, len(keys))
			for i, k := range keys {
				ids[i] = KeyID(k)
			}
			return nil, fmt.Errorf("session file for %s: sealed under key %s, not a known key (%s): rotated out, or another cluster's", want, got.KeyID, strings.Join(ids, ", "))
		}
	}
	body := data[nl+1:]
	var plain []byte
	opened := false
	for _, key := range try {
		aead, err := newAEAD(key)
		if err != nil {
			return nil, err
		}
		if len(body) < aead.NonceSize()+aead.Overhead() {
			return nil, fmt.Errorf("session file for %s: truncated", want)
		}
		if plain, err = aead.Open(nil, body[:aead.NonceSize()], body[aead.NonceSize():], []byte(h)); err == nil {
			opened = true
			break
		}
	}
	if !opened {
		return nil, fmt.Errorf("session file for %s: does not verify under the cluster key (tampered, or sealed with another key)", want)
	}
	var env []EnvVar
	for _, line := range strings.SplitAfter(string(plain), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			return nil, fmt.Errorf("session file for %s: last line not terminated", want)
		}
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok || !envName.MatchString(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("session file for %s: bad line %s", want, clip(line))
		}
		env = append(env, EnvVar{k, v})
	}
	return env, nil
}

// A Header is what a session file's clear header line says.
type Header struct {
	Version int // 1 or 2
	Binding Binding
	KeyID   string // version 2 only
}

var (
	headerRE   = regexp.MustCompile(`^JUICE-SESSION v2 cluster=([^ =\n]+) job=([0-9]{1,10}) run=([0-9]{1,9}) reservation=([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) key=([0-9a-f]{16})$`)
	headerV1RE = regexp.MustCompile(`^JUICE-SESSION v1 cluster=([^ =\n]+) job=([0-9]{1,10}) run=([0-9]{1,9})$`)
)

// ParseHeader parses a session file's header line (without its newline).
func ParseHeader(h string) (Header, error) {
	out := Header{Version: 2}
	m := headerRE.FindStringSubmatch(h)
	if m == nil {
		out.Version = 1
		m = headerV1RE.FindStringSubmatch(h)
	}
	if m == nil {
		if strings.HasPrefix(h, "JUICE-SESSION ") && !strings.HasPrefix(h, magic+" ") && !strings.HasPrefix(h, magicV1+" ") {
			return Header{}, fmt.Errorf("session file: unknown version in header %s", clip(h))
		}
		return Header{}, fmt.Errorf("session file: bad header %s", clip(h))
	}
	job, err := strconv.ParseUint(m[2], 10, 32)
	if err != nil || (len(m[2]) > 1 && m[2][0] == '0') || (len(m[3]) > 1 && m[3][0] == '0') {
		return Header{}, fmt.Errorf("session file: bad job id or run in header %s", clip(h))
	}
	run, _ := strconv.Atoi(m[3])
	out.Binding = Binding{Cluster: m[1], JobID: uint32(job), Run: run}
	if out.Version == 2 {
		out.Binding.Reservation = uuid.MustParse(m[4])
		out.KeyID = m[5]
	}
	return out, nil
}

// HeaderOf parses the header of a whole session file.
func HeaderOf(data []byte) (Header, error) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return Header{}, fmt.Errorf("session file: no header line")
	}
	return ParseHeader(string(data[:nl]))
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("cluster key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	return cipher.NewGCM(block)
}

func clip(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strconv.Quote(s)
}

// A KeySource gives the cluster key as it is now: the one that seals.
type KeySource interface {
	Bytes() ([]byte, error)
}

// StaticKey is a key held in memory, for tests and tools.
func StaticKey(b []byte) KeySource { return staticKey(b) }

type staticKey []byte

func (k staticKey) Bytes() ([]byte, error) { return k, nil }
