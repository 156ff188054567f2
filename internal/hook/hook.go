// Package hook is what slurmctld's PrologSlurmctld and EpilogSlurmctld run (through hooks/juice-prolog.sh and
// hooks/juice-epilog.sh): one run of the prolog or the epilog, a client of the hook API. Both cmd/juice-slurm-hook
// (the small binary the hooks exec) and `juice-slurm hook prolog|epilog` (for installations whose juice-config.sh
// names only juice-slurm) run Main.
//
// It links only the standard library, the hook API's client, the session file's name and the settings reader:
// a prolog that finds its session ready costs one process start and one round trip, and every package linked
// here adds its init and its pages to the start (go list -deps ./cmd/juice-slurm-hook; TestHookLinksLittle).
package hook

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/hookapi/hookwire"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/internal/settings"
	"github.com/juice-slurm/juice-slurm/reconcile/session/filename"
)

// Main runs the prolog (which is "prolog") or the epilog ("epilog") with the flags args, slurmctld's environment
// getenv, and progress to stderr. It only waits: the controller does the work, and it decides from the job's
// admin_comment what the run gets; the hook sends only which run it is. Progress goes to stderr and to the hook
// log.
//
// Exit status of the prolog: 0 when the session file is written or the job asked nothing of Juice; 1 when the run
// cannot be served, the wait ran out or the hook is misconfigured (an Exit, or a settings.UsageError for a bad
// flag or setting): Slurm then requeues a batch job and cancels an interactive one. The epilog always exits 0: a
// failing epilog helps nobody, and the controller releases the session when it sees the job end anyway.
func Main(ctx context.Context, which string, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("juice-slurm hook "+which, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := Flags(fs)
	_, err := settings.Parser{File: DefaultConfig, Known: func(name string) bool { return settings.Names[name] }}.Parse(fs, args)
	return o.run(ctx, which, err, getenv, stderr)
}

// TLS, when set, makes the calls to https: replicas, pinning the certificate in caFile (hookapi.HookPost).
// `juice-slurm hook` sets it; the prolog's own binary (cmd/juice-slurm-hook) links no TLS and leaves it nil: it
// hands a run whose hook-url names an https: replica to juice-slurm (cmd/juice-slurm-hook).
var TLS func(caFile string) (hookwire.PostFunc, error)

// ErrNeedsTLS is Main's answer, before anything is done, for a Juice job whose hook-url names an https: replica
// when TLS is nil: the caller runs `juice-slurm hook` instead (cmd/juice-slurm-hook execs it).
var ErrNeedsTLS = errors.New("hook-url names an https:// controller, which this binary cannot reach: run `juice-slurm hook`, or name the controller's unix: hook socket")

// DefaultConfig is the settings file Main reads when neither --config nor JUICE_CONFIG names one; tests clear it.
var DefaultConfig = settings.DefaultFile

// Exit ends the hook with a status and no further message (the hook said why already).
type Exit int

func (e Exit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Opts are the hook's settings.
type Opts struct {
	url, secretFile, stateDir, logFile, caFile *string
	prologWait, epilogWait                     *time.Duration
	trustComment                               *bool
	scontrol                                   *string
}

// Flags registers the hook's settings in fs (`juice-slurm settings hook` lists them).
func Flags(fs *flag.FlagSet) *Opts {
	return &Opts{
		url:          fs.String("hook-url", "https://127.0.0.1:7171", "the controller's hook API: https://HOST:PORT, or unix:PATH for the controller's --hook-socket on this host (no TLS handshake); a comma-separated list of replicas is tried in turn"),
		caFile:       fs.String("hook-ca", "/etc/juice-slurm/hook.crt", "the certificate the hook API must prove itself with (or its CA): the secret is sent to no other listener"),
		secretFile:   fs.String("hook-secret", "/etc/juice-slurm/hook.secret", "file holding the hook secret (mode 0600)"),
		stateDir:     fs.String("state-dir", "/var/spool/juice-slurm/sessions", "the shared state directory for session files"),
		prologWait:   fs.Duration("prolog-wait", 240*time.Second, "how long the prolog waits for a session; keep it well below srun's give-up time (450s by default)"),
		epilogWait:   fs.Duration("epilog-wait", 15*time.Second, "how long the epilog waits for the release, which it does only while another run waits for GPUs in the pool"),
		trustComment: fs.Bool("trust-comment", false, "also treat a job whose SLURM_JOB_COMMENT is a Juice request as a Juice job (the controller must trust comments too)"),
		logFile:      fs.String("hook-log", "", "also append progress to this file (slurmctld 22.05 discards the hooks' output)"),
		scontrol:     fs.String("scontrol", "/usr/bin/scontrol", "scontrol, to tell the job's user why it got no GPUs (scontrol notify, and the job's comment); empty: tell nobody"),
	}
}

// run is one run, o parsed with the error parseErr.
func (o *Opts) run(ctx context.Context, which string, parseErr error, getenv func(string) string, stderr io.Writer) error {
	if err := parseErr; err != nil {
		// A job that asked nothing of Juice never fails because juice-slurm is misconfigured (a broken settings
		// file, a bad JUICE_* value): it makes no call anyway. Nor does an epilog, which helps nobody by failing.
		if !errors.Is(err, flag.ErrHelp) && (which == "epilog" || getenv("SPANK_JUICE_REQUEST") == "") {
			fmt.Fprintf(stderr, "juice: job %s: %v (ignored: the %s of a job without a Juice request passes)\n",
				getenv("SLURM_JOB_ID"), err, which)
			return nil
		}
		return err
	}
	url, secretFile, stateDir, prologWait, epilogWait, trustComment, logFile := o.url, o.secretFile, o.stateDir,
		o.prologWait, o.epilogWait, o.trustComment, o.logFile
	h := &hook{stateDir: *stateDir, out: stderr, exitCode: getenv("SLURM_JOB_EXIT_CODE2"), scontrol: *o.scontrol,
		comment: getenv("SLURM_JOB_COMMENT"), request: getenv("SPANK_JUICE_REQUEST"), trustComment: *trustComment,
		client: &hookwire.Client{URL: *url, Secret: secretfile.New(*secretFile, secretfile.MinLength(16))}}
	// Pinned: without the certificate the hook sends nothing (a listener that cannot prove it is the controller
	// never gets the secret). A controller on this host reached by its Unix socket proves itself by the socket's
	// directory instead (hookwire.DialUnix), and the certificate is not even read.
	var tlsErr error
	if hookwire.NeedsTLS(*url) {
		if TLS == nil {
			tlsErr = ErrNeedsTLS
		} else {
			h.client.Post, tlsErr = TLS(*o.caFile)
		}
	}
	if *logFile != "" {
		if f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			defer f.Close()
			// It names every user's jobs and sessions (F10): never readable by others, even if made so.
			if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
				_ = f.Chmod(0o600)
			}
			h.log = f
		} else {
			fmt.Fprintf(stderr, "juice: hook log %s: %v\n", *logFile, err)
		}
	}
	juice, err := h.fromEnv(getenv, *trustComment)
	if err == nil && juice && tlsErr == ErrNeedsTLS {
		// Handed over before anything is done here: juice-slurm hook does it all, the leftovers' scan included.
		return ErrNeedsTLS
	}
	if err == nil && which == "prolog" {
		// Before any job of this id starts, Juice or not: a file an earlier job with the same id left behind
		// must never reach it (the compute node's plugin, which cannot know the reservation, would open it).
		h.removeLeftovers()
	}
	switch {
	case err != nil:
		h.say("%v", err)
		if which == "epilog" || getenv("SPANK_JUICE_REQUEST") == "" {
			return nil
		}
		return Exit(1)
	case !juice:
		return nil // not a Juice job: nothing to wait for
	case tlsErr != nil:
		h.say("%v", tlsErr)
		if which == "epilog" {
			return nil
		}
		return Exit(1)
	case which == "prolog":
		return h.prolog(ctx, *prologWait)
	}
	h.epilog(ctx, *epilogWait)
	return nil
}

