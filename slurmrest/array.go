package slurmrest

import (
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// PendingTasks returns, in ascending order (the order slurmctld starts an array's elements of equal priority),
// at most max of the task ids still pending in an array's remainder, from its array_task_string: ranges such as
// "0-3,7,9-15:2" with an optional "%N" limit of elements running at once, cut short with "..." when slurmctld's
// text was too long (the ids before the cut are still right), or a hexadecimal mask "0x..." of the ids.
func (a *ArrayInfo) PendingTasks(max int) ([]uint32, error) {
	if a == nil || max <= 0 {
		return nil, nil
	}
	s := strings.TrimSpace(a.Pending)
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		return hexTasks(s[2:], max)
	}
	truncated := strings.HasSuffix(s, "...")
	s = strings.TrimSuffix(s, "...")
	var out []uint32
	items := strings.Split(s, ",")
	if truncated {
		items = items[:len(items)-1] // the cut may fall inside the last item: "10-12,1..." may be "10-12,17-30"
	}
	for _, item := range items {
		if item == "" {
			continue
		}
		lo, hi, step, err := taskRange(item)
		if err != nil {
			return nil, fmt.Errorf("array %d: pending task ids %q: %w", a.JobID, a.Pending, err)
		}
		for t := lo; t <= hi && len(out) < max; t += step {
			out = append(out, t)
			if hi-t < step {
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}

func taskRange(item string) (lo, hi, step uint32, err error) {
	step = 1
	if r, st, ok := strings.Cut(item, ":"); ok {
		n, err := strconv.ParseUint(st, 10, 32)
		if err != nil || n == 0 {
			return 0, 0, 0, fmt.Errorf("bad step in %q", item)
		}
		item, step = r, uint32(n)
	}
	a, b, isRange := strings.Cut(item, "-")
	l, err := strconv.ParseUint(a, 10, 32)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("bad task id in %q", item)
	}
	h := l
	if isRange {
		if h, err = strconv.ParseUint(b, 10, 32); err != nil || h < l {
			return 0, 0, 0, fmt.Errorf("bad range %q", item)
		}
	}
	return uint32(l), uint32(h), step, nil
}

func hexTasks(hex string, max int) ([]uint32, error) {
	var n big.Int
	if _, ok := n.SetString(hex, 16); !ok {
		return nil, fmt.Errorf("bad hexadecimal task mask %q", hex)
	}
	var out []uint32
	for i := 0; i < n.BitLen() && len(out) < max; i++ {
		if n.Bit(i) == 1 {
			out = append(out, uint32(i))
		}
	}
	return out, nil
}

// StillPending reports whether task is among the remainder's pending task ids; known is false when slurmctld's
// text was cut short before it could say.
func (a *ArrayInfo) StillPending(task uint32) (pending, known bool) {
	if a == nil || a.HasTask {
		return false, true
	}
	s := strings.TrimSpace(a.Pending)
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		var n big.Int
		if _, ok := n.SetString(s[2:], 16); !ok {
			return false, false
		}
		return n.Bit(int(task)) == 1, true
	}
	truncated := strings.HasSuffix(s, "...")
	items := strings.Split(strings.TrimSuffix(s, "..."), ",")
	if truncated {
		items = items[:len(items)-1]
	}
	for _, item := range items {
		if item == "" {
			continue
		}
		lo, hi, step, err := taskRange(item)
		if err != nil {
			return false, false
		}
		if task >= lo && task <= hi && (task-lo)%step == 0 {
			return true, true
		}
	}
	return false, !truncated
}
