package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestSealOpen(t *testing.T) {
	id := Binding{Cluster: "c1", JobID: 42, Run: 1}
	env := []EnvVar{{"JUICE_SESSION_ID", "abc"}, {"JUICE_CFG_OVERRIDE", `{"id":"abc","servers":["h:1"]}`}, {"JUICE_EMPTY", ""}}
	blob, err := Seal(testKey, id, env)
	require.NoError(t, err)
	got, err := Open(testKey, blob, id)
	require.NoError(t, err)
	require.Equal(t, env, got)

	for name, want := range map[string]Binding{
		"other job":     {Cluster: "c1", JobID: 43, Run: 1},
		"other run":     {Cluster: "c1", JobID: 42, Run: 0},
		"other cluster": {Cluster: "c2", JobID: 42, Run: 1},
	} {
		_, err := Open(testKey, blob, want)
		require.ErrorContains(t, err, "is for c1/42.1", name)
	}
	// A header rewritten to name another job no longer verifies.
	forged := append([]byte("JUICE-SESSION v1 cluster=c1 job=43 run=1"), blob[len(header(id)):]...)
	_, err = Open(testKey, forged, Binding{"c1", 43, 1})
	require.ErrorContains(t, err, "does not verify")
	// One flipped bit anywhere in the body.
	tampered := append([]byte(nil), blob...)
	tampered[len(tampered)-20] ^= 1
	_, err = Open(testKey, tampered, id)
	require.ErrorContains(t, err, "does not verify")
	_, err = Open([]byte("another key of thirty-two bytes!"), blob, id)
	require.ErrorContains(t, err, "does not verify")
	_, err = Open(testKey, blob[:len(header(id))+10], id)
	require.ErrorContains(t, err, "truncated")
}

func TestSealRefusesBadEnv(t *testing.T) {
	id := Binding{Cluster: "c", JobID: 1}
	_, err := Seal(testKey, id, []EnvVar{{"LD_PRELOAD", "x"}})
	require.ErrorContains(t, err, "not a JUICE_ variable")
	_, err = Seal(testKey, id, []EnvVar{{"JUICE_X", "a\nJUICE_Y=b"}})
	require.ErrorContains(t, err, "newline")
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(p, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"), 0o600))
	k, err := KeyFile(p).Bytes()
	require.NoError(t, err)
	require.Len(t, k, 32)
	require.NoError(t, os.Chmod(p, 0o640))
	_, err = KeyFile(p).Bytes()
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short"), []byte("abcd"), 0o600))
	_, err = KeyFile(filepath.Join(dir, "short")).Bytes()
	require.ErrorContains(t, err, "64 hexadecimal")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nothex"), []byte(strings.Repeat("g", 64)), 0o600))
	_, err = KeyFile(filepath.Join(dir, "nothex")).Bytes()
	require.ErrorContains(t, err, "not hexadecimal")
}

// FuzzOpen: the opener never panics on any input, and anything it accepts was sealed for the run asked.
func FuzzOpen(f *testing.F) {
	id := Binding{Cluster: "c", JobID: 7, Run: 0}
	good, _ := Seal(testKey, id, []EnvVar{{"JUICE_A", "1"}})
	f.Add(good)
	f.Add([]byte("JUICE-SESSION v1 cluster=c job=7 run=0\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := Open(testKey, data, id)
		if err == nil && len(data) != len(good) {
			t.Fatalf("opened a file that is not the sealed one: %q -> %v", data, env)
		}
	})
}

// TestSessionVectors opens every committed vector with the Go opener; the C plugin's test opens the same ones.
func TestSessionVectors(t *testing.T) {
	dir := "../../test/vectors/session"
	kf := filepath.Join(t.TempDir(), "key.hex")
	raw, err := os.ReadFile(filepath.Join(dir, "key.hex"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(kf, raw, 0o600)) // a checkout does not keep the mode
	key, err := KeyFile(kf).Bytes()
	require.NoError(t, err)
	expects, err := filepath.Glob(filepath.Join(dir, "*.expect"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(expects), 10)
	for _, e := range expects {
		name := strings.TrimSuffix(filepath.Base(e), ".expect")
		exp, err := os.ReadFile(e)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(exp), "\n"), "\n")
		var id Binding
		_, err = fmt.Sscanf(lines[0], "open cluster=%s job=%d run=%d", &id.Cluster, &id.JobID, &id.Run)
		require.NoError(t, err, name)
		data, err := os.ReadFile(filepath.Join(dir, name+".session"))
		require.NoError(t, err)
		env, err := Open(key, data, id)
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
