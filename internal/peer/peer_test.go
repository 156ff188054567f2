package peer

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A loopback peer is named by the uid that owns its socket, whoever it is: here this process's own, and another
// user's (nobody's) when the test runs as root.
func TestOfNamesTheLocalUser(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := Of(s), fmt.Sprintf("uid:%d", os.Getuid()); got != want {
		t.Fatalf("Of = %q, want %q", got, want)
	}
	if os.Getuid() != 0 {
		t.Log("not root: the other user's connection is not tried")
		return
	}
	// nobody connects and waits; the server names it by nobody's uid.
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c",
		"exec 3<>/dev/tcp/127.0.0.1/"+strings.Split(ln.Addr().String(), ":")[1]+"; sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	s2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := Of(s2); got != "uid:65534" {
		t.Fatalf("Of(nobody's connection) = %q", got)
	}
}
