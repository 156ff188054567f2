#!/usr/bin/env bash
# test-compat.sh [RELEASE...]   (RELEASE = 22.05 | 24.11 | 26.05; default: all three)
#
# Runs the slurmrest integration suite against a real slurmrestd of each Slurm release, with the
# newest and the oldest API version that release offers:
#   22.05  main test bed on the host (test/testbed.sh)     v0.0.38, v0.0.36
#   24.11  Debian trixie chroot (test/chroot/slurm-chroot.sh) v0.0.42, v0.0.40
#   26.05  Debian sid chroot                                 v0.0.45, v0.0.42
# Brings up each test bed it needs (idempotent; the chroots are built once and kept), wires each chroot
# (slurm-chroot.sh wire: the SPANK plugin built inside it, job_submit.lua, the hooks) and leaves them up and wired.
# Needs root (chroot, mounts). Exit status 0 only when every run passed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(22.05 24.11 26.05)

log() { echo "[test-compat] $*" >&2; }

up_testbed() { # release -> prints the env file
	case "$1" in
	22.05)
		if [ ! -s "$BASE/env" ]; then
			[ -x "$REPO/test/testbed.sh" ] || { log "no $REPO/test/testbed.sh to bring up the main test bed"; return 1; }
			log "bringing up the main test bed (Slurm 22.05)"
			"$REPO/test/testbed.sh" up >&2
		fi
		echo "$BASE/env"
		;;
	24.11)
		"$HERE/slurm-chroot.sh" up trixie >&2
		echo "$BASE/chroot-trixie/env"
		;;
	26.05)
		"$HERE/slurm-chroot.sh" up sid >&2
		echo "$BASE/chroot-sid/env"
		;;
	*)
		log "unknown release $1 (22.05, 24.11 or 26.05)"
		return 1
		;;
	esac
}

versions_of() {
	case "$1" in
	22.05) echo "v0.0.38 v0.0.36" ;;
	24.11) echo "v0.0.42 v0.0.40" ;;
	26.05) echo "v0.0.45 v0.0.42" ;;
	esac
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LOGS=$BASE/test-compat # one log per run, kept for a look after a failure
mkdir -p "$LOGS"
stamp=$(date -u +%Y%m%dT%H%M%S)
log "building the integration test binary"
(cd "$REPO" && "$GO" test -c -tags integration -o "$tmp/slurmrest.test" ./slurmrest/)

# spank_check RELEASE SUITE: `slurm-chroot.sh wire` builds the SPANK plugin inside the chroot against that release's
# spank.h and loads it (with job_submit.lua and the hooks); its srun --help lists the options and a bad value is
# refused at the prompt. The chroot stays wired (non-Juice jobs, such as the integration suite's, pass through).
spank_check() {
	local rel=$1 suite=$2 root=$BASE/chroot-$2 logf=$LOGS/$stamp-$1-spank.log
	# Under the chroot's lock, as test/releases.sh takes it: a run of the e2e suite there must not be rewired.
	flock -o "$BASE/chroot-$suite.lock" "$HERE/slurm-chroot.sh" wire "$suite" >"$logf" 2>&1 || { log "Slurm $rel: wire failed"; return 1; }
	local run=(chroot "$root" /usr/local/lib/juice-slurm/juice-run-as root)
	local help rc=0 cmd opt
	for cmd in srun sbatch salloc; do
		help=$("${run[@]}" $cmd --help 2>&1) || true
		echo "$help" >>"$logf"
		for opt in --juice-pool --juice-gpu-count --juice-vram; do
			grep -q -- "$opt" <<<"$help" || { log "Slurm $rel: $cmd --help does not list $opt"; rc=1; }
		done
	done
	local bad
	bad=$("${run[@]}" srun --juice-pool=test --juice-gpu-count=0 true 2>&1) && rc=1
	grep -q 'juice: invalid --juice-gpu-count "0"' <<<"$bad" || { log "Slurm $rel: a bad value was not refused: $bad"; rc=1; }
	return $rc
}

declare -a results
failed=0
for rel in "${releases[@]}"; do
	if ! envfile=$(up_testbed "$rel"); then
		results+=("$rel all FAIL (test bed not up)")
		failed=1
		continue
	fi
	case $rel in 24.11) suite=trixie ;; 26.05) suite=sid ;; *) suite= ;; esac
	if [ -n "$suite" ]; then
		if spank_check "$rel" "$suite"; then
			results+=("$rel spank PASS (wired: built inside the chroot against its spank.h; srun/sbatch/salloc --help list the options; bad value refused)")
		else
			results+=("$rel spank FAIL (log: $LOGS/$stamp-$rel-spank.log)")
			failed=1
		fi
	fi
	# A chroot's suite runs under its lock (the host's is the caller's): a chaos or e2e run there restarts slurmrestd
	# and slurmctld, which failed this suite once (a hand run beside make test).
	lock=()
	[ -z "$suite" ] || lock=(flock -o "$BASE/chroot-$suite.lock")
	for v in $(versions_of "$rel"); do
		log "Slurm $rel, API $v ($envfile)"
		start=$(date +%s)
		if (cd "$REPO/slurmrest" && CI=true JUICE_SLURMREST_ENV="$envfile" JUICE_SLURMREST_VERSION="$v" \
			"${lock[@]}" "$tmp/slurmrest.test" -test.run '^TestIntegration$' -test.count=1 -test.v) >"$LOGS/$stamp-$rel-$v.log" 2>&1; then
			results+=("$rel $v PASS $(($(date +%s) - start))s")
		else
			results+=("$rel $v FAIL $(($(date +%s) - start))s (log: $LOGS/$stamp-$rel-$v.log)")
			failed=1
			grep -E -- '--- (FAIL|PASS|SKIP)|Error:|Messages:|integration_test.go' "$LOGS/$stamp-$rel-$v.log" | head -60 >&2 || true
		fi
	done
done

echo
printf '%-8s %-9s %s\n' RELEASE API RESULT
for r in "${results[@]}"; do
	set -- $r
	printf '%-8s %-9s %s\n' "$1" "$2" "${*:3}"
done
exit $failed
