package request

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/test/vectors"
)

// TestRequestVectors checks every row of the table that job_submit.lua and the C plugin are tested against too.
func TestRequestVectors(t *testing.T) {
	for _, row := range vectors.Read(t, "requests.tsv", 70) {
		n, cols := row.Line, row.Cols
		in := vectors.Unescape(t, cols[0])
		r, err := Parse(in)
		switch cols[1] {
		case "ok":
			want := Request{Pool: cols[2]}
			want.GPUs, _ = strconv.Atoi(cols[3])
			want.VRAM, _ = strconv.ParseUint(cols[4], 10, 64)
			if err != nil || r != want {
				t.Errorf("requests.tsv:%d: Parse(%q) = %+v, %v; want %+v", n, in, r, err, want)
			} else if r.String() != in {
				t.Errorf("requests.tsv:%d: %q prints back as %q", n, in, r.String())
			}
		case "none":
			if !errors.Is(err, ErrNotARequest) {
				t.Errorf("requests.tsv:%d: Parse(%q) = %+v, %v; want not a request", n, in, r, err)
			}
		case "error":
			var pe *ParseError
			if !errors.As(err, &pe) || pe.What != cols[2] {
				t.Errorf("requests.tsv:%d: Parse(%q) = %+v, %v; want a refusal naming %s", n, in, r, err, cols[2])
			} else if strings.ContainsAny(err.Error(), "\n\t") {
				t.Errorf("requests.tsv:%d: the message holds a control character: %q", n, err)
			}
		default:
			t.Fatalf("requests.tsv:%d: unknown result %q", n, cols[1])
		}
	}
}

func TestDescribe(t *testing.T) {
	for r, want := range map[Request]string{
		{Pool: "p", GPUs: 1}:                         "1 GPU from pool p",
		{Pool: "p", GPUs: 3}:                         "3 GPUs from pool p",
		{Pool: "p", GPUs: 1, VRAM: 3 * vram.GiB / 2}: "a 1.5GiB slice of 1 GPU from pool p",
	} {
		if got := r.Describe(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"juice:v1:pool=test,gpus=1", "juice:v1:pool=test,gpus=1,vram=1610612736", "juice:v2:x", "juice:v1:pool=a,gpus=01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			var pe *ParseError
			if !errors.Is(err, ErrNotARequest) && !errors.As(err, &pe) {
				t.Fatalf("Parse(%q): unclassified error %v", s, err)
			}
			return
		}
		// One text per request: whatever parses prints back byte for byte.
		if r.String() != s {
			t.Fatalf("Parse(%q) prints back as %q", s, r.String())
		}
	})
}
