// Package vram parses and formats sizes of GPU memory: the VRAM grammar that the request (reconcile/request),
// the C SPANK plugin and the Juice client share (test/vectors/vram.tsv). It imports nothing of the project, so
// both the domain and the Juice client may use it.
package vram

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// VRAM units in bytes. The grammar (test/vectors/README.md section 1) is shared with the C SPANK
// plugin, so this is the one VRAM parser for all Go code.
const (
	MB  uint64 = 1000 * 1000
	GB  uint64 = 1000 * 1000 * 1000
	MiB uint64 = 1 << 20
	GiB uint64 = 1 << 30
)

// vramUnits maps a lower-cased suffix to its size. No suffix means GiB, as in `juice --vram 2.5`.
var vramUnits = map[string]uint64{"": GiB, "b": 1, "mb": MB, "gb": GB, "mib": MiB, "gib": GiB}

const maxFracDigits = 9

// Parse parses a VRAM size such as "2.5", "2.5GiB", "2560MiB" or "2684354560B" into bytes.
//
// The value is int*unit + frac*unit/10^digits computed in unsigned 64-bit integers, rounded down;
// floats are never used, so Go and C agree to the byte. "0" is valid here: rejecting sizes that are
// not above zero is the option validator's job.
func Parse(s string) (uint64, error) {
	v, err := parse(s)
	if err != nil {
		return 0, fmt.Errorf("invalid VRAM size %q: %s", s, err)
	}
	return v, nil
}

func parse(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty (give a number such as 2.5, 2.5GiB or 2560MiB)")
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[:i]
	if intPart == "" {
		return 0, fmt.Errorf("must start with a digit (no sign, no space)")
	}
	fracPart := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		fracPart = s[i+1 : j]
		if fracPart == "" {
			return 0, fmt.Errorf("expected digits after the decimal point")
		}
		if len(fracPart) > maxFracDigits {
			return 0, fmt.Errorf("at most %d digits after the decimal point", maxFracDigits)
		}
		i = j
	}
	unitText := s[i:]
	unit, ok := vramUnits[strings.ToLower(unitText)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (use B, MB, GB, MiB or GiB; a bare number is GiB)", unitText)
	}

	whole, err := strconv.ParseUint(intPart, 10, 64)
	if err != nil { // only overflow is possible: the text is all digits
		return 0, errOverflow
	}
	hi, total := bits.Mul64(whole, unit)
	if hi != 0 {
		return 0, errOverflow
	}
	if fracPart != "" {
		frac, _ := strconv.ParseUint(fracPart, 10, 64) // at most 9 digits: cannot fail
		// frac < 10^9 and unit <= 2^30, so frac*unit < 2^60: no overflow in the product.
		part := frac * unit / pow10(len(fracPart))
		var carry uint64
		total, carry = bits.Add64(total, part, 0)
		if carry != 0 {
			return 0, errOverflow
		}
	}
	return total, nil
}

var errOverflow = fmt.Errorf("too large (more than %d bytes)", uint64(1<<64-1))

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// Format prints a size for people: the first of GiB, MiB, GB, MB that shows it exactly with at
// most three decimals (and is at least 1 of that unit), else bytes. "1.5GiB", "512MiB", "123B".
// Parse(Format(x)) == x for every x.
func Format(b uint64) string {
	for _, u := range []struct {
		size uint64
		name string
	}{{GiB, "GiB"}, {MiB, "MiB"}, {GB, "GB"}, {MB, "MB"}} {
		if b < u.size {
			continue
		}
		if s, ok := exactIn(b, u.size, 3); ok {
			return s + u.name
		}
	}
	return strconv.FormatUint(b, 10) + "B"
}

// exactIn writes b/unit in decimal when it has at most maxDigits decimals.
func exactIn(b, unit uint64, maxDigits int) (string, bool) {
	whole, rest := b/unit, b%unit
	if rest == 0 {
		return strconv.FormatUint(whole, 10), true
	}
	for d := 1; d <= maxDigits; d++ {
		// rest < unit <= 2^30 and 10^d <= 10^3: the product cannot overflow.
		scaled := rest * pow10(d)
		if scaled%unit == 0 {
			frac := strconv.FormatUint(scaled/unit, 10)
			frac = strings.Repeat("0", d-len(frac)) + frac
			return strconv.FormatUint(whole, 10) + "." + frac, true
		}
	}
	return "", false
}

// Readable prints a size for a message a user reads: Format's exact form when it has a unit (GiB, MiB, GB, MB)
// or the size is under 1MiB; else GiB rounded up to 9 decimals, which gives back the GiB a user typed (a bare
// number is GiB, with at most 9 decimals, rounded down to the byte: rounding up undoes it). Never a bare count
// of bytes for a size a user typed in GiB (issue 26: "85899345921 bytes asked for"). hooks/juice_submit.lua
// prints the same (test/vectors/sizes.tsv).
func Readable(b uint64) string {
	s := Format(b)
	if _, err := strconv.ParseUint(strings.TrimSuffix(s, "B"), 10, 64); err != nil || b < MiB {
		return s // Format found a unit, or the size is too small for GiB to read well
	}
	whole, rest := b/GiB, b%GiB
	// rest < 2^30 and 10^9 < 2^30: the product cannot overflow.
	frac := (rest*1_000_000_000 + GiB - 1) / GiB
	if frac == 1_000_000_000 {
		whole, frac = whole+1, 0
	}
	out := strconv.FormatUint(whole, 10)
	if frac > 0 {
		out += "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	}
	return out + "GiB"
}
