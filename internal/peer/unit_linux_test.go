package peer

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// The shipped controller unit restricts the socket families the controller may open (RestrictAddressFamilies),
// which systemd enforces with a seccomp filter on socket(2). Under it the kernel's sock_diag answer, which tells
// local users apart for the hook server's per-user caps, must still come: without AF_NETLINK every local client,
// slurmctld's prologs among them, was one peer, "ip:127.0.0.1", and one user's flood held up everyone's prologs.
// The test applies the unit's list the way systemd does, to a child process, and asks it to name a local peer.
func TestOfWorksUnderTheShippedUnit(t *testing.T) {
	if os.Getenv(underUnitEnv) != "" {
		return // the child's work is in TestMain
	}
	families := unitFamilies(t, "../../deploy/juice-slurm-controller.service")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOfWorksUnderTheShippedUnit$")
	cmd.Env = append(os.Environ(), underUnitEnv+"="+strings.Join(families, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child under RestrictAddressFamilies=%s: %v\n%s", strings.Join(families, " "), err, out)
	}
	got := strings.TrimSpace(string(out))
	if want := fmt.Sprintf("uid:%d", os.Getuid()); !strings.Contains(got, "peer="+want) {
		t.Fatalf("under the unit's RestrictAddressFamilies=%s a local peer is not named by its uid (want %s): %s",
			strings.Join(families, " "), want, got)
	}
	if !strings.Contains(got, "filter=on") {
		t.Fatalf("the child's filter did not refuse a family the unit leaves out: %s", got)
	}
}

const underUnitEnv = "JUICE_PEER_UNDER_UNIT"

func TestMain(m *testing.M) {
	if fams := os.Getenv(underUnitEnv); fams != "" {
		os.Exit(underUnit(strings.Fields(fams)))
	}
	os.Exit(m.Run())
}

// underUnit is the child: it restricts socket(2) to the families, checks a family left out is refused, and names
// the peer of a loopback connection.
func underUnit(families []string) int {
	if err := restrictFamilies(families); err != nil {
		fmt.Println("restrict:", err)
		return 1
	}
	filter := "off"
	if fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM, 0); err == syscall.EAFNOSUPPORT {
		filter = "on"
	} else if err == nil {
		syscall.Close(fd)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		fmt.Println("accept:", err)
		return 1
	}
	defer s.Close()
	fmt.Printf("filter=%s peer=%s\n", filter, Of(s))
	return 0
}

// unitFamilies reads a unit's RestrictAddressFamilies allow-list (every line of it, as systemd adds them up).
func unitFamilies(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "RestrictAddressFamilies=")
		if !ok {
			continue
		}
		if strings.HasPrefix(v, "~") || v == "none" {
			t.Fatalf("%s: RestrictAddressFamilies=%s: the test reads allow-lists only", path, v)
		}
		out = append(out, strings.Fields(v)...)
	}
	if len(out) == 0 {
		t.Fatalf("%s sets no RestrictAddressFamilies", path)
	}
	return out
}

var familyNumbers = map[string]uint32{"AF_UNIX": syscall.AF_UNIX, "AF_INET": syscall.AF_INET,
	"AF_INET6": syscall.AF_INET6, "AF_NETLINK": syscall.AF_NETLINK, "AF_PACKET": syscall.AF_PACKET}

// restrictFamilies installs, on every thread of this process, a seccomp filter that fails socket(2) with
// EAFNOSUPPORT for any family not in families: what systemd's RestrictAddressFamilies does.
func restrictFamilies(families []string) error {
	// The audit architecture and seccomp(2)'s number (the syscall package has neither).
	a, ok := map[string]struct{ arch, seccomp uint32 }{"amd64": {0xc000003e, 317}, "arm64": {0xc00000b7, 277}}[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no seccomp architecture for %s", runtime.GOARCH)
	}
	arch := a.arch
	const prSetNoNewPrivs = 38
	const (
		ldAbs    = 0x20 // BPF_LD | BPF_W | BPF_ABS
		jeq      = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
		ret      = 0x06 // BPF_RET | BPF_K
		allow    = 0x7fff0000
		errno    = 0x00050000
		offNr    = 0  // struct seccomp_data: nr
		offArch  = 4  // arch
		offArgs0 = 16 // args[0], its low 32 bits on a little-endian machine
	)
	var allowed []uint32
	for _, f := range families {
		n, ok := familyNumbers[f]
		if !ok {
			return fmt.Errorf("family %s: not known to the test", f)
		}
		allowed = append(allowed, n)
	}
	// The program: another architecture or syscall is allowed; socket(2) of a listed family is allowed, of any
	// other denied.
	prog := []syscall.SockFilter{{Code: ldAbs, K: offArch}}
	// From the arch check (index 1) to allow (the last, index 6+len(allowed)): a jump counts from the next one.
	n := 4 + len(allowed)
	prog = append(prog, syscall.SockFilter{Code: jeq, K: arch, Jt: 0, Jf: uint8(n)}) // another arch: allow
	prog = append(prog, syscall.SockFilter{Code: ldAbs, K: offNr})
	prog = append(prog, syscall.SockFilter{Code: jeq, K: uint32(syscall.SYS_SOCKET), Jt: 0, Jf: uint8(n - 2)})
	prog = append(prog, syscall.SockFilter{Code: ldAbs, K: offArgs0})
	for i, fam := range allowed {
		prog = append(prog, syscall.SockFilter{Code: jeq, K: fam, Jt: uint8(len(allowed) - i), Jf: 0})
	}
	prog = append(prog, syscall.SockFilter{Code: ret, K: errno | uint32(syscall.EAFNOSUPPORT)})
	prog = append(prog, syscall.SockFilter{Code: ret, K: allow})
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	const seccompSetModeFilter, seccompFilterFlagTsync = 1, 1
	if _, _, e := syscall.RawSyscall(uintptr(a.seccomp), seccompSetModeFilter, seccompFilterFlagTsync,
		uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}
