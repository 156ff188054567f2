// Package peer names who is at the other end of a TCP connection, for per-peer limits. For a remote peer that is
// its IP address. On loopback every local user shares 127.0.0.1 with slurmctld's hooks, so the address says
// nothing: there the peer is the uid that owns the client's socket, which the kernel reports through the
// sock_diag netlink interface (as ss -tpe does), one exact lookup per connection.
package peer

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Of names the peer of c: "uid:N" for a local connection whose owner the kernel reports (a Unix socket's peer,
// or a loopback TCP connection's), else "ip:ADDR".
func Of(c net.Conn) string {
	if uc, ok := c.(*net.UnixConn); ok {
		if uid, err := UnixUID(uc); err == nil {
			return fmt.Sprintf("uid:%d", uid)
		}
		return "addr:unix"
	}
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return "addr:" + c.RemoteAddr().String()
	}
	ip, _ := netip.AddrFromSlice(remote.IP)
	ip = ip.Unmap()
	if ip.IsLoopback() {
		if uid, err := LocalUID(remote.AddrPort(), local.AddrPort()); err == nil {
			return fmt.Sprintf("uid:%d", uid)
		}
	}
	return "ip:" + ip.String()
}

// LocalUID is the uid owning the local TCP socket whose address is client and whose peer is server: the client
// end of a connection this host accepted on server.
func LocalUID(client, server netip.AddrPort) (uint32, error) {
	family := syscall.AF_INET
	if !client.Addr().Unmap().Is4() {
		family = syscall.AF_INET6
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer syscall.Close(fd)
	// struct nlmsghdr (16) + struct inet_diag_req_v2 (56).
	req := make([]byte, 16+56)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], syscall.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1)
	r := req[16:]
	r[0], r[1] = byte(family), syscall.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every TCP state
	id := r[8:]                     // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], client.Port())
	binary.BigEndian.PutUint16(id[2:], server.Port())
	putAddr(id[4:20], client.Addr(), family)
	putAddr(id[20:36], server.Addr(), family)
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case syscall.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if e := int32(ne.Uint32(m.Data)); e != 0 {
					return 0, fmt.Errorf("sock_diag: %w", syscall.Errno(-e))
				}
			}
			return 0, fmt.Errorf("sock_diag: an error message")
		case sockDiagByFamily:
			// struct inet_diag_msg: family, state, timer, retrans (4), sockid (48), expires, rqueue, wqueue (12), uid.
			if len(m.Data) < 68 {
				return 0, fmt.Errorf("sock_diag: a short answer (%d bytes)", len(m.Data))
			}
			return ne.Uint32(m.Data[64:]), nil
		}
	}
	return 0, fmt.Errorf("sock_diag: no answer for %s -> %s", client, server)
}

const (
	netlinkSockDiag  = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
)

func putAddr(b []byte, a netip.Addr, family int) {
	if family == syscall.AF_INET {
		v4 := a.Unmap().As4()
		copy(b, v4[:])
		return
	}
	v6 := a.As16()
	copy(b, v6[:])
}

// UnixUID is the uid of the process at the other end of a Unix socket, as the kernel recorded it when that end
// connected or listened (SO_PEERCRED): it cannot be forged by the peer.
func UnixUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred.Uid, nil
}
