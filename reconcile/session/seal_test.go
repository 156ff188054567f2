package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/juice-slurm/juice-slurm/test/vectors"
	"github.com/stretchr/testify/require"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

var testRes = uuid.MustParse("0b8d3f3e-2a6c-4c55-9d0e-6f1d2b3c4d5e")

func TestSealOpen(t *testing.T) {
	id := Binding{Cluster: "c1", JobID: 42, Run: 1, Reservation: testRes}
	env := []EnvVar{{"JUICE_SESSION_ID", "abc"}, {"JUICE_CFG_OVERRIDE", `{"id":"abc","servers":["h:1"]}`}, {"JUICE_EMPTY", ""}}
	blob, err := Seal(testKey, id, env)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(blob), "JUICE-SESSION v2 cluster=c1 job=42 run=1 reservation="+testRes.String()+" key="+KeyID(testKey)+"\n"))
	got, err := Open(blob, id, testKey)
	require.NoError(t, err)
	require.Equal(t, env, got)
	// The compute node does not know the reservation: uuid.Nil does not check it.
	got, err = Open(blob, Binding{Cluster: "c1", JobID: 42, Run: 1}, testKey)
	require.NoError(t, err)
	require.Equal(t, env, got)

	for name, want := range map[string]Binding{
		"other job":     {Cluster: "c1", JobID: 43, Run: 1},
		"other run":     {Cluster: "c1", JobID: 42, Run: 0},
		"other cluster": {Cluster: "c2", JobID: 42, Run: 1},
	} {
		_, err := Open(blob, want, testKey)
		require.ErrorContains(t, err, "is for c1/42.1", name)
	}
	_, err = Open(blob, Binding{Cluster: "c1", JobID: 42, Run: 1, Reservation: uuid.New()}, testKey)
	require.ErrorContains(t, err, "of reservation "+testRes.String())
	h := header(id, KeyID(testKey))
	// A header rewritten to name another job, or another reservation, no longer verifies.
	for _, other := range []Binding{{"c1", 43, 1, testRes}, {"c1", 42, 1, uuid.New()}} {
		forged := append([]byte(header(other, KeyID(testKey))), blob[len(h):]...)
		_, err = Open(forged, other, testKey)
		require.ErrorContains(t, err, "does not verify")
	}
	// One flipped bit anywhere in the body.
	tampered := append([]byte(nil), blob...)
	tampered[len(tampered)-20] ^= 1
	_, err = Open(tampered, id, testKey)
	require.ErrorContains(t, err, "does not verify")
	_, err = Open(blob, id, []byte("another key of thirty-two bytes!"))
	require.ErrorContains(t, err, "not a known key")
	_, err = Open(blob[:len(h)+10], id, testKey)
	require.ErrorContains(t, err, "truncated")
	_, err = Seal(testKey, Binding{Cluster: "c1", JobID: 42, Run: 1}, env)
	require.ErrorContains(t, err, "no reservation")
}

// TestOpenDuringRotation: a file opens under the key its header names, current or previous; a key id no key
// has is refused by name; a key whose id is forged into the header does not open it.
func TestOpenDuringRotation(t *testing.T) {
	prev, cur := []byte("the previous cluster key, 32 B!!"), testKey
	id := Binding{Cluster: "c1", JobID: 7, Run: 0, Reservation: testRes}
	env := []EnvVar{{"JUICE_A", "1"}}
	old, err := Seal(prev, id, env)
	require.NoError(t, err)
	got, err := Open(old, id, cur, prev)
	require.NoError(t, err, "a file sealed before the rotation opens under the previous key")
	require.Equal(t, env, got)
	_, err = Open(old, id, cur)
	require.ErrorContains(t, err, "sealed under key "+KeyID(prev)+", not a known key ("+KeyID(cur)+")")
	// The header names the current key, the tag is the previous key's: refused, not tried with the other key.
	forged := []byte(strings.Replace(string(old), "key="+KeyID(prev), "key="+KeyID(cur), 1))
	_, err = Open(forged, id, cur, prev)
	require.ErrorContains(t, err, "does not verify")
	require.NotEqual(t, KeyID(prev), KeyID(cur))
	require.Regexp(t, `^[0-9a-f]{16}$`, KeyID(cur))
}

// TestOpenVersion1: a file an older controller sealed (no reservation, no key id) opens under any known key, for
// the runs made ready before an upgrade; never when a reservation is asked for.
func TestOpenVersion1(t *testing.T) {
	prev := []byte("the previous cluster key, 32 B!!")
	id := Binding{Cluster: "c1", JobID: 7, Run: 0}
	v1 := sealV1(t, prev, "JUICE-SESSION v1 cluster=c1 job=7 run=0", "JUICE_A=1\n")
	got, err := Open(v1, id, testKey, prev)
	require.NoError(t, err)
	require.Equal(t, []EnvVar{{"JUICE_A", "1"}}, got)
	_, err = Open(v1, id, testKey)
	require.ErrorContains(t, err, "does not verify")
	_, err = Open(v1, Binding{Cluster: "c1", JobID: 7, Run: 0, Reservation: testRes}, testKey, prev)
	require.ErrorContains(t, err, "version 1")
	_, err = Open(v1, Binding{Cluster: "c1", JobID: 8, Run: 0}, testKey, prev)
	require.ErrorContains(t, err, "is for c1/7.0")
}

func sealV1(t *testing.T, key []byte, h, plain string) []byte {
	aead, err := newAEAD(key)
	require.NoError(t, err)
	nonce := make([]byte, aead.NonceSize())
	out := append([]byte(h+"\n"), nonce...)
	return aead.Seal(out, nonce, []byte(plain), []byte(h))
}