// hook is one run of the prolog or the epilog.
type hook struct {
	client   *hookwire.Client
	stateDir string
	cluster  string
	job      uint32
	run      int
	exitCode string    // the epilog's SLURM_JOB_EXIT_CODE2
	out, log io.Writer // stderr, and the hook log (or nil)
	// scontrol tells the job's user why the prolog failed (empty: nobody is told); comment is the job's comment
	// (SLURM_JOB_COMMENT), request the plugin's request (for display only: the controller trusts admin_comment).
	scontrol, comment, request string
	trustComment               bool
}

// fromEnv reads which run this is from slurmctld's environment, and whether the job asked for Juice at all. The
// latter is only a hint to skip the call for other jobs: what a run gets is decided by the controller from the
// job's admin_comment, which its owner cannot write.
func (h *hook) fromEnv(getenv func(string) string, trustComment bool) (bool, error) {
	job, err := strconv.ParseUint(getenv("SLURM_JOB_ID"), 10, 32)
	if err != nil {
		return false, fmt.Errorf("SLURM_JOB_ID %q is not a job id: not run by slurmctld?", getenv("SLURM_JOB_ID"))
	}
	h.job = uint32(job)
	if s := getenv("SLURM_JOB_RESTART_COUNT"); s != "" {
		if h.run, err = strconv.Atoi(s); err != nil || h.run < 0 {
			return false, fmt.Errorf("SLURM_JOB_RESTART_COUNT %q is not a restart count", s)
		}
	}
	h.cluster = getenv("SLURM_CLUSTER_NAME")
	if h.cluster == "" {
		return false, errors.New("SLURM_CLUSTER_NAME is not set: not run by slurmctld?")
	}
	juice := getenv("SPANK_JUICE_REQUEST") != "" || trustComment && strings.HasPrefix(getenv("SLURM_JOB_COMMENT"), "juice:")
	return juice, nil
}

