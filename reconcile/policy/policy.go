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
// and, for one pool (a pool's name runs to the key's last '.'):
//
//	pool.a100.max_gpus = 4           # most GPUs one job may ask of the pool (within max_gpus)
//	pool.a100.max_gpus_per_user = 8  # most GPUs one user may hold or be getting in the pool at once
//	pool.a100.accounts = physics, ml # only jobs charged to these Slurm accounts may use the pool
//	pool.a100.partitions = gpu       # only jobs of these partitions may use the pool
//	pool.a100.gpu_vram = 80GiB       # each whole GPU's VRAM, for juice-slurm report's VRAM-GiB-hours
//	pool.a100.handoff = on           # on or off (absent: off): an ended run's session passes to the same user's
//	                                 # next run of the same account and request, without a new activation
//
// max_vram is at most 2^53 bytes, so job_submit.lua (Lua 5.1, whose numbers are doubles) compares it exactly.
// Everything here but max_gpus_per_user is decided from the job alone, at submission by job_submit.lua and again
// by the controller (a Refusal: the run fails). max_gpus_per_user needs what the user holds, which only the
// controller knows: a run over it waits (Wait) until the user's other runs let GPUs go.
package policy

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/internal/vram"
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
	// PoolLimits are the limits of single pools, by pool name.
	PoolLimits map[string]*PoolLimits
}

// PoolLimits are one pool's own limits. Zero values (and nil lists) leave a limit off.
type PoolLimits struct {
	// MaxGPUs is the most GPUs one job may ask of the pool; the policy's MaxGPUs applies too.
	MaxGPUs int
	// MaxGPUsPerUser is the most GPUs one user may hold or be getting in the pool at once, over all runs.
	MaxGPUsPerUser int
	// Accounts are the Slurm accounts whose jobs may use the pool, in lower case (Slurm's account names are).
	Accounts []string
	// Partitions are the partitions whose jobs may use the pool.
	Partitions []string
	// GPUVRAM is the VRAM of one of the pool's GPUs in bytes, for the report; 0: unknown.
	GPUVRAM uint64
	// Handoff lets an ended run's session pass to the same user's next run of the same account and request
	// (reconcile's hand-off): the next run starts on GPUs the last one used, without a new activation.
	Handoff bool
}

// MaxGPUsPerUserBound is the largest max_gpus_per_user a policy may set.
const MaxGPUsPerUserBound = 999999

// A Job is what the policy needs of a run's job besides its request.
type Job struct {
	// Account is the Slurm account the job is charged to; empty when unknown.
	Account string
	// Partition is the job's partition, or its comma-separated list of partitions while it is pending in several.
	Partition string
}

// A Refusal is a request over one of the policy's limits. What names it with the words of policy.tsv: pool,
// account, partition, gpus or vram. It is permanent: asking again cannot change it, only a new policy can.
type Refusal struct {
	What   string
	Reason string
}

func (r *Refusal) Error() string { return "refused by the site policy: " + r.Reason }

// Check says whether the policy allows req for job: nil, or a *Refusal naming the first limit it breaks, in the
// order pool, account, partition, gpus, vram (job_submit.lua checks in the same order).
func (p *Policy) Check(req request.Request, job Job) error {
	if p == nil {
		return nil
	}
	if len(p.Pools) > 0 && !p.KnowsPool(req.Pool) {
		return &Refusal{What: "pool", Reason: fmt.Sprintf("pool %q is not one of the site's pools (%s)", req.Pool, strings.Join(p.Pools, ", "))}
	}
	pl := p.PoolLimits[req.Pool]
	if pl != nil && pl.Accounts != nil && !contains(pl.Accounts, strings.ToLower(job.Account)) {
		return &Refusal{What: "account", Reason: fmt.Sprintf("jobs of account %q may not use pool %q (its accounts: %s)",
			job.Account, req.Pool, strings.Join(pl.Accounts, ", "))}
	}
	if pl != nil && pl.Partitions != nil {
		for _, part := range strings.Split(job.Partition, ",") {
			if !contains(pl.Partitions, part) {
				return &Refusal{What: "partition", Reason: fmt.Sprintf("jobs of partition %q may not use pool %q (its partitions: %s)",
					part, req.Pool, strings.Join(pl.Partitions, ", "))}
			}
		}
	}
	if max := p.maxGPUs(); req.GPUs > max {
		return &Refusal{What: "gpus", Reason: fmt.Sprintf("%d GPUs asked for, at most %d allowed per job", req.GPUs, max)}
	}
	if pl != nil && pl.MaxGPUs > 0 && req.GPUs > pl.MaxGPUs {
		return &Refusal{What: "gpus", Reason: fmt.Sprintf("%d GPUs asked for, at most %d allowed per job in pool %q", req.GPUs, pl.MaxGPUs, req.Pool)}
	}
	if pl != nil && pl.MaxGPUsPerUser > 0 && req.GPUs > pl.MaxGPUsPerUser {
		return &Refusal{What: "gpus", Reason: fmt.Sprintf("%d GPUs asked for, but one user may hold at most %d in pool %q at once",
			req.GPUs, pl.MaxGPUsPerUser, req.Pool)}
	}
	if p.MaxVRAM > 0 && req.VRAM > p.MaxVRAM {
		return &Refusal{What: "vram", Reason: fmt.Sprintf("a VRAM slice of %s asked for, at most %s allowed",
			vram.Readable(req.VRAM), vram.Readable(p.MaxVRAM))}
	}
	return nil
}

