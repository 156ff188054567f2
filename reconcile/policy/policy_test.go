package policy

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// unescape undoes policy.tsv's escapes: \\ \t \n \r.
func unescape(t *testing.T, s string) string {
	t.Helper()
	r := strings.NewReplacer(`\\`, `\`, `\t`, "\t", `\n`, "\n", `\r`, "\r")
	return r.Replace(s)
}

// TestVectors checks every row of test/vectors/policy.tsv, which job_submit.lua's test reads too: both sides
// parse the same files and refuse the same requests for the same reason.
func TestVectors(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "test", "vectors", "policy.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("policy.tsv:%d: want 3 columns, got %d", n, len(cols))
		}
		rows++
		text := unescape(t, cols[0])
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
		} else if err := p.Check(req); err != nil {
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("policy.tsv:%d: Check gave %T, not a *Refusal", n, err)
			}
			got = "refuse " + r.What
			if !strings.Contains(err.Error(), "site policy") {
				t.Errorf("policy.tsv:%d: the refusal %q does not say it is the site policy's", n, err)
			}
		}
		if got != cols[2] {
			t.Errorf("policy.tsv:%d: policy %q, %s: got %s, want %s (parse error: %v)", n, cols[0], cols[1], got, cols[2], err)
		}
		if err == nil && got != "bad-policy" {
			// What String prints parses to the same limits.
			again, err := Parse(p.String())
			if err != nil || again.String() != p.String() {
				t.Errorf("policy.tsv:%d: String %q does not parse back: %v", n, p.String(), err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows < 40 {
		t.Fatalf("only %d rows in policy.tsv", rows)
	}
}

func TestNilPolicyAllowsTheGrammar(t *testing.T) {
	var p *Policy
	if err := p.Check(request.Request{Pool: "x", GPUs: request.MaxGPUs}); err != nil {
		t.Fatal(err)
	}
	if p.KnowsPool("x") {
		t.Fatal("a nil policy knows no pool")
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
