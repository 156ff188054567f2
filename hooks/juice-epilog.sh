#!/bin/sh
# EpilogSlurmctld for juice-slurm: tells the controller the run is finished (it releases the session) and
# removes the session file. Always exits 0: without a readable config or the binary the controller still releases
# the session when it sees the job end.
CONFIG=${JUICE_CONFIG_SH:-/etc/juice-slurm/juice-config.sh}
[ -r "$CONFIG" ] && (. "$CONFIG") >/dev/null 2>&1 || exit 0
. "$CONFIG"
# As the prolog: the small hook binary, else (an older config) the one beside JUICE_SLURM_BIN, else juice-slurm.
[ -n "${JUICE_HOOK_BIN:-}" ] || [ -z "${JUICE_SLURM_BIN:-}" ] || JUICE_HOOK_BIN=${JUICE_SLURM_BIN%/*}/juice-slurm-hook
# juice-slurm-hook links no TLS: a Juice job whose controller is reached over https (not the unix: hook socket)
# goes straight to juice-slurm, which the small binary would exec anyway (a job without Juice never calls).
case ${JUICE_HOOK_URL:-} in
http:* | https:*) [ -n "${SPANK_JUICE_REQUEST:-}" ] && [ -x "${JUICE_SLURM_BIN:-}" ] && exec "$JUICE_SLURM_BIN" hook epilog ;;
esac
[ -x "${JUICE_HOOK_BIN:-}" ] && exec "$JUICE_HOOK_BIN" epilog
[ -x "${JUICE_SLURM_BIN:-}" ] || exit 0
exec "$JUICE_SLURM_BIN" hook epilog