func TestParseFileName(t *testing.T) {
	for name, want := range map[string][2]int{"42.0.session": {42, 0}, "4294967295.12.session": {4294967295, 12}} {
		j, r, ok := ParseFileName(name)
		require.True(t, ok, name)
		require.Equal(t, want, [2]int{int(j), r}, name)
		require.Equal(t, name, FileName(Binding{JobID: j, Run: r}))
	}
	for _, name := range []string{".42.0.session.tmp123", "42.0.session.tmp", "042.0.session", "42.01.session", "4294967296.0.session", "42.session", "x.0.session"} {
		_, _, ok := ParseFileName(name)
		require.False(t, ok, name)
	}
}

func TestSealRefusesBadEnv(t *testing.T) {
	id := Binding{Cluster: "c", JobID: 1, Reservation: testRes}
	_, err := Seal(testKey, id, []EnvVar{{"LD_PRELOAD", "x"}})
	require.ErrorContains(t, err, "not a JUICE_ variable")
	_, err = Seal(testKey, id, []EnvVar{{"JUICE_X", "a\nJUICE_Y=b"}})
	require.ErrorContains(t, err, "newline")
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(p, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"), 0o600))
	kf := KeyFile(p)
	k, err := kf.Bytes()
	require.NoError(t, err)
	require.Len(t, k, 32)
	all, err := kf.All()
	require.NoError(t, err)
	require.Equal(t, [][]byte{k}, all, "no previous key file: the current key alone")
	require.NoError(t, os.WriteFile(p+".previous", []byte(strings.Repeat("ab", 32)), 0o600))
	all, err = kf.All()
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, bytes.Repeat([]byte{0xab}, 32), all[1])
	// Any group or other bit, on either file, is refused: the previous key opens sessions too.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o610, 0o601, 0o620, 0o602} {
		require.NoError(t, os.Chmod(p+".previous", mode))
		_, err = kf.All()
		require.ErrorContains(t, err, "previous cluster key", "mode %04o", mode)
		require.ErrorContains(t, err, "chmod 600", "mode %04o", mode)
		require.NoError(t, os.Chmod(p+".previous", 0o600))
		require.NoError(t, os.Chmod(p, mode))
		_, err = KeyFile(p).Bytes()
		require.ErrorContains(t, err, "chmod 600", "mode %04o", mode)
		require.NoError(t, os.Chmod(p, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short"), []byte("abcd"), 0o600))
	_, err = KeyFile(filepath.Join(dir, "short")).Bytes()
	require.ErrorContains(t, err, "64 hexadecimal")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nothex"), []byte(strings.Repeat("g", 64)), 0o600))
	_, err = KeyFile(filepath.Join(dir, "nothex")).Bytes()
	require.ErrorContains(t, err, "not hexadecimal")
}

// FuzzOpen: the opener never panics on any input, and anything it accepts was sealed for the run asked.
func FuzzOpen(f *testing.F) {
	id := Binding{Cluster: "c", JobID: 7, Run: 0, Reservation: testRes}
	good, _ := Seal(testKey, id, []EnvVar{{"JUICE_A", "1"}})
	f.Add(good)
	f.Add([]byte("JUICE-SESSION v1 cluster=c job=7 run=0\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := Open(data, id, testKey)
		if err == nil && len(data) != len(good) {
			t.Fatalf("opened a file that is not the sealed one: %q -> %v", data, env)
		}
	})
}

// TestSessionVectors opens every committed vector with the Go opener; the C plugin's test opens the same ones.
// key.hex is the current key, key.hex.previous the previous one (both must be accepted).
func TestSessionVectors(t *testing.T) {
	dir := filepath.Join(vectors.Dir(), "session")
	kf := filepath.Join(t.TempDir(), "key.hex")
	for _, name := range []string{"key.hex", "key.hex.previous"} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(kf), name), raw, 0o600)) // a checkout does not keep the mode
	}
	keys, err := KeyFile(kf).All()
	require.NoError(t, err)
	require.Len(t, keys, 2)
	expects, err := filepath.Glob(filepath.Join(dir, "*.expect"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(expects), 20)
	for _, e := range expects {
		name := strings.TrimSuffix(filepath.Base(e), ".expect")
		exp, err := os.ReadFile(e)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(exp), "\n"), "\n")
		id, err := parseOpenLine(lines[0])
		require.NoError(t, err, name)
		data, err := os.ReadFile(filepath.Join(dir, name+".session"))
		require.NoError(t, err)
		env, err := Open(data, id, keys...)
		if lines[1] == "error" {
			require.Error(t, err, name)
			continue
		}
		require.NoError(t, err, name)
		var got []string
		for _, v := range env {
			got = append(got, v.Name+"="+v.Value)
		}
		require.Equal(t, lines[2:], append([]string{}, got...), name)
	}
}

// parseOpenLine reads "open cluster=C job=N run=N [reservation=UUID]".
func parseOpenLine(s string) (Binding, error) {
	var id Binding
	f := strings.Fields(s)
	if len(f) < 4 || len(f) > 5 || f[0] != "open" {
		return id, fmt.Errorf("bad open line %q", s)
	}
	var job, run uint64
	_, err := fmt.Sscanf(strings.Join(f[1:4], " "), "cluster=%s job=%d run=%d", &id.Cluster, &job, &run)
	if err != nil {
		return id, fmt.Errorf("open line %q: %w", s, err)
	}
	id.JobID, id.Run = uint32(job), int(run)
	if len(f) == 5 {
		r, ok := strings.CutPrefix(f[4], "reservation=")
		if !ok {
			return id, fmt.Errorf("bad open line %q", s)
		}
		if id.Reservation, err = uuid.Parse(r); err != nil {
			return id, fmt.Errorf("open line %q: %w", s, err)
		}
	}
	return id, nil
}
