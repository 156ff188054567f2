package controller

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookserver"
)

// The hook socket: a socket an earlier process left (killed, so it never removed it) is replaced; any other file
// at the path is left alone and the start fails, naming it; the socket is open to all, its callers chosen by uid.
func TestHookSocketReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hook.sock")
	c := &Controller{Config: Config{HookSocket: path}, Log: logr.Discard()}

	ln, err := c.hookSocket(&hookserver.Server{})
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o666), st.Mode().Perm())
	// As after a kill -9: the socket file stays behind.
	require.NoError(t, os.Link(path, filepath.Join(dir, "left")))
	ln.Close()
	require.NoError(t, os.Rename(filepath.Join(dir, "left"), path))
	ln, err = c.hookSocket(&hookserver.Server{})
	require.NoError(t, err, "a stale socket is replaced")
	ln.Close()

	require.NoError(t, os.WriteFile(path, []byte("not a socket"), 0o644))
	_, err = c.hookSocket(&hookserver.Server{})
	require.ErrorContains(t, err, "not a socket is in the way")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "not a socket", string(b), "left alone")

	none, err := (&Controller{Log: logr.Discard()}).hookSocket(&hookserver.Server{})
	require.NoError(t, err)
	require.Nil(t, none, "off unless set")
}
