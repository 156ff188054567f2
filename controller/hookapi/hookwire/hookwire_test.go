package hookwire

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The answers an HTTP/1.0 request can get: with a length or until the connection ends; a chunked one (which no
// server may send to HTTP/1.0), a cut one or one over MaxBody is an error naming why, never a short body taken
// for the whole.
func TestReadResponse(t *testing.T) {
	read := func(s string) (int, string, error) {
		code, body, err := readResponse(bufio.NewReader(strings.NewReader(s)))
		return code, string(body), err
	}
	code, body, err := read("HTTP/1.0 200 OK\r\nContent-Length: 4\r\nContent-Type: application/json\r\n\r\n{}  trailing")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Equal(t, "{}  ", body, "exactly Content-Length bytes")

	code, body, err = read("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\n\r\nunauthorized\n")
	require.NoError(t, err)
	require.Equal(t, 401, code)
	require.Equal(t, "unauthorized\n", body, "without a length, up to the end")

	for name, bad := range map[string]string{
		"chunked":      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"cut body":     "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n{}",
		"cut header":   "HTTP/1.0 200 OK\r\nContent-Le",
		"not HTTP":     "SSH-2.0-OpenSSH\r\n",
		"bad length":   "HTTP/1.0 200 OK\r\nContent-Length: -1\r\n\r\n",
		"over MaxBody": "HTTP/1.0 200 OK\r\nContent-Length: 99999999\r\n\r\n",
		"nothing":      "",
	} {
		_, _, err := read(bad)
		require.Error(t, err, name)
	}
	_, _, err = read("HTTP/1.0 200 OK\r\n\r\n" + strings.Repeat("x", MaxBody+1))
	require.ErrorContains(t, err, "over")
}

// Only a unix: replica is reached without TLS; anything else needs it.
func TestNeedsTLS(t *testing.T) {
	require.False(t, NeedsTLS("unix:/run/juice-slurm/hook.sock"))
	require.False(t, NeedsTLS(" unix:/a.sock , unix:///b.sock "))
	require.True(t, NeedsTLS("unix:/a.sock,https://ctl2:7171"))
	require.True(t, NeedsTLS("http://127.0.0.1:7171"))
	require.Equal(t, "/b.sock", SocketPath("unix:///b.sock"))
	require.Equal(t, "/a.sock", SocketPath("unix:/a.sock"))
}

// A controller that accepts and never answers holds a call only until its context ends: by its deadline (the
// kernel's time-outs and the shutdown) or by its cancellation, each reported with the context's error.
func TestPostUnixEndsWithItsContext(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	require.NoError(t, os.Mkdir(dir, 0o755))
	sock := filepath.Join(dir, "hook.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = PostUnix(ctx, sock, "/v1/prolog", "Bearer x", []byte("{}"))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = PostUnix(ctx, sock, "/v1/prolog", "Bearer x", []byte("{}"))
	require.ErrorIs(t, err, context.Canceled)

	// Nobody listening: an error naming the socket, at once.
	ln.Close()
	_, err = PostUnix(context.Background(), sock, "/v1/prolog", "Bearer x", []byte("{}"))
	require.ErrorContains(t, err, sock)
}
