package juiceapi

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

// tokenFile reads the M2M token from a file and re-reads it when the file changes, so a rotated
// token is picked up without a restart. The token itself never appears in errors or logs.
type tokenFile struct {
	path string

	mu    sync.Mutex
	token string
	stamp fileStamp
}

// fileStamp identifies a version of the file cheaply. Atomic replacement (write + rename, as
// Kubernetes secrets and most tools do) changes the inode; in-place rewrites change size or mtime.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func newTokenFile(path string) (*tokenFile, error) {
	if path == "" {
		return nil, errors.New("no token file given")
	}
	t := &tokenFile{path: path}
	if _, err := t.get(); err != nil {
		return nil, err
	}
	return t, nil
}

// get returns the current token, re-reading the file when its stamp changed since the last read.
func (t *tokenFile) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	stamp := stampOf(fi)
	if t.token != "" && stamp == t.stamp {
		return t.token, nil
	}
	tok, err := readTokenFile(t.path, fi)
	if err != nil {
		return "", err
	}
	t.token, t.stamp = tok, stamp
	return tok, nil
}

func stampOf(fi fs.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}

// readTokenFile checks the file's mode before reading: a token that group or others can read is
// already leaked, and refusing loudly is better than using it quietly.
func readTokenFile(path string, fi fs.FileInfo) (string, error) {
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: it must not be accessible by group or others (chmod 600 %s)",
			path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	// A header value must not hold control characters or spaces; say so without quoting the token.
	for _, c := range tok {
		if c <= ' ' || c == 0x7f {
			return "", fmt.Errorf("token file %s: the token holds a space or control character (one token, on one line)", path)
		}
	}
	return tok, nil
}

// ReadTokenFile reads an M2M token file once, with the same checks as the client (mode 0600 or
// stricter, one token). For programs that hold a token without HTTPClient, such as juice-sim.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return readTokenFile(path, fi)
}
