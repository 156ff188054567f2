//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// Juice inside a site's own setup: the site's job_submit.lua calling our module, the site's PrologSlurmctld and
// EpilogSlurmctld beside ours, and jobs that ask nothing of Juice passing whatever state juice-slurm is in.

// slurmEtc is the host's path of slurmctld's configuration directory (inside the chroot of a chroot test bed).
func slurmEtc() string { return world.env.HostPath("/etc/slurm") }

// replaceFile puts text at path (temporary name, then rename) with an mtime in a later second than the file's
// current one: slurmctld re-reads job_submit.lua only when its mtime (in whole seconds) grew.
func replaceFile(t *testing.T, path string, text []byte, mode os.FileMode) {
	t.Helper()
	if fi, err := os.Stat(path); err == nil {
		for time.Now().Unix() <= fi.ModTime().Unix() {
			time.Sleep(100 * time.Millisecond)
		}
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".e2e")
	require.NoError(t, os.WriteFile(tmp, text, mode))
	require.NoError(t, os.Chmod(tmp, mode))
	require.NoError(t, os.Rename(tmp, path))
}

// useJobSubmit installs text as slurmctld's job_submit.lua until the test ends, then the repository's default.
func useJobSubmit(t *testing.T, text []byte) {
	t.Helper()
	path := filepath.Join(slurmEtc(), "job_submit.lua")
	replaceFile(t, path, text, 0o644)
	t.Cleanup(func() {
		def, err := os.ReadFile(filepath.Join(world.repo, "hooks/job_submit.lua"))
		require.NoError(t, err)
		replaceFile(t, path, def, 0o644)
	})
}

func scontrolShow(t *testing.T, job uint32) string {
	t.Helper()
	out, code := slurm(t, 10*time.Second, "scontrol", "show", "job", strconv.Itoa(int(job)))
	require.Equal(t, 0, code, out)
	return out
}

// A site's own job_submit.lua that requires juice_submit and calls it: the site's rule (a default time limit,
// a refusal by name) and Juice's request handling both apply on the real slurmctld.
func TestSiteJobSubmitCallsTheModule(t *testing.T) {
	s := openStore(t)
	site, err := os.ReadFile(filepath.Join(world.repo, "test/site/job_submit.lua"))
	require.NoError(t, err)
	useJobSubmit(t, site)

	plain := sbatch(t, "-o", "/dev/null", "--wrap", "true")
	require.Contains(t, scontrolShow(t, plain), "TimeLimit=00:07:00", "the site's default time limit")
	require.Equal(t, slurmrest.StateCompleted, waitJobDone(t, plain, 60*time.Second).State)

	outFile := filepath.Join(world.dir, "site-submit.out")
	job := sbatch(t, "--time=3", "--juice-pool=test", "-o", world.env.JobPath(outFile), "--wrap", "env")
	show := scontrolShow(t, job)
	require.Contains(t, show, "TimeLimit=00:03:00", "the user's time limit stays")
	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, "juice:v1:pool=test,gpus=1", j.AdminComment, "our module wrote the request")
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })

	out, code := slurm(t, 30*time.Second, "sbatch", "--job-name=site-refuses-this", "--juice-pool=test", "--wrap", "true")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "site: jobs of that name are not allowed here")
	noLiveSession(t, s, job)
}