// UserCap is the most GPUs one user may hold or be getting in pool at once; 0: no cap.
func (p *Policy) UserCap(pool string) int {
	if p == nil || p.PoolLimits[pool] == nil {
		return 0
	}
	return p.PoolLimits[pool].MaxGPUsPerUser
}

// Wait says why a run of user asking req must wait before it is asked of the Juice Controller, when user holds
// (or is getting) held GPUs of the pool already; "" when it need not. A run that asks more than the cap on its
// own is refused by Check, never kept waiting for ever. A user nobody knows (empty) is not capped.
func (p *Policy) Wait(req request.Request, user string, held int) string {
	max := p.UserCap(req.Pool)
	if max == 0 || user == "" || held+req.GPUs <= max {
		return ""
	}
	return fmt.Sprintf(WaitPrefix+"%s's GPUs in pool %s: %d held or being got, %d more asked for, at most %d at once (max_gpus_per_user)",
		user, req.Pool, held, req.GPUs, max)
}

// WaitPrefix starts every reason Wait gives: a reservation's reason that starts with it is a run waiting for its
// user's GPUs (IsWait).
const WaitPrefix = "waiting for user "

// IsWait reports whether a reservation's reason is one Wait gave.
func IsWait(reason string) bool { return strings.HasPrefix(reason, WaitPrefix) }

// GPUVRAM is the VRAM of one whole GPU of pool in bytes, as the policy gives it; 0: unknown.
func (p *Policy) GPUVRAM(pool string) uint64 {
	if p == nil || p.PoolLimits[pool] == nil {
		return 0
	}
	return p.PoolLimits[pool].GPUVRAM
}

// Handoff reports whether the pool's sessions may pass from one run to the next (pool.<name>.handoff = on).
func (p *Policy) Handoff(pool string) bool {
	return p != nil && p.PoolLimits[pool] != nil && p.PoolLimits[pool].Handoff
}

func contains(sorted []string, s string) bool {
	i := sort.SearchStrings(sorted, s)
	return i < len(sorted) && sorted[i] == s
}