// say writes one progress line, with control characters escaped so that nothing can forge a line of the log.
func (h *hook) say(format string, args ...any) {
	msg := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, fmt.Sprintf(format, args...))
	line := fmt.Sprintf("juice: job %d run %d: %s\n", h.job, h.run, msg)
	fmt.Fprint(h.out, line)
	if h.log != nil {
		fmt.Fprint(h.log, time.Now().Format(time.RFC3339)+" "+line)
	}
}

// callWait bounds one call's wait on the server: the hook calls again until its deadline, saying how long it
// has waited, so a long wait shows progress.
const callWait = 10 * time.Second

// retry paces calls after a failed one.
var retry = backoff.Policy{Base: 200 * time.Millisecond, Max: 3 * time.Second}

func (h *hook) prolog(ctx context.Context, wait time.Duration) error {
	start := time.Now()
	deadline := start.Add(wait)
	h.say("waiting up to %s for the Juice session", wait)
	// last is what the user is told when the wait runs out: the last thing the controller said, or why it could
	// not be asked.
	last := "the juice-slurm controller did not answer"
	for failures := 0; ; {
		left := time.Until(deadline)
		if left <= 0 {
			h.say("no session within %s; failing the prolog so that Slurm requeues the job", wait)
			return h.fail(ctx, fmt.Sprintf("no GPUs within %s: %s", wait, last))
		}
		rep, err := h.client.Prolog(ctx, hookwire.PrologRequest{Cluster: h.cluster, JobID: h.job, Run: h.run,
			WaitSeconds: min(left, callWait).Seconds()})
		switch {
		case ctx.Err() != nil:
			return Exit(1)
		case hookwire.IsPermanent(err):
			// Asking again cannot help (a wrong secret, a request the controller refuses): fail now, not at the
			// deadline with the job held CONFIGURING meanwhile.
			h.say("hook API refused the call: %v", err)
			return h.fail(ctx, fmt.Sprintf("the juice-slurm controller refused the job: %v", err))
		case err != nil:
			h.say("hook API: %v (retrying, %s of %s)", err, time.Since(start).Round(time.Second), wait)
			last = fmt.Sprintf("the juice-slurm controller is unreachable (%v)", err)
			_ = backoff.SleepFor(ctx, min(retry.Delay(failures), time.Until(deadline)))
			failures++
			continue
		}
		failures = 0
		switch rep.Outcome {
		case hookwire.OutcomeReady:
			if err := h.writeSession(rep.File, rep.Session); err != nil {
				h.say("cannot write the session file: %v", err)
				return Exit(1)
			}
			h.say("session ready after %s", time.Since(start).Round(time.Millisecond))
			h.clearReason(ctx)
			return nil
		case hookwire.OutcomeFailed:
			h.say("cannot be served: %s", rep.Reason)
			h.removeSession() // a file of this job id and run is a leftover: never this run's
			return h.fail(ctx, "cannot get GPUs: "+rep.Reason)
		case hookwire.OutcomeNone:
			h.removeSession()
			return nil
		default:
			h.say("still waiting (%s: %s), %s of %s", rep.State, rep.Reason, time.Since(start).Round(time.Second), wait)
			last = rep.Reason
			if rep.State == "waiting" {
				last += " (the pool has no free GPU that fits)"
			}
		}
	}
}