// The site's PrologSlurmctld and EpilogSlurmctld run beside juice-slurm's through hooks/slurmctld-parts.sh (the
// test bed is wired so): the site's part first; a site prolog that refuses a job stops it before Juice waits.
func TestSitePrologAndEpilogRunBesideJuice(t *testing.T) {
	s := openStore(t)
	traceDir, err := os.MkdirTemp(world.env.HostPath(os.TempDir()), "juice-e2e-site-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(traceDir) })
	require.NoError(t, os.Chmod(traceDir, 0o1777)) // the parts run as SlurmUser
	trace := filepath.Join(traceDir, "trace")
	for _, ctx := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
		part := filepath.Join(slurmEtc(), ctx+".d", "10-site")
		script := fmt.Sprintf("#!/bin/sh\necho \"$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID\" >>%s\n", world.env.JobPath(trace))
		if ctx == "prolog_slurmctld" {
			script += "[ \"$SLURM_JOB_COMMENT\" = site-refuse ] && exit 1\n"
		}
		script += "exit 0\n"
		replaceFile(t, part, []byte(script), 0o755)
		t.Cleanup(func() { os.Remove(part) })
	}
	traced := func(line string) bool {
		b, _ := os.ReadFile(trace)
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).Match(b)
	}

	out, code := slurm(t, 90*time.Second, "srun", "--juice-pool=test", "env")
	require.Equal(t, 0, code, out)
	job := jobIDFrom(t, out)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, out, "juice-slurm's prolog ran after the site's")
	require.True(t, traced(fmt.Sprintf("prolog_slurmctld %d", job)), "the site's prolog ran")
	waitFor(t, 30*time.Second, "the site's epilog ran", func() bool { return traced(fmt.Sprintf("epilog_slurmctld %d", job)) })
	waitFor(t, 30*time.Second, "released by juice-slurm's epilog", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })

	name := fmt.Sprintf("e2e-site-refuse-%d", time.Now().UnixNano()%1e6)
	out, code = slurm(t, 90*time.Second, "srun", "--job-name="+name, "--comment=site-refuse", "--juice-pool=test", "true")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "PrologSlurmctld failed")
	q, _ := slurm(t, 10*time.Second, "squeue", "-h", "--states=all", "-n", name, "-o", "%i")
	refused, err := strconv.ParseUint(strings.TrimSpace(q), 10, 32)
	require.NoError(t, err, q)
	require.True(t, traced(fmt.Sprintf("prolog_slurmctld %d", refused)))
	// The refused job's EpilogSlurmctld is not waited for: Slurm does not always let it run. 22.05 cancelled the
	// srun whose PrologSlurmctld failed and SIGKILLed the job's EpilogSlurmctld 25 ms after starting it
	// ("slurmscriptd: _run_script: JobId=18824 EpilogSlurmctld killed by signal 9", 2026-12-07), before the site's
	// part had written its line; the accepted job's epilog above shows the parts run.
	hooks, err := os.ReadFile(world.env.HookLog())
	require.NoError(t, err)
	require.NotContains(t, string(hooks), fmt.Sprintf("juice: job %d run 0: waiting", refused),
		"juice-slurm's prolog waited although the site's prolog had refused the job")
	waitFor(t, 30*time.Second, "no reservation of the refused job open", func() bool {
		st := stateOf(t, s, run(uint32(refused), 0))
		return st == "" || st.Final()
	})
	noLiveSession(t, s, uint32(refused))
}

// plainJobsPass runs srun, sbatch and salloc jobs that ask nothing of Juice: each must succeed, and the batch
// job must complete in its first run (a failed prolog would have requeued it).
func plainJobsPass(t *testing.T) {
	t.Helper()
	out, code := slurm(t, 60*time.Second, "srun", "true")
	require.Equal(t, 0, code, "srun: %s", out)
	job := sbatch(t, "-o", "/dev/null", "--wrap", "true")
	j := waitJobDone(t, job, 60*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State, "sbatch job %d", job)
	require.Equal(t, 0, j.Run, "sbatch job %d was requeued", job)
	out, code = slurm(t, 60*time.Second, "salloc", "srun", "true")
	require.Equal(t, 0, code, "salloc: %s", out)
}