// KnowsPool reports whether pool is one the policy names. A policy that names none knows no pool by name (it
// allows every pool, but a pool a user typed is not a known one: see the metrics' pool labels).
func (p *Policy) KnowsPool(pool string) bool {
	if p == nil {
		return false
	}
	return contains(p.Pools, pool)
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
	names := make([]string, 0, len(p.PoolLimits))
	for name := range p.PoolLimits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pl := p.PoolLimits[name]
		if pl.MaxGPUs > 0 {
			fmt.Fprintf(&b, "pool.%s.max_gpus = %d\n", name, pl.MaxGPUs)
		}
		if pl.MaxGPUsPerUser > 0 {
			fmt.Fprintf(&b, "pool.%s.max_gpus_per_user = %d\n", name, pl.MaxGPUsPerUser)
		}
		if pl.Accounts != nil {
			fmt.Fprintf(&b, "pool.%s.accounts = %s\n", name, strings.Join(pl.Accounts, ", "))
		}
		if pl.Partitions != nil {
			fmt.Fprintf(&b, "pool.%s.partitions = %s\n", name, strings.Join(pl.Partitions, ", "))
		}
		if pl.GPUVRAM > 0 {
			fmt.Fprintf(&b, "pool.%s.gpu_vram = %dB\n", name, pl.GPUVRAM)
		}
		if pl.Handoff {
			fmt.Fprintf(&b, "pool.%s.handoff = on\n", name)
		}
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
	firstLine := map[string]int{} // the line that first names a pool's own limit
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
		if rest, ok := strings.CutPrefix(key, "pool."); ok {
			// pool.<name>.<setting>: the name runs to the last '.' (pool names may hold dots).
			i := strings.LastIndexByte(rest, '.')
			if i < 0 {
				return bad("%q: want pool.<name>.<setting>", key)
			}
			name, setting := rest[:i], rest[i+1:]
			if err := request.CheckPool(name); err != nil {
				return bad("%s: pool %q: %v", key, name, err)
			}
			if p.PoolLimits == nil {
				p.PoolLimits = map[string]*PoolLimits{}
			}
			pl := p.PoolLimits[name]
			if pl == nil {
				pl = &PoolLimits{}
				p.PoolLimits[name] = pl
				firstLine[name] = n + 1
			}
			switch setting {
			case "max_gpus":
				v, err := parseCount(value, request.MaxGPUs)
				if err != nil {
					return bad("%s %q: %v", key, value, err)
				}
				pl.MaxGPUs = v
			case "max_gpus_per_user":
				v, err := parseCount(value, MaxGPUsPerUserBound)
				if err != nil {
					return bad("%s %q: %v", key, value, err)
				}
				pl.MaxGPUsPerUser = v
			case "accounts", "partitions":
				names, err := parseNames(value, setting == "accounts")
				if err != nil {
					return bad("%s: %v", key, err)
				}
				if setting == "accounts" {
					pl.Accounts = names
				} else {
					pl.Partitions = names
				}
			case "gpu_vram":
				v, err := parseMaxVRAM(value)
				if err != nil {
					return bad("%s %q: %v", key, value, err)
				}
				pl.GPUVRAM = v
			case "handoff":
				switch value {
				case "on":
					pl.Handoff = true
				case "off":
					pl.Handoff = false
				default:
					return bad("%s %q: want on or off", key, value)
				}
			default:
				return bad("unknown setting %q (known for a pool: max_gpus, max_gpus_per_user, accounts, partitions, gpu_vram, handoff)", key)
			}
			continue
		}
		switch key {
		case "max_gpus":
			v, err := parseCount(value, request.MaxGPUs)
			if err != nil {
				return bad("max_gpus %q: %v", value, err)
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
			return bad("unknown setting %q (known: max_gpus, max_vram, pools, pool.<name>.<setting>)", key)
		}
	}
	// A pool's own limits for a pool no job may use are a mistake (a typo in its name), not a limit.
	if len(p.Pools) > 0 {
		for name, n := range firstLine {
			if !p.KnowsPool(name) {
				return nil, fmt.Errorf("line %d: pool.%s: %q is not one of pools (%s)", n, name, name, strings.Join(p.Pools, ", "))
			}
		}
	}
	return p, nil
}

// parseCount reads a decimal number from 1 to max without a leading zero or sign.
func parseCount(s string, max int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > max || s[0] == '0' || s[0] == '+' {
		return 0, fmt.Errorf("want a whole number from 1 to %d", max)
	}
	return v, nil
}

// parseNames reads a list of account or partition names, by the pool-name rule, separated by commas, spaces or
// tabs; accounts in lower case, as Slurm keeps them.
func parseNames(value string, lower bool) ([]string, error) {
	names := strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	if len(names) == 0 {
		return nil, errors.New("the list is empty (leave it out to allow any)")
	}
	for i, name := range names {
		if err := request.CheckPool(name); err != nil {
			return nil, fmt.Errorf("name %q: %v", name, strings.Replace(err.Error(), "a pool name", "a name", 1))
		}
		if lower {
			names[i] = strings.ToLower(name)
		}
	}
	sort.Strings(names)
	return names, nil
}

var vramUnits = map[string]uint64{"": vram.GiB, "b": 1, "mb": vram.MB, "gb": vram.GB, "mib": vram.MiB, "gib": vram.GiB}

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