func (h *hook) epilog(ctx context.Context, wait time.Duration) {
	h.removeSession()
	rep, err := h.client.Epilog(ctx, hookwire.EpilogRequest{Cluster: h.cluster, JobID: h.job, Run: h.run,
		ExitCode: h.exitCode, WaitSeconds: wait.Seconds()})
	switch {
	case err != nil:
		h.say("hook API: %v; the controller releases the session when it sees the job end", err)
	case rep.Outcome == hookwire.OutcomeReleased:
		h.say("session released (%s)", rep.Reason)
	case rep.Outcome == hookwire.OutcomeNone:
	default:
		h.say("release under way (%s: %s)", rep.State, rep.Reason)
	}
}

// writeSession writes the sealed file under a temporary name and renames it, so the compute node never reads
// half a file. Mode 0600: only SlurmUser (who writes it) and root (slurmstepd) read it.
//
// It is not fsync'ed (0.2 to 3 ms of every prolog, issue 24): close and rename give the compute node all it needs,
// the whole file or none under the name it opens. On NFS, the usual shared state directory, close itself sends
// the data to the server, which stores it before it answers (a sync export). What an fsync would add is only
// against a power loss of the host whose disk holds the directory within the kernel's writeback time (about 30
// s): then the file may come back empty or missing, and a task started afterwards fails with the plugin's "its
// session cannot be used" (never runs with anything else: a short file fails its seal's check). The sealed
// session itself stays in PostgreSQL (juice-slurm show names it).
func (h *hook) writeSession(name string, data []byte) error {
	want := filename.Of(h.job, h.run)
	if name != want || len(data) == 0 {
		return fmt.Errorf("the hook API sent session file %q (%d bytes) for %s", name, len(data), want)
	}
	// One prolog per run at a time; the process id keeps two hooks of the same run (slurmctld restarted under one)
	// off each other's file.
	tmp := filepath.Join(h.stateDir, "."+name+".new"+strconv.Itoa(os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(h.stateDir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	h.markDir()
	return nil
}

// markDir leaves filename.HooksMark in the state directory, once: the controller then knows it is the directory the
// hooks write to, and looks for runs Slurm runs without their file there (reconcile.Stranded). One system call,
// which finds the file there at every later prolog; a failure is no prolog's concern.
func (h *hook) markDir() {
	fd, err := syscall.Open(filepath.Join(h.stateDir, filename.HooksMark), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err == nil {
		syscall.Close(fd)
	}
}

func (h *hook) removeSession() {
	p := filepath.Join(h.stateDir, filename.Of(h.job, h.run))
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.say("cannot remove %s: %v", p, err)
	}
}

// removeLeftovers removes every session file of this job id, whatever its run: none can be this run's yet (only
// this prolog writes it), one of an earlier run is stale, and one of a higher run can only be an earlier job's
// (runs only grow), which the plugin, taking the newest file at or above the run it knows, would otherwise take.
// Quiet unless it removes something or cannot.
//
// Every prolog reads the directory, which holds a file per running Juice job, so it reads the kernel's records
// into one buffer and looks at each name where it lies: a string is made only for a name of this job id
// (os.ReadDir or Readdirnames would make one for every file; 10,000 names took them 3.2 ms here).
func (h *hook) removeLeftovers() {
	fd, err := syscall.Open(h.stateDir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if err != syscall.ENOENT {
			h.say("cannot look for leftover session files: open %s: %v", h.stateDir, err)
		}
		return
	}
	defer syscall.Close(fd)
	prefix := strconv.FormatUint(uint64(h.job), 10) + "."
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			h.say("cannot look for leftover session files: read %s: %v", h.stateDir, err)
			return
		}
		if n <= 0 {
			return
		}
		for rec := buf[:n]; len(rec) >= direntName; {
			// struct linux_dirent64: inode (8), offset (8), record length (2), type (1), the name ending in NUL.
			size := int(binary.NativeEndian.Uint16(rec[16:18]))
			if size < direntName || size > len(rec) {
				h.say("cannot look for leftover session files: a bad directory record in %s", h.stateDir)
				return
			}
			name := rec[direntName:size]
			rec = rec[size:]
			if len(name) <= len(prefix) || string(name[:len(prefix)]) != prefix {
				continue
			}
			if end := bytes.IndexByte(name, 0); end >= 0 {
				name = name[:end]
			}
			h.removeLeftover(string(name))
		}
	}
}

// direntName is where a name starts in a struct linux_dirent64.
const direntName = 19

// removeLeftover removes name, a file of this job id in the state directory, if it is a session file.
func (h *hook) removeLeftover(name string) {
	if job, _, ok := filename.Parse(name); !ok || job != h.job {
		return
	}
	p := filepath.Join(h.stateDir, name)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.say("cannot remove the leftover session file %s: %v", p, err)
		return
	}
	h.say("removed a leftover session file of an earlier job with this id: %s", name)
}

