package hookwire

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/juice-slurm/juice-slurm/internal/peer"
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
// is wrong, and nothing has been sent.
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
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
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uid, err := peer.UnixUID(c.(*net.UnixConn))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hook socket %s: %w", path, err)
	}
	if uid != sys.Uid && sys.Uid != 0 {
		c.Close()
		return nil, fmt.Errorf("hook socket %s: its listener runs as uid %d, but %s belongs to uid %d: not the controller set up there",
			path, uid, dir, sys.Uid)
	}
	return c, nil
}
