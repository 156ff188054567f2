// Package filename is the name of a run's sealed session file in the shared state directory, "JOB.RUN.session"
// (the SPANK plugin opens the same name). It is apart from package session, which re-exports it, so that the
// prolog hook can name the file without linking session's crypto and the regular expressions it compiles at
// start-up: every millisecond of the hook's start is the prolog's.
package filename

import "strconv"

// Of is the file's name for run run of job job.
func Of(job uint32, run int) string {
	return strconv.FormatUint(uint64(job), 10) + "." + strconv.Itoa(run) + ".session"
}

// Parse is Of's inverse: the job and run of a state directory entry, or ok false for any other name (a temporary
// file of the prolog, say). Only Of's own output parses: decimal numbers without leading zeros, a job that fits
// 32 bits, a run of at most 9 digits.
func Parse(name string) (job uint32, run int, ok bool) {
	const suffix = ".session"
	if len(name) <= len(suffix) || name[len(name)-len(suffix):] != suffix {
		return 0, 0, false
	}
	name = name[:len(name)-len(suffix)]
	dot := -1
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if dot >= 0 {
				return 0, 0, false
			}
			dot = i
		}
	}
	if dot < 0 || !canonical(name[:dot], 10) || !canonical(name[dot+1:], 9) {
		return 0, 0, false
	}
	j, err := strconv.ParseUint(name[:dot], 10, 32)
	if err != nil {
		return 0, 0, false
	}
	r, err := strconv.Atoi(name[dot+1:])
	if err != nil {
		return 0, 0, false
	}
	return uint32(j), r, true
}

// canonical reports whether s is a decimal number of at most max digits without a leading zero ("0" itself is).
func canonical(s string, max int) bool {
	if s == "" || len(s) > max || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// HooksMark is the empty file the prolog leaves beside the session files it writes (and the controller, once it
// has seen one of them): it proves to the controller that this directory is the one the hooks write to, which it
// must know before it takes a running job without its file for stranded (reconcile.Stranded). No hook, plugin or
// sweep reads a name that Parse does not take.
const HooksMark = ".juice-slurm-hooks-write-here"
