package hookwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A controller on the slurmctld host also serves the hook API on a Unix socket (the controller's --hook-socket),
// which the hooks name as "unix:/run/juice-slurm/hook.sock". A prolog then costs no TLS handshake (most of a ready
// prolog's time over TLS), and each side is proved by the kernel instead of a certificate and a network:
//
//   - the hooks prove the listener by where its socket lies: in a directory only its owner can write to (no
//     group or other write bit), owned by root or by the process listening there (SO_PEERCRED). Nobody else can
//     have put a socket at that path, so the secret goes to the controller the administrator set it up for.
//   - the controller proves the caller by its uid (SO_PEERCRED): only root, its own user and SlurmUser may call
//     (hookserver.ListenLocal), and the hook secret is still required on top.

// UnixPrefix starts a hook API URL that names a Unix socket.
const UnixPrefix = "unix:"

// IsUnix reports whether url names a Unix socket.
func IsUnix(url string) bool { return strings.HasPrefix(url, UnixPrefix) }

// NeedsTLS reports whether any replica in a comma-separated list of hook API URLs is reached over the network,
// so that the pinned certificate must be read.
func NeedsTLS(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" && !IsUnix(u) {
			return true
		}
	}
	return false
}

// SocketPath is the socket's path in a unix: URL ("unix:/p" or "unix:///p").
func SocketPath(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, UnixPrefix), "//")
}

// DialUnix connects to the hook API's socket at path and proves the listener (see above): an error names what
// is wrong, and nothing has been sent. The connection's reads and writes end at ctx's deadline, or when ctx ends.
func DialUnix(ctx context.Context, path string) (*Conn, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("hook socket %q: the path must be absolute", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return nil, fmt.Errorf("hook socket: cannot read the owner of %s", dir)
	case !st.IsDir():
		return nil, fmt.Errorf("hook socket: %s is not a directory (a symbolic link is refused: its target could change)", dir)
	case st.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("hook socket: %s is writable by others (mode %04o): anyone could have put a socket there; make it 0755 or tighter", dir, st.Mode().Perm())
	}
	c, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	cred, err := syscall.GetsockoptUcred(c.fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hook socket %s: peer credentials: %w", path, err)
	}
	if cred.Uid != sys.Uid && sys.Uid != 0 {
		c.Close()
		return nil, fmt.Errorf("hook socket %s: its listener runs as uid %d, but %s belongs to uid %d: not the controller set up there",
			path, cred.Uid, dir, sys.Uid)
	}
	return c, nil
}

// Conn is a connection to the hook socket: its descriptor, read and written by plain blocking system calls, the
// time bounded by the kernel (SO_RCVTIMEO, SO_SNDTIMEO) and an ended context shutting the socket down. Not a
// net.Conn: package net's inits and poller would cost every prolog more than its call (issue 24).
type Conn struct {
	fd   int
	stop func() bool // undoes the context's AfterFunc

	mu     sync.Mutex // closed, against a shutdown racing the close
	closed bool
}

// dial connects a new socket to path, with its time bounded by ctx.
func dial(ctx context.Context, path string) (*Conn, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hook socket %s: %w", path, os.NewSyscallError("socket", err))
	}
	c := &Conn{fd: fd}
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			syscall.Close(fd)
			return nil, fmt.Errorf("hook socket %s: %w", path, context.DeadlineExceeded)
		}
		// A connect waiting for room in the listener's backlog is bounded by the send time-out.
		tv := syscall.NsecToTimeval(left.Nanoseconds())
		if tv.Sec == 0 && tv.Usec == 0 {
			tv.Usec = 1 // zero would mean no time-out at all
		}
		for _, opt := range []int{syscall.SO_RCVTIMEO, syscall.SO_SNDTIMEO} {
			if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
				syscall.Close(fd)
				return nil, fmt.Errorf("hook socket %s: %w", path, os.NewSyscallError("setsockopt", err))
			}
		}
	}
	c.stop = context.AfterFunc(ctx, c.shutdown)
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		c.Close()
		return nil, wrapCtx(ctx, fmt.Errorf("dial unix %s: %w", path, timedOut(os.NewSyscallError("connect", err))))
	}
	return c, nil
}

// errTimedOut is a kernel time-out: EAGAIN from a socket with SO_RCVTIMEO or SO_SNDTIMEO, which are set only from
// the context's deadline.
var errTimedOut = errors.New("timed out")

// timedOut names a kernel time-out as one.
func timedOut(err error) error {
	if errors.Is(err, syscall.EAGAIN) {
		return fmt.Errorf("%w (%w)", err, errTimedOut)
	}
	return err
}

// shutdown wakes a read or write blocked on the socket (the context ended); the descriptor stays until Close.
func (c *Conn) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	}
}

// Read reads what the controller sent; io.EOF once it closed its end.
func (c *Conn) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, timedOut(os.NewSyscallError("read", err))
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p.
func (c *Conn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Write(c.fd, p[done:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, timedOut(os.NewSyscallError("write", err))
		}
		done += n
	}
	return done, nil
}

// Close closes the socket.
func (c *Conn) Close() error {
	if c.stop != nil {
		c.stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return syscall.Close(c.fd)
}
