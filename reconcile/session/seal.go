// Package session is what a job's tasks receive of their Juice session: the task environment (Env) and the
// sealed session file that carries it from the controller to the compute node (Seal, Open).
//
// The file is sealed with AES-256-GCM under the cluster key. Its layout (test/vectors/README.md section 4) is a
// clear header line, authenticated as associated data, then the nonce and the ciphertext:
//
//	JUICE-SESSION v1 cluster=<cluster> job=<job id> run=<restart count>\n<12-byte nonce><ciphertext and tag>
//
// Binding the header into the tag is what stops a file from being replayed for another job, run or cluster.
// The plaintext is NAME=VALUE lines that the SPANK plugin copies into the task environment: the C side stays a
// verifier and a copier, and every decision about what a task sees is made here, in Go.
package session

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

const magic = "JUICE-SESSION v1"

// MaxFile bounds a session file; the plugin refuses anything larger.
const MaxFile = 64 << 10

// A Binding names the one run a session file opens for.
type Binding struct {
	Cluster string
	JobID   uint32
	Run     int
}

func (b Binding) String() string { return fmt.Sprintf("%s/%d.%d", b.Cluster, b.JobID, b.Run) }

// FileName is the file's name inside the shared state directory.
func FileName(b Binding) string { return fmt.Sprintf("%d.%d.session", b.JobID, b.Run) }

func header(b Binding) string {
	return fmt.Sprintf("%s cluster=%s job=%d run=%d", magic, b.Cluster, b.JobID, b.Run)
}

// An EnvVar is one line of a session's environment.
type EnvVar struct{ Name, Value string }

var envName = regexp.MustCompile(`^JUICE_[A-Z0-9_]+$`)

// KeyFile is the cluster key file: 64 hexadecimal characters (openssl rand -hex 32), a secret file (mode 0600,
// re-read when it changes). Whoever reads it can open every job's session.
func KeyFile(path string) *Key { return &Key{f: secretfile.New(path, checkKey)} }

// Key is the cluster key, read from its file.
type Key struct{ f *secretfile.File }

// Bytes returns the key's 32 bytes, as the file holds them now.
func (k *Key) Bytes() ([]byte, error) {
	v, err := k.f.Value()
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	return hex.DecodeString(v)
}

func checkKey(v string) error {
	if len(v) != 64 {
		return fmt.Errorf("want 64 hexadecimal characters (openssl rand -hex 32), found %d characters", len(v))
	}
	if _, err := hex.DecodeString(v); err != nil {
		return fmt.Errorf("not hexadecimal")
	}
	return nil
}

// Seal seals a run's session environment under the cluster key.
func Seal(key []byte, b Binding, env []EnvVar) ([]byte, error) {
	if strings.ContainsAny(b.Cluster, " \n=") || b.Cluster == "" {
		return nil, fmt.Errorf("seal session for %s: bad cluster name %q", b, b.Cluster)
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
	h := header(b)
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

// Open verifies and decrypts a session file for the run want, as the SPANK plugin does on the compute node. It
// is the Go twin of the C opener, for tests, fuzzing and the tools.
func Open(key []byte, data []byte, want Binding) ([]EnvVar, error) {
	if len(data) > MaxFile {
		return nil, fmt.Errorf("session file: %d bytes, more than %d", len(data), MaxFile)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("session file: no header line")
	}
	h := string(data[:nl])
	got, err := parseHeader(h)
	if err != nil {
		return nil, err
	}
	if got != want {
		return nil, fmt.Errorf("session file is for %s, not %s", got, want)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	body := data[nl+1:]
	if len(body) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("session file for %s: truncated", want)
	}
	plain, err := aead.Open(nil, body[:aead.NonceSize()], body[aead.NonceSize():], []byte(h))
	if err != nil {
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

var headerRE = regexp.MustCompile(`^JUICE-SESSION v1 cluster=([^ =\n]+) job=([0-9]{1,10}) run=([0-9]{1,9})$`)

func parseHeader(h string) (Binding, error) {
	m := headerRE.FindStringSubmatch(h)
	if m == nil {
		if strings.HasPrefix(h, "JUICE-SESSION ") && !strings.HasPrefix(h, magic+" ") {
			return Binding{}, fmt.Errorf("session file: unknown version in header %s", clip(h))
		}
		return Binding{}, fmt.Errorf("session file: bad header %s", clip(h))
	}
	job, err := strconv.ParseUint(m[2], 10, 32)
	if err != nil {
		return Binding{}, fmt.Errorf("session file: bad job id %q", m[2])
	}
	run, _ := strconv.Atoi(m[3])
	return Binding{Cluster: m[1], JobID: uint32(job), Run: run}, nil
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

// A KeySource gives the cluster key as it is now.
type KeySource interface {
	Bytes() ([]byte, error)
}

// StaticKey is a key held in memory, for tests and tools.
func StaticKey(b []byte) KeySource { return staticKey(b) }

type staticKey []byte

func (k staticKey) Bytes() ([]byte, error) { return k, nil }
