// Package secretfile is the one loader of juice-slurm's secrets: the Juice M2M token, the slurmrestd token, the
// hook secret and the cluster key. Each lives in a file that
//
//   - is a regular file (a symlink to one is followed, as Kubernetes mounts secrets);
//   - neither group nor others may read, write or execute: a secret others could read is already leaked, and
//     refusing it loudly is better than using it quietly;
//   - holds one value on one line (surrounding white space is trimmed);
//
// and is read again whenever it changes (replaced by a rename, or rewritten in place), so that a secret can be
// rotated without a restart. The value never appears in an error.
package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File is one secret file.
type File struct {
	path  string
	check func(value string) error

	mu    sync.Mutex
	value string
	stamp stamp
}

// stamp tells versions of the file apart cheaply: a rename changes the inode, a rewrite the size or the time,
// a chmod the mode and the change time.
type stamp struct {
	dev, ino     uint64
	size         int64
	mode         fs.FileMode
	mtime, ctime time.Time
}

// New returns the secret kept in path. check, when not nil, validates the value (a key's length, say); its error
// must not quote the value.
func New(path string, check func(value string) error) *File {
	return &File{path: path, check: check}
}

// Load reads path once and returns the secret, checked; for values read once at start-up.
func Load(path string, check func(value string) error) (string, error) {
	return New(path, check).Value()
}

// Path is the file's name.
func (f *File) Path() string { return f.path }

// Value returns the secret, reading the file again when it changed since the last read.
func (f *File) Value() (string, error) {
	if f.path == "" {
		return "", errors.New("secret file: no file given")
	}
	fi, err := Check(f.path)
	if err != nil {
		return "", err
	}
	st := stampOf(fi)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.value != "" && st == f.stamp {
		return f.value, nil
	}
	v, err := read(f.path, f.check)
	if err != nil {
		return "", err
	}
	f.value, f.stamp = v, st
	return v, nil
}

// Changed reports whether value is not the one the file holds now: a caller that was refused with value can
// try again once with the new one.
func (f *File) Changed(value string) bool {
	v, err := f.Value()
	return err == nil && v != value
}

// Invalidate makes the next Value read the file again even if it looks unchanged.
func (f *File) Invalidate() {
	f.mu.Lock()
	f.value = ""
	f.mu.Unlock()
}

func stampOf(fi fs.FileInfo) stamp {
	s := stamp{size: fi.Size(), mode: fi.Mode(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
		s.ctime = time.Unix(st.Ctim.Unix())
	}
	return s
}

// Check says whether path may hold a secret: a regular file (a symlink to one is followed) that neither group nor
// others may access. It returns the file's information. File.Value checks every secret so; a secret that is not
// one value on one line (a TLS private key) is checked with it by its own reader.
func Check(path string) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %04o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	return fi, nil
}

func read(path string, check func(string) error) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	v := strings.TrimSpace(string(raw))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	for _, c := range v {
		if c <= ' ' || c == 0x7f {
			return "", fmt.Errorf("secret file %s: the value holds a space or a control character (one value, on one line)", path)
		}
	}
	if check != nil {
		if err := check(v); err != nil {
			return "", fmt.Errorf("secret file %s: %w", path, err)
		}
	}
	return v, nil
}

// MinLength is a check that a secret has at least n characters.
func MinLength(n int) func(string) error {
	return func(v string) error {
		if len(v) < n {
			return fmt.Errorf("%d characters; use at least %d (openssl rand -hex 32)", len(v), n)
		}
		return nil
	}
}

// WriteTemp writes data into a new file in dir, named ".<base>.new*", mode 0600 (owned by uid:gid when uid is not
// -1), synced to disk, and returns its name: the caller renames it into place, so that a reader never sees half a
// secret. The file is removed when any step fails.
func WriteTemp(dir, base string, data []byte, uid, gid int) (string, error) {
	f, err := os.CreateTemp(dir, "."+base+".new*")
	if err != nil {
		return "", err
	}
	err = f.Chmod(0o600)
	if err == nil && uid != -1 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
