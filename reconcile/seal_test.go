package reconcile

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
	id := RunID{Cluster: "c1", JobID: 42, Run: 1}
	env := []EnvVar{{"JUICE_SESSION_ID", "abc"}, {"JUICE_CFG_OVERRIDE", `{"id":"abc","servers":["h:1"]}`}, {"JUICE_EMPTY", ""}}
	blob, err := SealSession(testKey, id, env)
	require.NoError(t, err)
	got, err := OpenSession(testKey, blob, id)
	require.NoError(t, err)
	require.Equal(t, env, got)

	for name, want := range map[string]RunID{
		"other job":     {Cluster: "c1", JobID: 43, Run: 1},
		"other run":     {Cluster: "c1", JobID: 42, Run: 0},
		"other cluster": {Cluster: "c2", JobID: 42, Run: 1},
	} {
		_, err := OpenSession(testKey, blob, want)
		require.ErrorContains(t, err, "is for c1/42.1", name)
	}
	// A header rewritten to name another job no longer verifies.
	forged := append([]byte("JUICE-SESSION v1 cluster=c1 job=43 run=1"), blob[len(sessionHeader(id)):]...)
	_, err = OpenSession(testKey, forged, RunID{"c1", 43, 1})
	require.ErrorContains(t, err, "does not verify")
	// One flipped bit anywhere in the body.
	tampered := append([]byte(nil), blob...)
	tampered[len(tampered)-20] ^= 1
	_, err = OpenSession(testKey, tampered, id)
	require.ErrorContains(t, err, "does not verify")
	_, err = OpenSession([]byte("another key of thirty-two bytes!"), blob, id)
	require.ErrorContains(t, err, "does not verify")
	_, err = OpenSession(testKey, blob[:len(sessionHeader(id))+10], id)
	require.ErrorContains(t, err, "truncated")
}

func TestSealRefusesBadEnv(t *testing.T) {
	id := RunID{Cluster: "c", JobID: 1}
	_, err := SealSession(testKey, id, []EnvVar{{"LD_PRELOAD", "x"}})
	require.ErrorContains(t, err, "not a JUICE_ variable")
	_, err = SealSession(testKey, id, []EnvVar{{"JUICE_X", "a\nJUICE_Y=b"}})
	require.ErrorContains(t, err, "newline")
}

func TestLoadClusterKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(p, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"), 0o600))
	k, err := LoadClusterKey(p)
	require.NoError(t, err)
	require.Len(t, k, 32)
	require.NoError(t, os.Chmod(p, 0o644))
	_, err = LoadClusterKey(p)
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short"), []byte("abcd"), 0o600))
	_, err = LoadClusterKey(filepath.Join(dir, "short"))
	require.ErrorContains(t, err, "64 hexadecimal")
}

// FuzzOpenSession: the opener never panics on any input, and anything it accepts was sealed for the run asked.
func FuzzOpenSession(f *testing.F) {
	id := RunID{Cluster: "c", JobID: 7, Run: 0}
	good, _ := SealSession(testKey, id, []EnvVar{{"JUICE_A", "1"}})
	f.Add(good)
	f.Add([]byte("JUICE-SESSION v1 cluster=c job=7 run=0\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := OpenSession(testKey, data, id)
		if err == nil && len(data) != len(good) {
			t.Fatalf("opened a file that is not the sealed one: %q -> %v", data, env)
		}
	})
}

// TestSessionVectors opens every committed vector with the Go opener; the C plugin's test opens the same ones.
func TestSessionVectors(t *testing.T) {
	dir := "../test/vectors/session"
	rawKey, err := os.ReadFile(filepath.Join(dir, "key.hex"))
	require.NoError(t, err)
	key, err := ParseClusterKey(rawKey, "key.hex")
	require.NoError(t, err)
	expects, err := filepath.Glob(filepath.Join(dir, "*.expect"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(expects), 10)
	for _, e := range expects {
		name := strings.TrimSuffix(filepath.Base(e), ".expect")
		exp, err := os.ReadFile(e)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(exp), "\n"), "\n")
		var id RunID
		_, err = fmt.Sscanf(lines[0], "open cluster=%s job=%d run=%d", &id.Cluster, &id.JobID, &id.Run)
		require.NoError(t, err, name)
		data, err := os.ReadFile(filepath.Join(dir, name+".session"))
		require.NoError(t, err)
		env, err := OpenSession(key, data, id)
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
