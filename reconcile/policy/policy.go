// Package policy is the site's limits on Juice requests: the most GPUs one job may ask for, the largest VRAM
// slice, and the pools jobs may use. One file, juice-policy.conf, is read by job_submit.lua (which refuses a job
// over a limit at submission) and by the controller (which refuses it again, for jobs submitted before a limit
// changed or around job_submit.lua). Both sides are tested against test/vectors/policy.tsv.
//
// The file holds "key = value" lines; '#' starts a comment; every key at most once:
//
//	max_gpus = 8            # 1 to 1024 (request.MaxGPUs); absent: 1024
//	max_vram = 80GiB        # a whole number with an optional unit B, MB, GB, MiB, GiB (bare: GiB); absent: no limit
//	pools = demo, test      # pool names, separated by commas or spaces; absent: any pool
//
// max_vram is at most 2^53 bytes, so job_submit.lua (Lua 5.1, whose numbers are doubles) compares it exactly.
package policy

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// DefaultPath is where the controller and job_submit.lua look for the policy.
const DefaultPath = "/etc/juice-slurm/juice-policy.conf"

// MaxVRAMBound is the largest max_vram a policy may set: 2^53 bytes (8 PiB), exact in a double.
const MaxVRAMBound uint64 = 1 << 53

// A Policy is a site's limits. The zero Policy allows what the request grammar allows.
type Policy struct {
	// MaxGPUs is the most GPUs one request may ask for; 0 means request.MaxGPUs.
	MaxGPUs int
	// MaxVRAM is the largest VRAM slice in bytes; 0 means no limit beyond the grammar's.
	MaxVRAM uint64
	// Pools are the pools requests may name; empty means any.
	Pools []string
}

// A Refusal is a request over one of the policy's limits. What names it with the words of policy.tsv: gpus,
// vram or pool. It is permanent: asking again cannot change it, only a new policy can.
type Refusal struct {
	What   string
	Reason string
}

func (r *Refusal) Error() string { return "refused by the site policy: " + r.Reason }

// Check says whether the policy allows req: nil, or a *Refusal naming the first limit it breaks, in the order
// pool, gpus, vram (the order of the request's fields, and of job_submit.lua's check).
func (p *Policy) Check(req request.Request) error {
	if p == nil {
		return nil
	}
	if len(p.Pools) > 0 && !p.KnowsPool(req.Pool) {
		return &Refusal{What: "pool", Reason: fmt.Sprintf("pool %q is not one of the site's pools (%s)", req.Pool, strings.Join(p.Pools, ", "))}
	}
	if max := p.maxGPUs(); req.GPUs > max {
		return &Refusal{What: "gpus", Reason: fmt.Sprintf("%d GPUs asked for, at most %d allowed per job", req.GPUs, max)}
	}
	if p.MaxVRAM > 0 && req.VRAM > p.MaxVRAM {
		return &Refusal{What: "vram", Reason: fmt.Sprintf("a VRAM slice of %s asked for, at most %s allowed",
			request.FormatVRAM(req.VRAM), request.FormatVRAM(p.MaxVRAM))}
	}
	return nil
}

// KnowsPool reports whether pool is one the policy names. A policy that names none knows no pool by name (it
// allows every pool, but a pool a user typed is not a known one: see the metrics' pool labels).
func (p *Policy) KnowsPool(pool string) bool {
	if p == nil {
		return false
	}
	i := sort.SearchStrings(p.Pools, pool)
	return i < len(p.Pools) && p.Pools[i] == pool
}

func (p *Policy) maxGPUs() int {
	if p.MaxGPUs == 0 {
		return request.MaxGPUs
	}
	return p.MaxGPUs
}

// String prints the policy as a file would hold it.
func (p *Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "max_gpus = %d\n", p.maxGPUs())
	if p.MaxVRAM > 0 {
		fmt.Fprintf(&b, "max_vram = %dB\n", p.MaxVRAM)
	}
	if len(p.Pools) > 0 {
		fmt.Fprintf(&b, "pools = %s\n", strings.Join(p.Pools, ", "))
	}
	return b.String()
}

// Load reads a policy file. A file that does not parse is an error naming its line: a site's limits are never
// half applied.
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("site policy: %w", err)
	}
	p, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("site policy %s: %w", path, err)
	}
	return p, nil
}

// LoadOptional is Load, except that a missing file is no policy (nil: the grammar's bounds only), as it is for
// job_submit.lua. A file that exists and does not parse is still an error.
func LoadOptional(path string) (*Policy, error) {
	p, err := Load(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return p, err
}

// Parse reads a policy's text.
func Parse(text string) (*Policy, error) {
	p := &Policy{}
	seen := map[string]bool{}
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		bad := func(format string, args ...any) (*Policy, error) {
			return nil, fmt.Errorf("line %d: %s", n+1, fmt.Sprintf(format, args...))
		}
		if !ok {
			return bad("want key = value, not %q", line)
		}
		if seen[key] {
			return bad("%s is given twice", key)
		}
		seen[key] = true
		switch key {
		case "max_gpus":
			v, err := strconv.Atoi(value)
			if err != nil || v < 1 || v > request.MaxGPUs || value[0] == '0' || value[0] == '+' {
				return bad("max_gpus %q: want a whole number from 1 to %d", value, request.MaxGPUs)
			}
			p.MaxGPUs = v
		case "max_vram":
			v, err := parseMaxVRAM(value)
			if err != nil {
				return bad("max_vram %q: %v", value, err)
			}
			p.MaxVRAM = v
		case "pools":
			names := strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
			if len(names) == 0 {
				return bad("pools is empty (leave it out to allow any pool)")
			}
			for _, name := range names {
				if err := request.CheckPool(name); err != nil {
					return bad("pool %q: %v", name, err)
				}
			}
			sort.Strings(names)
			p.Pools = names
		default:
			return bad("unknown setting %q (known: max_gpus, max_vram, pools)", key)
		}
	}
	return p, nil
}

var vramUnits = map[string]uint64{"": request.GiB, "b": 1, "mb": request.MB, "gb": request.GB, "mib": request.MiB, "gib": request.GiB}

// parseMaxVRAM reads a whole number with an optional unit: a subset of the VRAM grammar that Lua can read
// exactly.
func parseMaxVRAM(s string) (uint64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit, ok := vramUnits[strings.ToLower(s[i:])]
	if i == 0 || !ok || s[0] == '0' {
		return 0, errors.New("want a whole number above 0 with an optional unit B, MB, GB, MiB or GiB (bare: GiB)")
	}
	if i > 16 {
		return 0, fmt.Errorf("at most %d bytes", MaxVRAMBound)
	}
	n, _ := strconv.ParseUint(s[:i], 10, 64)
	if n > MaxVRAMBound/unit {
		return 0, fmt.Errorf("at most %d bytes", MaxVRAMBound)
	}
	return n * unit, nil
}