// A job without a Juice request never fails because of juice-slurm: not with the hooks' config file missing,
// job_submit.lua's module missing, the controller down, or the controller's PostgreSQL down.
func TestPlainJobsPassWhateverJuiceSlurmsState(t *testing.T) {
	t.Run("hook config missing", func(t *testing.T) {
		config := world.env.HostPath("/etc/juice-slurm/juice-config.sh")
		require.NoError(t, os.Rename(config, config+".e2e-hidden"))
		t.Cleanup(func() { require.NoError(t, os.Rename(config+".e2e-hidden", config)) })
		plainJobsPass(t)
		// A Juice job fails at its prolog, not silently without its GPUs.
		out, code := slurm(t, 60*time.Second, "srun", "--juice-pool=test", "true")
		require.NotEqual(t, 0, code, out)
		require.Contains(t, out, "PrologSlurmctld failed")
	})
	t.Run("settings file broken", func(t *testing.T) {
		// juice-slurm's own settings file, which `juice-slurm hook` reads, with a setting no command knows.
		settings := world.env.HostPath("/etc/juice-slurm/juice-slurm.conf")
		old, err := os.ReadFile(settings)
		had := err == nil
		require.NoError(t, os.WriteFile(settings, []byte("no-such-setting = 1\n"), 0o644))
		t.Cleanup(func() {
			if had {
				require.NoError(t, os.WriteFile(settings, old, 0o644))
			} else {
				require.NoError(t, os.Remove(settings))
			}
		})
		plainJobsPass(t)
	})
	t.Run("job_submit module missing", func(t *testing.T) {
		module := filepath.Join(slurmEtc(), "juice_submit.lua")
		require.NoError(t, os.Rename(module, module+".e2e-hidden"))
		// slurmctld keeps its loaded script until job_submit.lua's mtime changes.
		def, err := os.ReadFile(filepath.Join(world.repo, "hooks/job_submit.lua"))
		require.NoError(t, err)
		replaceFile(t, filepath.Join(slurmEtc(), "job_submit.lua"), def, 0o644)
		t.Cleanup(func() {
			require.NoError(t, os.Rename(module+".e2e-hidden", module))
			replaceFile(t, filepath.Join(slurmEtc(), "job_submit.lua"), def, 0o644)
		})
		plainJobsPass(t)
		out, code := slurm(t, 30*time.Second, "sbatch", "--juice-pool=test", "--wrap", "true")
		require.NotEqual(t, 0, code, out)
		require.Contains(t, out, "juice: this cluster cannot take Juice jobs now")
	})
	t.Run("controller down", func(t *testing.T) {
		testbed.StopProcess(world.controller)
		t.Cleanup(func() { require.NoError(t, startController()) })
		plainJobsPass(t)
	})
	t.Run("PostgreSQL down", func(t *testing.T) {
		// The controller runs, but its database goes away: a proxy in front of the test bed's PostgreSQL (which
		// other suites share) is closed.
		u, err := url.Parse(world.dbURL)
		require.NoError(t, err)
		proxy, err := startProxy(u.Host)
		require.NoError(t, err)
		t.Cleanup(proxy.Close)
		u.Host = proxy.Addr()
		// The test bed's passfile names PostgreSQL's own port: carry the password in the URL through the proxy.
		if pf := u.Query().Get("passfile"); pf != "" {
			u.User = url.UserPassword(u.User.Username(), passFromFile(t, pf, u.User.Username()))
		}
		testbed.StopProcess(world.controller)
		require.NoError(t, startControllerOn(u.String()))
		t.Cleanup(func() {
			testbed.StopProcess(world.controller)
			require.NoError(t, startController())
		})
		proxy.Close()
		plainJobsPass(t)
	})
}

// passFromFile finds user's password in a PostgreSQL passfile (host:port:database:user:password lines).
func passFromFile(t *testing.T, path, user string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 5)
		if len(f) == 5 && (f[3] == user || f[3] == "*") {
			return f[4]
		}
	}
	t.Fatalf("no password for %s in %s", user, path)
	return ""
}

// tcpProxy forwards connections to a target until closed; Close cuts every open connection too.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	return p, nil
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

func (p *tcpProxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}
