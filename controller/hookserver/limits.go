package hookserver

import (
	"context"
	"crypto/tls"
	"log"
	"net"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/internal/peer"
)

// Limits that keep one local user from starving the hook API (F4: 20,000 idle connections from one user took
// every descriptor and another user's prolog failed). A peer is the uid owning the client's socket on loopback
// (every local user shares 127.0.0.1 with slurmctld's hooks) and the IP address otherwise (package peer).
const (
	// DefaultMaxConns caps the hook API's open connections. Go raises the descriptor limit to the hard limit at
	// start; this keeps room below it for PostgreSQL, slurmrestd and Juice.
	DefaultMaxConns = 8192
	// DefaultMaxConnsPerPeer caps one peer's connections: above slurmctld's bursts of prologs (thousands at
	// once), far below DefaultMaxConns.
	DefaultMaxConnsPerPeer = 4096
	// DefaultMaxWaitsPerPeer caps one peer's concurrent waits (authenticated calls that block).
	DefaultMaxWaitsPerPeer = 4096
)

// limitListener closes at once every connection over the cap of all connections or of its peer's, so that what
// one peer opens never keeps another peer out.
type limitListener struct {
	net.Listener
	max, perPeer int
	refused      func(peer string)

	mu     sync.Mutex
	total  int
	byPeer map[string]int
}

func newLimitListener(ln net.Listener, max, perPeer int, refused func(string)) *limitListener {
	return &limitListener{Listener: ln, max: max, perPeer: perPeer, refused: refused, byPeer: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := peer.Of(c)
		l.mu.Lock()
		if l.total >= l.max || l.byPeer[p] >= l.perPeer {
			l.mu.Unlock()
			c.Close()
			if l.refused != nil {
				l.refused(p)
			}
			continue
		}
		l.total++
		l.byPeer[p]++
		l.mu.Unlock()
		return &peerConn{Conn: c, peer: p, l: l}, nil
	}
}

func (l *limitListener) release(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byPeer[p]--; l.byPeer[p] <= 0 {
		delete(l.byPeer, p)
	}
}

// peerConn is an accepted connection that knows its peer and gives its place back once, when closed.
type peerConn struct {
	net.Conn
	peer string
	l    *limitListener
	once sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() { c.l.release(c.peer) })
	return c.Conn.Close()
}

type peerKey struct{}

// withPeer is the http.Server's ConnContext: the peer of the connection, for the per-peer cap on waits.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return ctx
}

func peerOf(ctx context.Context) string {
	p, _ := ctx.Value(peerKey{}).(string)
	return p
}

// waitCounter counts each peer's concurrent waits.
type waitCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// enter takes a place for peer, or reports false when it holds max already.
func (w *waitCounter) enter(peer string, max int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	if w.n[peer] >= max {
		return false
	}
	w.n[peer]++
	return true
}

func (w *waitCounter) leave(peer string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[peer]--; w.n[peer] <= 0 {
		delete(w.n, peer)
	}
}

// quietTLSLog is the hook server's error log: failed handshakes and broken connections (a squatter's probe, a
// flood) at debug level, never one line each on the service's log.
func quietTLSLog(l logr.Logger) *log.Logger {
	return log.New(logWriter{l.WithName("http")}, "", 0)
}

type logWriter struct{ l logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// uidListener closes at once every connection to the hook API's Unix socket whose peer's uid (SO_PEERCRED) is not
// allowed: the socket is open to all local users (mode 0666), so who may call is decided here, before a byte is
// read, and the hook secret is still required on top.
type uidListener struct {
	net.Listener
	allowed func(uid uint32) bool
	refused func(uid uint32, err error)
}

func (l *uidListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		uid, err := peer.UnixUID(uc)
		if err == nil && l.allowed(uid) {
			return c, nil
		}
		// Counted before the close, so that the count is there when the caller sees it refused.
		l.refused(uid, err)
		c.Close()
	}
}
