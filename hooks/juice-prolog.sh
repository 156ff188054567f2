#!/bin/sh
# PrologSlurmctld for juice-slurm: waits until the job's Juice session is ready and writes its sealed file into
# the shared state directory. Exits non-zero when the session cannot be had, so Slurm requeues a batch job.
# slurmctld runs it as SlurmUser with no PATH: every path here is absolute.
#
# A job that asked nothing of Juice never fails here: without a readable config or an executable hook binary it
# passes (the binary itself passes such jobs without a call). Only a Juice job fails then, saying why.
# (SPANK_JUICE_REQUEST is the plugin's value, which the job's owner controls: leaving it out only keeps their
# own job from its session, which the compute node then refuses to run.)
CONFIG=${JUICE_CONFIG_SH:-/etc/juice-slurm/juice-config.sh}
broken() {
	[ -z "${SPANK_JUICE_REQUEST:-}" ] && exit 0
	echo "juice: job ${SLURM_JOB_ID:-?}: $*: failing the prolog of this Juice job" >&2
	exit 1
}
# A config that cannot be read, or that fails when sourced, must not kill this shell (a failing `.` exits it).
[ -r "$CONFIG" ] && (. "$CONFIG") >/dev/null 2>&1 || broken "cannot read $CONFIG"
. "$CONFIG"
# The small hook binary (its start is most of a ready prolog's time); a config older than it names only
# JUICE_SLURM_BIN, whose directory holds it too. Without it, juice-slurm runs the same code, more slowly.
[ -n "${JUICE_HOOK_BIN:-}" ] || [ -z "${JUICE_SLURM_BIN:-}" ] || JUICE_HOOK_BIN=${JUICE_SLURM_BIN%/*}/juice-slurm-hook
# juice-slurm-hook links no TLS: a Juice job whose controller is reached over https (not the unix: hook socket)
# goes straight to juice-slurm, which the small binary would exec anyway (a job without Juice never calls).
case ${JUICE_HOOK_URL:-} in
http:* | https:*) [ -n "${SPANK_JUICE_REQUEST:-}" ] && [ -x "${JUICE_SLURM_BIN:-}" ] && exec "$JUICE_SLURM_BIN" hook prolog ;;
esac
[ -x "${JUICE_HOOK_BIN:-}" ] && exec "$JUICE_HOOK_BIN" prolog
[ -x "${JUICE_SLURM_BIN:-}" ] ||
	broken "neither JUICE_HOOK_BIN ${JUICE_HOOK_BIN:-(unset)} nor JUICE_SLURM_BIN ${JUICE_SLURM_BIN:-(unset)} is executable"
exec "$JUICE_SLURM_BIN" hook prolog
