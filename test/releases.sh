#!/usr/bin/env bash
# test/releases.sh [RELEASE...]   (RELEASE = 22.05 | 24.11 | 26.05; default: all three)
#
# The end-to-end suite (test/e2e, tag e2e) and the short chaos run (test/chaos -jobs 60 -kills 4) on each Slurm
# release, each on its own fully wired cluster:
#   22.05  the host's test bed (test/testbed.sh up + wire)                  slurmrestd 6820, juice-sim 7070, hook 7171
#   24.11  the Debian trixie chroot (test/chroot/slurm-chroot.sh up + wire) slurmrestd 7820, juice-sim 7270, hook 7271
#   26.05  the Debian sid chroot                                            slurmrestd 8820, juice-sim 7370, hook 7371
# "Wired" is the SPANK plugin built against that release's spank.h, job_submit.lua, PrologSlurmctld and
# EpilogSlurmctld; the controller and juice-sim are this checkout's bin/ (make build), run on the host.
#
# Phase 1 runs the e2e suite on every release side by side (each cluster has its own ports); phase 2 runs the
# chaos runs one after the other, because the host's chaos run restarts the one PostgreSQL every run uses (the
# chroot runs leave PostgreSQL alone: -restart-postgres=false). Each cluster is held under its own lock while a
# run uses it: the host's $BASE/host.lock (as the Makefile's ON_HOST), $BASE/chroot-SUITE.lock for a chroot.
# Logs: $BASE/releases/STAMP-RELEASE-{e2e,chaos,wire}.log. Exit status 0 only when every run passed.
#
# TOKEN_RENEWAL=1 (make test-token-renewal, chroot releases only): instead, each cluster's slurmrestd token lives
# $TOKEN_LIFESPAN seconds (120) and is renewed every $TOKEN_RENEW (40) by deploy/juice-slurm-token-renew, and
# TestTokenRenewalKeepsPolling (tag tokenrenewal) runs jobs for 10 minutes under it; then the cluster gets its
# long-lived token back.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
# E2E_RUN: a -test.run pattern (all tests by default); CHAOS_ARGS: the chaos run's size; CHAOS=0: no chaos runs;
# CHAOS_EVENTS=0: the chaos runs without Slurm's own failures (below).
E2E_RUN=${E2E_RUN:-.}
CHAOS=${CHAOS:-1}
TOKEN_RENEWAL=${TOKEN_RENEWAL:-0}
E2E_TAGS=e2e
if [ "$TOKEN_RENEWAL" = 1 ]; then
	E2E_TAGS=e2e,tokenrenewal E2E_RUN='^TestTokenRenewalKeepsPolling$' CHAOS=0
	export JUICE_TESTBED_TOKEN_LIFESPAN=${TOKEN_LIFESPAN:-120} JUICE_TESTBED_TOKEN_RENEW=${TOKEN_RENEW:-40}
fi
CHAOS_ARGS=${CHAOS_ARGS:--jobs 60 -kills 4 -rest-outage 15s}
# CHAOS_EVENTS=1 (the default): each chaos run also has Slurm's own failures (-slurm-events: scontrol reconfigure,
# munged and slurmctld restarted, while reservations are made and prologs wait). On 26.05 a reconfigure or a
# restart of slurmctld SIGKILLs the waiting PrologSlurmctld processes, takes the jobs' configuration for complete
# and recovers batch steps it never launched; the controller requeues those stranded jobs (reconcile.Stranded), and
# the run's checks hold (docs/admin.md section 7). -slurm-events-skip can leave an event out by hand.
CHAOS_EVENTS=${CHAOS_EVENTS:-1}
events_of() {
	[ "$CHAOS_EVENTS" = 1 ] || return 0
	echo "-slurm-events"
}

releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(22.05 24.11 26.05)

log() { printf '[releases %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the test beds are real Slurm clusters)"

suite_of() { case $1 in 22.05) echo host ;; 24.11) echo trixie ;; 26.05) echo sid ;; *) return 1 ;; esac; }
for r in "${releases[@]}"; do suite_of "$r" >/dev/null || die "unknown release $r (22.05, 24.11 or 26.05)"; done
if [ "$TOKEN_RENEWAL" = 1 ]; then
	for r in "${releases[@]}"; do [ "$r" != 22.05 ] || die "TOKEN_RENEWAL=1: the host's test bed has no renewal loop (24.11 and 26.05 only)"; done
fi
envfile_of() { if [ "$1" = host ]; then echo "$BASE/env"; else echo "$BASE/chroot-$1/env"; fi; }
lock_of() { if [ "$1" = host ]; then echo "$BASE/host.lock"; else echo "$BASE/chroot-$1.lock"; fi; }

[ -x "$REPO/bin/juice-slurm" ] && [ -x "$REPO/bin/juice-sim" ] && [ -s "$REPO/spank/build/spank_juice.so" ] ||
	die "bin/ or spank/build/ is missing: run make build"

LOGS=$BASE/releases
mkdir -p "$LOGS"
stamp=$(date -u +%Y%m%dT%H%M%S)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

log "building the e2e test binary (-race) and the chaos runner"
(cd "$REPO" && "$GO" test -c -race -tags "$E2E_TAGS" -o "$tmp/e2e.test" ./test/e2e/ && "$GO" build -o "$tmp/chaos" ./test/chaos/)

