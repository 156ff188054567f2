package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func writeSession(t *testing.T, dir string, b Binding) string {
	t.Helper()
	data, err := Seal(testKey, b, []EnvVar{{"JUICE_A", "1"}})
	require.NoError(t, err)
	p := filepath.Join(dir, FileName(b))
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

// TestStateDirRemoveFor: a reservation that stops being ready takes its run's file with it, or a file that names
// no reservation; never a file another reservation of the run wrote.
func TestStateDirRemoveFor(t *testing.T) {
	dir := t.TempDir()
	d := StateDir{Path: dir}
	mine := Binding{Cluster: "c", JobID: 9, Run: 0, Reservation: uuid.New()}
	other := mine
	other.Reservation = uuid.New()

	removed, err := d.RemoveFor(mine)
	require.NoError(t, err)
	require.False(t, removed, "no file: nothing to do")

	p := writeSession(t, dir, other)
	removed, err = d.RemoveFor(mine)
	require.NoError(t, err)
	require.False(t, removed, "another reservation's file is left to it")
	require.FileExists(t, p)

	writeSession(t, dir, mine)
	removed, err = d.RemoveFor(mine)
	require.NoError(t, err)
	require.True(t, removed)
	require.NoFileExists(t, p)

	require.NoError(t, os.WriteFile(p, sealV1(t, testKey, "JUICE-SESSION v1 cluster=c job=9 run=0", ""), 0o600))
	removed, err = d.RemoveFor(mine)
	require.NoError(t, err)
	require.True(t, removed, "a version 1 file names no reservation: the run's")
	require.NoError(t, os.WriteFile(p, []byte("garbage"), 0o600))
	removed, err = d.RemoveFor(mine)
	require.NoError(t, err)
	require.True(t, removed, "a file that does not parse is nobody's")
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	require.Empty(t, leftovers)
}

// TestStateDirRemoveKeepsANewerFile: a file renamed into place after the old one was judged (the prolog of a
// newer reservation of the run) survives the removal of the old one.
func TestStateDirRemoveKeepsANewerFile(t *testing.T) {
	dir := t.TempDir()
	d := StateDir{Path: dir}
	old := Binding{Cluster: "c", JobID: 9, Run: 0, Reservation: uuid.New()}
	writeSession(t, dir, old)
	files, err := d.List()
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.Equal(t, old.Reservation, files[0].Reservation())

	newer := old
	newer.Reservation = uuid.New()
	data, err := Seal(testKey, newer, []EnvVar{{"JUICE_A", "2"}})
	require.NoError(t, err)
	tmp := filepath.Join(dir, ".9.0.session.tmp1")
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "9.0.session")))

	removed, err := d.Remove(files[0])
	require.NoError(t, err)
	require.False(t, removed)
	got, ok, err := d.Lookup(old)
	require.NoError(t, err)
	require.True(t, ok, "the newer file is still there")
	require.Equal(t, newer.Reservation, got.Reservation())
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	require.Empty(t, leftovers)
}

func TestStateDirListSkipsOtherNames(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, Binding{Cluster: "c", JobID: 1, Run: 2, Reservation: uuid.New()})
	for _, name := range []string{".1.2.session.tmp9", "notes.txt", "1.2.session.bak"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	require.NoError(t, os.Symlink("1.2.session", filepath.Join(dir, "3.0.session")))
	files, err := StateDir{Path: dir}.List()
	require.NoError(t, err)
	require.Len(t, files, 2)
	require.Equal(t, "1.2.session", files[0].Name)
	require.NoError(t, files[0].HeaderErr)
	require.Equal(t, "3.0.session", files[1].Name)
	require.Error(t, files[1].HeaderErr, "a symlink is not opened (O_NOFOLLOW)")
}
