package reconcile

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// A RunID names one run of a Slurm job: a requeued job is a new run, with the restart count one higher, and gets
// a reservation of its own.
type RunID struct {
	Cluster string
	JobID   uint32
	Run     int
}

func (r RunID) String() string { return fmt.Sprintf("%s/%d.%d", r.Cluster, r.JobID, r.Run) }

// The session file carries what a job's tasks need to reach their GPUs, sealed with AES-256-GCM under the
// cluster key. The layout (test/vectors/README.md) is a clear header line, authenticated as associated data, then
// the nonce and the ciphertext:
//
//	JUICE-SESSION v1 cluster=<cluster> job=<job id> run=<restart count>\n<12-byte nonce><ciphertext and tag>
//
// Binding the header into the tag is what stops a file from being replayed for another job, run or cluster.
// The plaintext is NAME=VALUE lines that the SPANK plugin copies into the task environment: the C side stays a
// verifier and a copier, and every decision about what a task sees is made here, in Go.
const sessionMagic = "JUICE-SESSION v1"

// MaxSessionFile bounds a session file; the plugin refuses anything larger.
const MaxSessionFile = 64 << 10

// An EnvVar is one line of a session's environment.
type EnvVar struct{ Name, Value string }

var envName = regexp.MustCompile(`^JUICE_[A-Z0-9_]+$`)

// SessionFileName is the file's name inside the shared state directory.
func SessionFileName(id RunID) string { return fmt.Sprintf("%d.%d.session", id.JobID, id.Run) }

func sessionHeader(id RunID) string {
	return fmt.Sprintf("%s cluster=%s job=%d run=%d", sessionMagic, id.Cluster, id.JobID, id.Run)
}

// LoadClusterKey reads the cluster key file: 64 hexadecimal characters, optionally followed by a newline. A key
// file that group or others may read is refused: whoever reads it can open every job's session.
func LoadClusterKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster key %s: mode %#o lets group or others read it; chmod 600 it", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	return ParseClusterKey(raw, path)
}

// ParseClusterKey decodes a key file's content; name is used in errors.
func ParseClusterKey(raw []byte, name string) ([]byte, error) {
	s := strings.TrimSuffix(string(raw), "\n")
	if len(s) != 64 {
		return nil, fmt.Errorf("cluster key %s: want 64 hexadecimal characters (openssl rand -hex 32), found %d characters", name, len(s))
	}
	key, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("cluster key %s: not hexadecimal: %w", name, err)
	}
	return key, nil
}

// SealSession seals a run's session environment under the cluster key.
func SealSession(key []byte, id RunID, env []EnvVar) ([]byte, error) {
	if strings.ContainsAny(id.Cluster, " \n=") || id.Cluster == "" {
		return nil, fmt.Errorf("seal session for %s: bad cluster name %q", id, id.Cluster)
	}
	var plain bytes.Buffer
	for _, v := range env {
		if !envName.MatchString(v.Name) {
			return nil, fmt.Errorf("seal session for %s: %q is not a JUICE_ variable name", id, v.Name)
		}
		if strings.ContainsAny(v.Value, "\x00\n") {
			return nil, fmt.Errorf("seal session for %s: the value of %s holds a NUL or newline", id, v.Name)
		}
		plain.WriteString(v.Name + "=" + v.Value + "\n")
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	header := sessionHeader(id)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal session: nonce: %w", err)
	}
	out := make([]byte, 0, len(header)+1+len(nonce)+plain.Len()+aead.Overhead())
	out = append(out, header...)
	out = append(out, '\n')
	out = append(out, nonce...)
	out = aead.Seal(out, nonce, plain.Bytes(), []byte(header))
	if len(out) > MaxSessionFile {
		return nil, fmt.Errorf("seal session for %s: %d bytes, more than %d", id, len(out), MaxSessionFile)
	}
	return out, nil
}

// OpenSession verifies and decrypts a session file for the run want, as the SPANK plugin does on the compute
// node. It is the Go twin of the C opener, kept for tests, fuzzing and `juice-slurm describe`.
func OpenSession(key []byte, data []byte, want RunID) ([]EnvVar, error) {
	if len(data) > MaxSessionFile {
		return nil, fmt.Errorf("session file: %d bytes, more than %d", len(data), MaxSessionFile)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("session file: no header line")
	}
	header := string(data[:nl])
	got, err := parseSessionHeader(header)
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
	plain, err := aead.Open(nil, body[:aead.NonceSize()], body[aead.NonceSize():], []byte(header))
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
			return nil, fmt.Errorf("session file for %s: bad line %q", want, clip(line))
		}
		env = append(env, EnvVar{k, v})
	}
	return env, nil
}

var headerRE = regexp.MustCompile(`^JUICE-SESSION v1 cluster=([^ =\n]+) job=([0-9]{1,10}) run=([0-9]{1,9})$`)

func parseSessionHeader(h string) (RunID, error) {
	m := headerRE.FindStringSubmatch(h)
	if m == nil {
		if strings.HasPrefix(h, "JUICE-SESSION ") && !strings.HasPrefix(h, sessionMagic+" ") {
			return RunID{}, fmt.Errorf("session file: unknown version in header %q", clip(h))
		}
		return RunID{}, fmt.Errorf("session file: bad header %q", clip(h))
	}
	job, err := strconv.ParseUint(m[2], 10, 32)
	if err != nil {
		return RunID{}, fmt.Errorf("session file: bad job id %q", m[2])
	}
	run, _ := strconv.Atoi(m[3])
	return RunID{Cluster: m[1], JobID: uint32(job), Run: run}, nil
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
