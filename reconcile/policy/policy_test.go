package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/test/vectors"
)

// dash reads policy.tsv's "-" as an empty string.
func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// TestVectors checks every row of test/vectors/policy.tsv, which job_submit.lua's test reads too: both sides
// parse the same files and refuse the same requests for the same reason.
func TestVectors(t *testing.T) {
	for _, row := range vectors.Read(t, "policy.tsv", 100) {
		n, cols := row.Line, row.Cols
		if len(cols) != 6 {
			t.Fatalf("policy.tsv:%d: want 6 columns, got %d", n, len(cols))
		}
		job := Job{Account: dash(cols[2]), Partition: dash(cols[3])}
		held, err := strconv.Atoi(cols[4])
		if err != nil {
			t.Fatalf("policy.tsv:%d: held %q: %v", n, cols[4], err)
		}
		text := vectors.Unescape(t, cols[0])
		if cols[0] == "-" {
			text = ""
		}
		req, err := request.Parse(cols[1])
		if err != nil {
			t.Fatalf("policy.tsv:%d: request %q: %v", n, cols[1], err)
		}
		p, err := Parse(text)
		got := "ok"
		if err != nil {
			got = "bad-policy"
		} else if err := p.Check(req, job); err != nil {
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("policy.tsv:%d: Check gave %T, not a *Refusal", n, err)
			}
			got = "refuse " + r.What
			if !strings.Contains(err.Error(), "site policy") {
				t.Errorf("policy.tsv:%d: the refusal %q does not say it is the site policy's", n, err)
			}
		} else if why := p.Wait(req, "u1", held); why != "" {
			got = "wait"
			if !strings.Contains(why, "u1") || !strings.Contains(why, req.Pool) || !strings.Contains(why, "max_gpus_per_user") {
				t.Errorf("policy.tsv:%d: the wait %q does not name the user, the pool and the limit", n, why)
			}
		}
		if got != cols[5] {
			t.Errorf("policy.tsv:%d: policy %q, %s %v held %d: got %s, want %s (parse error: %v)", n, cols[0], cols[1], job, held, got, cols[5], err)
		}
		if err == nil && got != "bad-policy" {
			// What String prints parses to the same limits.
			again, err := Parse(p.String())
			if err != nil || again.String() != p.String() {
				t.Errorf("policy.tsv:%d: String %q does not parse back: %v", n, p.String(), err)
			}
		}
	}
}

func TestNilPolicyAllowsTheGrammar(t *testing.T) {
	var p *Policy
	if err := p.Check(request.Request{Pool: "x", GPUs: request.MaxGPUs}, Job{}); err != nil {
		t.Fatal(err)
	}
	if p.KnowsPool("x") {
		t.Fatal("a nil policy knows no pool")
	}
	if p.Wait(request.Request{Pool: "x", GPUs: 8}, "u1", 1000) != "" || p.UserCap("x") != 0 || p.GPUVRAM("x") != 0 {
		t.Fatal("a nil policy keeps no run waiting")
	}
}

func TestLoadNamesTheFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "juice-policy.conf")
	if err := os.WriteFile(path, []byte("max_gpus = 8\nmax_vram = lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Load: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file must be an error")
	}
}

// The refusals name the value and the limit, as users read them at the prompt and in describe.
func TestRefusalsNameTheValueAndTheLimit(t *testing.T) {
	p, err := Parse("pools = a100, demo\npool.a100.accounts = physics, ml\npool.a100.partitions = gpu\n" +
		"pool.a100.max_gpus = 2\npool.a100.max_gpus_per_user = 3\npool.a100.gpu_vram = 80GiB\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  string
		job  Job
		want []string
	}{
		{"juice:v1:pool=a100,gpus=1", Job{Account: "chem", Partition: "gpu"}, []string{`account "chem"`, `pool "a100"`, "ml, physics"}},
		{"juice:v1:pool=a100,gpus=1", Job{Account: "ml", Partition: "gpu,cpu"}, []string{`partition "cpu"`, `pool "a100"`, "gpu"}},
		{"juice:v1:pool=a100,gpus=3", Job{Account: "ml", Partition: "gpu"}, []string{"3 GPUs", "at most 2", `pool "a100"`}},
	} {
		req, err := request.Parse(c.req)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(req, c.job)
		if err == nil {
			t.Fatalf("%s %v: allowed", c.req, c.job)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %v: %q does not say %q", c.req, c.job, err, w)
			}
		}
	}
	if got := p.GPUVRAM("a100"); got != 80*vram.GiB {
		t.Fatalf("gpu_vram: %d", got)
	}
	why := p.Wait(request.Request{Pool: "a100", GPUs: 2}, "alice", 2)
	for _, w := range []string{"alice", "a100", "2 held", "2 more", "at most 3"} {
		if !strings.Contains(why, w) {
			t.Errorf("wait %q does not say %q", why, w)
		}
	}
	if p.Wait(request.Request{Pool: "a100", GPUs: 2}, "", 2) != "" {
		t.Error("a run of an unknown user is not capped")
	}
	// The policy prints as it parses.
	again, err := Parse(p.String())
	if err != nil || again.String() != p.String() {
		t.Fatalf("String %q: %v", p.String(), err)
	}
}

// The shipped example parses, and so does what the test beds wire from it (test/testbed.sh and
// test/chroot/slurm-chroot.sh: its pools line replaced, test/testbed/juice-policy.extra appended).
func TestShippedAndWiredPoliciesParse(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "juice-policy.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(string(b)); err != nil {
		t.Fatalf("deploy/juice-policy.conf: %v", err)
	}
	extra, err := os.ReadFile(filepath.Join("..", "..", "test", "testbed", "juice-policy.extra"))
	if err != nil {
		t.Fatal(err)
	}
	var wired []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "pools = ") {
			line = "pools = demo, small, test, lab"
		}
		wired = append(wired, line)
	}
	p, err := Parse(strings.Join(wired, "\n") + string(extra))
	if err != nil {
		t.Fatalf("the wired policy: %v", err)
	}
	lab, _ := request.Parse("juice:v1:pool=lab,gpus=1")
	if err := p.Check(lab, Job{Account: "physics", Partition: "debug"}); err != nil {
		t.Fatalf("the wired policy refuses pool lab to account physics: %v", err)
	}
	if err := p.Check(lab, Job{Account: "chem", Partition: "debug"}); err == nil {
		t.Fatal("the wired policy lets account chem use pool lab")
	}
}

// Issue 26, finding 9: a refusal states the sizes as the user typed them (a bare number is GiB), never as a
// count of bytes.
func TestVRAMRefusalReadsAsTyped(t *testing.T) {
	p, err := Parse("max_vram = 80GiB\n")
	if err != nil {
		t.Fatal(err)
	}
	asked, err := vram.Parse("80.000000001")
	if err != nil {
		t.Fatal(err)
	}
	err = p.Check(request.Request{Pool: "test", GPUs: 1, VRAM: asked}, Job{})
	want := "refused by the site policy: a VRAM slice of 80.000000001GiB asked for, at most 80GiB allowed"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}
