package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestModeIsChecked(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644, 0o610, 0o601} {
		write(t, p, "secret-value\n", mode)
		_, err := Load(p, nil)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		if strings.Contains(err.Error(), "secret-value") {
			t.Fatalf("the error quotes the secret: %v", err)
		}
	}
	write(t, p, "secret-value\n", 0o400)
	if v, err := Load(p, nil); err != nil || v != "secret-value" {
		t.Fatalf("mode 0400: %q %v", v, err)
	}
}

func TestContentIsChecked(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s")
	for _, bad := range []string{"", "  \n", "two words", "a\nb", "tab\there"} {
		write(t, p, bad, 0o600)
		if _, err := Load(p, nil); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	write(t, p, "short", 0o600)
	if _, err := Load(p, MinLength(16)); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("MinLength: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "d"), nil); err == nil {
		t.Fatal("a directory was accepted")
	}
	if _, err := Load(filepath.Join(dir, "missing"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// A rotated secret is picked up: rewritten in place, or replaced by a rename (as Kubernetes and most tools do).
func TestRotationIsReread(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s")
	write(t, p, "first-value", 0o600)
	f := New(p, nil)
	if v, _ := f.Value(); v != "first-value" {
		t.Fatalf("got %q", v)
	}
	write(t, p, "second-value-longer", 0o600)
	if v, _ := f.Value(); v != "second-value-longer" {
		t.Fatalf("after rewrite: %q", v)
	}
	tmp := filepath.Join(dir, "new")
	write(t, tmp, "third-value-longer!", 0o600) // same size as the second: only the inode tells
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Value(); v != "third-value-longer!" {
		t.Fatalf("after rename: %q", v)
	}
	if !f.Changed("second-value-longer") || f.Changed("third-value-longer!") {
		t.Fatal("Changed")
	}
	// Loosened later: refused from then on, not served from the cache.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Value(); err == nil {
		t.Fatal("a secret made readable by others is still used")
	}
}

func TestSymlinkToSecretIsFollowed(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "real"), "linked-value", 0o600)
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if v, err := Load(filepath.Join(dir, "link"), nil); err != nil || v != "linked-value" {
		t.Fatalf("%q %v", v, err)
	}
}

// WriteTemp's file is a secret file this package loads (mode 0600, its content whole), named to stay out of the
// state directory's session names; a directory it cannot write leaves nothing behind.
func TestWriteTemp(t *testing.T) {
	dir := t.TempDir()
	name, err := WriteTemp(dir, "cluster.key", []byte("s3cret\n"), -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(name), ".cluster.key.new") {
		t.Fatalf("temporary name %q", name)
	}
	if v, err := New(name, nil).Value(); err != nil || v != "s3cret" {
		t.Fatalf("loaded %q, %v", v, err)
	}
	if _, err := WriteTemp(filepath.Join(dir, "missing"), "x", []byte("y"), -1, -1); err == nil {
		t.Fatal("wrote into a missing directory")
	}
}