// reasonPrefix starts every reason the hook writes into a job's comment. A request starts "juice:v1:", so a
// reason is never taken for one.
const reasonPrefix = "juice: "

// fail tells the job's user why its prolog fails, then fails it: `scontrol notify` prints the line on the
// terminal of a waiting srun or salloc (slurmctld's own message says only "PrologSlurmctld failed"), and the job's
// comment keeps it where `scontrol show job` and `squeue -o %k` show it while a requeued batch job waits.
func (h *hook) fail(ctx context.Context, reason string) error {
	msg := reasonPrefix + sanitize(reason)
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	h.scontrolRun(ctx, "notify", strconv.FormatUint(uint64(h.job), 10), msg)
	if h.mayWriteComment() {
		h.scontrolRun(ctx, "update", "jobid="+strconv.FormatUint(uint64(h.job), 10), "comment="+msg)
	}
	return Exit(1)
}

// clearReason puts the request back into a comment that holds an earlier run's failure, once a run is served.
func (h *hook) clearReason(ctx context.Context) {
	if strings.HasPrefix(h.comment, reasonPrefix) && h.mayWriteComment() && !strings.ContainsAny(h.request, "\n\r") {
		h.scontrolRun(ctx, "update", "jobid="+strconv.FormatUint(uint64(h.job), 10), "comment="+h.request)
	}
}

// mayWriteComment: only a comment that job_submit.lua filled (the request), or an earlier reason of ours, is
// replaced; never the user's own words, and never when the controller trusts comments (there the comment is the
// request).
func (h *hook) mayWriteComment() bool {
	return !h.trustComment && (h.comment == "" || strings.HasPrefix(h.comment, "juice:"))
}

// scontrolRun runs scontrol with a bound; a failure is logged, never fatal (the prolog's outcome stands).
func (h *hook) scontrolRun(ctx context.Context, args ...string) {
	if h.scontrol == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, h.scontrol, args...).CombinedOutput()
	if err != nil {
		h.say("scontrol %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
	}
}

// sanitize keeps a message on one line of printable text.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
