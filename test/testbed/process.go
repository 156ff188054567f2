package testbed

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The process helpers of the suites that run juice-sim and the controller as real processes (e2e, chaos).

// StartLogged starts c in a process group of its own with its output appended to logPath.
func StartLogged(c *exec.Cmd, logPath string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c.Start()
}

// StopProcess ends c with SIGTERM, then SIGKILL after 10 s.
func StopProcess(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = c.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// StopPidFile stops the process whose pid the file holds (the test bed's services) and removes the file.
func StopPidFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	if syscall.Kill(pid, syscall.SIGTERM) == nil {
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	_ = os.Remove(path)
}

// PortFree fails when something already listens on addr: a leftover simulator or controller would answer in
// place of the one a run starts, and the run would test the wrong processes.
func PortFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is taken (a leftover juice-sim or controller? stop it first): %w", addr, err)
	}
	return ln.Close()
}

// HookCA is the certificate of the test bed's hook API (test/testbed.sh wire makes it with
// deploy/make-hook-cert.sh): controllers started by the suites serve it, the hooks pin it.
const HookCA = "/etc/juice-slurm/hook.crt"

// WaitHook waits until the hook API at addr (host:port) answers /path over TLS with the pinned certificate: a
// squatter on the port cannot pass for the controller.
func WaitHook(addr, path string, within time.Duration) error {
	return WaitHookCA(HookCA, addr, path, within)
}

// WaitHookCA is WaitHook with the certificate in file ca (a chroot test bed's: Env.HookCert).
func WaitHookCA(ca, addr, path string, within time.Duration) error {
	pem, err := os.ReadFile(ca)
	if err != nil {
		return fmt.Errorf("the hook API's certificate: %w (the test bed's wire makes it)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no certificate", ca)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}}
	return waitHTTP(c, "https://"+addr+path, within)
}

// WaitHTTP waits until url answers 200.
func WaitHTTP(url string, within time.Duration) error {
	return waitHTTP(http.DefaultClient, url, within)
}

func waitHTTP(c *http.Client, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", url, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CleanEnv is the process environment without SLURM_JWT: with it, even empty, srun and sbatch switch to
// auth/jwt (see the notes on Slurm).
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_JWT=") {
			env = append(env, kv)
		}
	}
	return env
}
