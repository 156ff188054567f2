package reconcile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// A Request is what a job asked of Juice: a number of GPUs from one pool, or a VRAM slice of one GPU.
//
// Its canonical text form, `juice:v1:pool=<pool>,gpus=<n>[,vram=<bytes>]`, is the one contract between the
// submit side (the SPANK plugin and job_submit.lua write it into the job's admin_comment) and the reconciler.
// test/vectors/README.md defines it; the C plugin is tested against the same tables.
type Request struct {
	Pool string
	GPUs int
	// VRAM is the slice of one GPU in bytes; 0 means whole GPUs.
	VRAM uint64
}

// RequestPrefix starts every request of this version. A job comment without it is not a Juice request.
const RequestPrefix = "juice:v1:"

// MaxRequestLen is Slurm's limit on a comment, and so on a request.
const MaxRequestLen = 1024

// MaxPoolLen bounds a pool name.
const MaxPoolLen = 63

// ErrNotARequest says a text is not a Juice request at all (as opposed to a malformed one).
var ErrNotARequest = errors.New("not a juice request")

// String prints the canonical form.
func (r Request) String() string {
	s := RequestPrefix + "pool=" + r.Pool + ",gpus=" + strconv.Itoa(r.GPUs)
	if r.VRAM > 0 {
		s += ",vram=" + strconv.FormatUint(r.VRAM, 10)
	}
	return s
}

// Describe is the request for people: "2 GPUs from pool test", "a 1.5GiB slice of 1 GPU from pool test".
func (r Request) Describe() string {
	if r.VRAM > 0 {
		return fmt.Sprintf("a %s slice of 1 GPU from pool %s", juiceapi.FormatVRAM(r.VRAM), r.Pool)
	}
	if r.GPUs == 1 {
		return "1 GPU from pool " + r.Pool
	}
	return fmt.Sprintf("%d GPUs from pool %s", r.GPUs, r.Pool)
}

// ParseRequest parses a request's text form. A text that does not start with RequestPrefix yields
// ErrNotARequest; anything else that is not exactly a valid request is an error naming the bad part. Keys may
// come in any order but only once each; String always prints them in the canonical order.
func ParseRequest(s string) (Request, error) {
	if !strings.HasPrefix(s, RequestPrefix) {
		if strings.HasPrefix(s, "juice:") {
			return Request{}, fmt.Errorf("juice request %q: unknown version (this reconciler reads %q)", clip(s), RequestPrefix)
		}
		return Request{}, ErrNotARequest
	}
	if len(s) > MaxRequestLen {
		return Request{}, fmt.Errorf("juice request of %d bytes: longer than %d", len(s), MaxRequestLen)
	}
	var r Request
	seen := map[string]bool{}
	for _, field := range strings.Split(s[len(RequestPrefix):], ",") {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return Request{}, fmt.Errorf("juice request %q: field %q is not key=value", clip(s), field)
		}
		if seen[k] {
			return Request{}, fmt.Errorf("juice request %q: %s given twice", clip(s), k)
		}
		seen[k] = true
		var err error
		switch k {
		case "pool":
			err = checkPool(v)
			r.Pool = v
		case "gpus":
			r.GPUs, err = parseCount(v, 0)
		case "vram":
			r.VRAM, err = parseBytes(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return Request{}, fmt.Errorf("juice request %q: %w", clip(s), err)
		}
	}
	if !seen["pool"] || !seen["gpus"] {
		return Request{}, fmt.Errorf("juice request %q: needs both pool and gpus", clip(s))
	}
	if r.VRAM > 0 && r.GPUs != 1 {
		return Request{}, fmt.Errorf("juice request %q: a VRAM slice is for one GPU, not %d", clip(s), r.GPUs)
	}
	return r, nil
}

// Limits are a site's bounds on what one job may ask for; the SPANK plugin's max_gpus, max_vram and
// default_pool arguments.
type Limits struct {
	DefaultPool string
	MaxGPUs     int
	MaxVRAM     uint64
}

// DefaultLimits match the plugin's defaults.
var DefaultLimits = Limits{MaxGPUs: 8, MaxVRAM: 80 << 30}

// An OptionError names the option whose value was refused, as the plugin's message does.
type OptionError struct {
	Option string // "juice-pool", "juice-gpu-count" or "juice-vram"
	Value  string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("invalid --%s %q: %s", e.Option, e.Value, e.Reason)
}

// ParseOptions validates the three command-line options as the SPANK plugin does (nil = not given) and returns
// the request they make, or nil when none was given and there is no default pool to apply.
func ParseOptions(pool, gpus, vram *string, lim Limits) (*Request, error) {
	if pool == nil && gpus == nil && vram == nil {
		return nil, nil
	}
	r := &Request{GPUs: 1}
	switch {
	case pool != nil:
		if err := checkPool(*pool); err != nil {
			return nil, &OptionError{"juice-pool", *pool, err.Error()}
		}
		r.Pool = *pool
	case lim.DefaultPool != "":
		r.Pool = lim.DefaultPool
	default:
		given, val := "juice-gpu-count", gpus
		if gpus == nil {
			given, val = "juice-vram", vram
		}
		return nil, &OptionError{"juice-pool", "", fmt.Sprintf("--%s=%s needs a pool, and the site has no default pool", given, *val)}
	}
	if gpus != nil {
		n, err := parseCount(*gpus, lim.MaxGPUs)
		if err != nil {
			return nil, &OptionError{"juice-gpu-count", *gpus, err.Error()}
		}
		r.GPUs = n
	}
	if vram != nil {
		b, err := juiceapi.ParseVRAM(*vram)
		switch {
		case err != nil:
			return nil, &OptionError{"juice-vram", *vram, err.Error()}
		case b == 0:
			return nil, &OptionError{"juice-vram", *vram, "must be more than 0 bytes"}
		case lim.MaxVRAM > 0 && b > lim.MaxVRAM:
			return nil, &OptionError{"juice-vram", *vram, "more than the site's maximum of " + juiceapi.FormatVRAM(lim.MaxVRAM)}
		case r.GPUs != 1:
			return nil, &OptionError{"juice-vram", *vram, fmt.Sprintf("a VRAM slice is for one GPU, and %d were asked for", r.GPUs)}
		}
		r.VRAM = b
	}
	return r, nil
}

// checkPool allows 1 to 63 characters from A-Z a-z 0-9 . _ -, the first a letter or digit: safe in a comment,
// a file name and a URL without quoting.
func checkPool(p string) error {
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

// parseCount reads a GPU count: decimal digits only, 1 to max (max 0 = no upper bound).
func parseCount(s string, max int) (int, error) {
	bound := "at least 1"
	if max > 0 {
		bound = fmt.Sprintf("a whole number from 1 to %d", max)
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("must be " + bound)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || (max > 0 && n > max) {
		return 0, errors.New("must be " + bound)
	}
	return n, nil
}

// parseBytes reads the canonical VRAM field: a whole number of bytes above zero.
func parseBytes(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("vram %q is not a whole number of bytes", s)
	}
	b, err := strconv.ParseUint(s, 10, 64)
	if err != nil || b == 0 {
		return 0, fmt.Errorf("vram %q must be between 1 and 2^64-1 bytes", s)
	}
	return b, nil
}

// clip keeps error messages short when a request is long.
func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
