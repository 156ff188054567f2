// Package request is juice-slurm's request grammar: what a job asks of Juice (a number of GPUs from one pool,
// or a VRAM slice of one GPU), its one canonical text, and the VRAM sizes users type. It imports no client:
// the SPANK plugin (C), job_submit.lua and this package implement the same rules, and all three are tested
// against test/vectors/requests.tsv (rules in test/vectors/README.md, section 3).
package request

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/internal/vram"
)

// A Request is what a job asked of Juice.
type Request struct {
	Pool string
	GPUs int
	// VRAM is the slice of one GPU in bytes; 0 means whole GPUs.
	VRAM uint64
}

// Bounds of the grammar. A site's own limits are narrower, and are applied after parsing.
const (
	// Prefix starts every request of this version. A job comment without "juice:" is not a Juice request.
	Prefix = "juice:v1:"
	// MaxLen is Slurm's limit on a comment, and so on a request.
	MaxLen = 1024
	// MaxPoolLen bounds a pool name.
	MaxPoolLen = 63
	// MaxGPUs bounds the GPU count of one request.
	MaxGPUs = 1024
	// MaxVRAM bounds a slice: PostgreSQL's bigint.
	MaxVRAM uint64 = 1<<63 - 1
)

// ErrNotARequest says a text is not a Juice request at all (a job's own comment), as opposed to a malformed one.
var ErrNotARequest = errors.New("not a juice request")

// A ParseError is a text that starts like a request but is not one. What names the first rule it breaks, with
// the words of requests.tsv: version, length, form, pool, gpus or vram.
type ParseError struct {
	Text   string
	What   string
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("juice request %s: %s", quote(e.Text), e.Reason)
}

// String prints the canonical form, the only text Parse accepts for r.
func (r Request) String() string {
	s := Prefix + "pool=" + r.Pool + ",gpus=" + strconv.Itoa(r.GPUs)
	if r.VRAM > 0 {
		s += ",vram=" + strconv.FormatUint(r.VRAM, 10)
	}
	return s
}

// Describe is the request for people: "2 GPUs from pool test", "a 1.5GiB slice of 1 GPU from pool test".
func (r Request) Describe() string {
	switch {
	case r.VRAM > 0:
		return fmt.Sprintf("a %s slice of 1 GPU from pool %s", vram.Readable(r.VRAM), r.Pool)
	case r.GPUs == 1:
		return "1 GPU from pool " + r.Pool
	}
	return fmt.Sprintf("%d GPUs from pool %s", r.GPUs, r.Pool)
}

// Parse reads a request's canonical text. A text that does not start with "juice:" gives ErrNotARequest;
// anything else that is not exactly a canonical request gives a *ParseError.
func Parse(s string) (Request, error) {
	bad := func(what, format string, args ...any) (Request, error) {
		return Request{}, &ParseError{Text: s, What: what, Reason: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(s, "juice:") {
		return Request{}, ErrNotARequest
	}
	if !strings.HasPrefix(s, Prefix) {
		return bad("version", "unknown version (this reader knows %q)", Prefix)
	}
	if len(s) > MaxLen {
		return bad("length", "%d bytes, more than the %d a job comment holds", len(s), MaxLen)
	}
	fields := strings.Split(s[len(Prefix):], ",")
	if len(fields) < 2 || len(fields) > 3 || !strings.HasPrefix(fields[0], "pool=") || !strings.HasPrefix(fields[1], "gpus=") ||
		len(fields) == 3 && !strings.HasPrefix(fields[2], "vram=") {
		return bad("form", "want pool=NAME,gpus=N[,vram=BYTES] in that order")
	}
	var r Request
	r.Pool = fields[0][len("pool="):]
	if err := CheckPool(r.Pool); err != nil {
		return bad("pool", "%v", err)
	}
	n, ok := decimal(fields[1][len("gpus="):], MaxGPUs)
	if !ok {
		return bad("gpus", "the GPU count must be a whole number from 1 to %d", MaxGPUs)
	}
	r.GPUs = int(n)
	if len(fields) == 3 {
		if r.VRAM, ok = decimal(fields[2][len("vram="):], MaxVRAM); !ok {
			return bad("vram", "the VRAM slice must be a whole number of bytes from 1 to %d", MaxVRAM)
		}
		if r.GPUs != 1 {
			return bad("vram", "a VRAM slice is for one GPU, not %d", r.GPUs)
		}
	}
	return r, nil
}

// CheckPool allows 1 to 63 characters of A-Z a-z 0-9 . _ -, the first a letter or digit: safe in a comment, a
// file name, a log line and a URL without quoting.
func CheckPool(p string) error {
	if p == "" {
		return errors.New("a pool name cannot be empty")
	}
	if len(p) > MaxPoolLen {
		return fmt.Errorf("a pool name has at most %d characters", MaxPoolLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return errors.New("a pool name starts with a letter or digit")
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("a pool name may hold only letters, digits, '.', '_' and '-', not %q", c)
		}
	}
	return nil
}

// decimal reads digits without a leading zero, from 1 to max.
func decimal(s string, max uint64) (uint64, bool) {
	if s == "" || s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n >= 1 && n <= max
}

// quote keeps error messages short and on one line when a request is long or holds control characters.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strconv.Quote(s)
}