# up_and_wire SUITE: bring the cluster up and wire it (under its lock, taken by the caller).
up_and_wire() {
	if [ "$1" = host ]; then
		bash "$REPO/test/testbed.sh" up && bash "$REPO/test/testbed.sh" wire
	else
		bash "$REPO/test/chroot/slurm-chroot.sh" up "$1" && bash "$REPO/test/chroot/slurm-chroot.sh" wire "$1"
	fi
}

# e2e RELEASE: up, wire and the e2e suite, holding the cluster's lock (-o: the daemons started must not keep it).
e2e() {
	local rel=$1 suite envf lockf
	suite=$(suite_of "$rel") envf=$(envfile_of "$suite") lockf=$(lock_of "$suite")
	export -f up_and_wire
	mkdir -p "$(dirname "$lockf")"
	# The test binary runs in its package's directory, as go test runs it: it finds the checkout's bin/ from there.
	local rc=0
	flock -o "$lockf" bash -c '
		set -e
		REPO=$1 suite=$2 envf=$3 bin=$4 run=$5 wirelog=$6
		up_and_wire "$suite" >"$wirelog" 2>&1 || { echo "up/wire failed, see $wirelog"; exit 1; }
		cd "$REPO/test/e2e"
		rc=0
		CI=true JUICE_TESTBED_ENV=$envf "$bin" -test.count=1 -test.timeout 20m -test.v -test.run "$run" || rc=$?
		if [ -n "${JUICE_TESTBED_TOKEN_LIFESPAN:-}" ]; then
			# Back to the long-lived token, the renewal loop stopped.
			env -u JUICE_TESTBED_TOKEN_LIFESPAN -u JUICE_TESTBED_TOKEN_RENEW bash "$REPO/test/chroot/slurm-chroot.sh" up "$suite" >>"$wirelog" 2>&1
		fi
		exit $rc
	' _ "$REPO" "$suite" "$envf" "$tmp/e2e.test" "$E2E_RUN" "$LOGS/$stamp-$rel-wire.log" || rc=$?
	echo $SECONDS >"$tmp/$rel.done" # when this release's run ended (the runs end at different times)
	return $rc
}

chaos() {
	local rel=$1 suite envf lockf pg=true
	suite=$(suite_of "$rel") envf=$(envfile_of "$suite") lockf=$(lock_of "$suite")
	[ "$suite" = host ] || pg=false
	# shellcheck disable=SC2046 # the events' flags are words
	(cd "$REPO" && JUICE_TESTBED_ENV=$envf flock -o "$lockf" "$tmp/chaos" $CHAOS_ARGS $(events_of "$rel") -restart-postgres=$pg)
}

declare -A e2e_pid e2e_t0 result
t_all=$SECONDS
for rel in "${releases[@]}"; do
	log "Slurm $rel: e2e suite (log $LOGS/$stamp-$rel-e2e.log)"
	e2e_t0[$rel]=$SECONDS
	e2e "$rel" >"$LOGS/$stamp-$rel-e2e.log" 2>&1 &
	e2e_pid[$rel]=$!
done
failed=0
for rel in "${releases[@]}"; do
	if wait "${e2e_pid[$rel]}"; then
		result[$rel-e2e]="PASS $(($(cat "$tmp/$rel.done" 2>/dev/null || echo $SECONDS) - e2e_t0[$rel]))s (up, wire and e2e, side by side)"
	else
		result[$rel-e2e]="FAIL $(($(cat "$tmp/$rel.done" 2>/dev/null || echo $SECONDS) - e2e_t0[$rel]))s (log: $LOGS/$stamp-$rel-e2e.log)"
		failed=1
		grep -E -- '^(--- FAIL|e2e:|FAIL)|Error Trace|Error:|Messages:' "$LOGS/$stamp-$rel-e2e.log" | head -40 >&2 || true
	fi
	log "Slurm $rel: e2e ${result[$rel-e2e]}"
done
# The host's chaos run last: it restarts PostgreSQL.
for rel in $(printf '%s\n' "${releases[@]}" | sort -r); do
	[ "$CHAOS" = 1 ] || { result[$rel-chaos]="not run (CHAOS=0)"; continue; }
	log "Slurm $rel: chaos-short (log $LOGS/$stamp-$rel-chaos.log)"
	t0=$SECONDS
	if chaos "$rel" >"$LOGS/$stamp-$rel-chaos.log" 2>&1; then
		result[$rel-chaos]="PASS $((SECONDS - t0))s"
	else
		result[$rel-chaos]="FAIL $((SECONDS - t0))s (log: $LOGS/$stamp-$rel-chaos.log)"
		failed=1
		tail -30 "$LOGS/$stamp-$rel-chaos.log" >&2
	fi
	log "Slurm $rel: chaos ${result[$rel-chaos]}"
done

echo
printf '%-8s %-6s %s\n' RELEASE RUN RESULT
for rel in "${releases[@]}"; do
	printf '%-8s %-6s %s\n' "$rel" e2e "${result[$rel-e2e]}" "$rel" chaos "${result[$rel-chaos]}"
done
echo "all releases: $((SECONDS - t_all))s"
exit $failed
