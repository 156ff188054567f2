#!/usr/bin/env bash
# make demo [SLURM=22.05|24.11|26.05]: juice-slurm end to end on this machine. A real Slurm cluster (the host's
# test bed for 22.05, the trixie or sid chroot of test/chroot/slurm-chroot.sh for 24.11 and 26.05) with the SPANK
# plugin built against that release, job_submit.lua and the prolog/epilog hooks; PostgreSQL; juice-sim with a demo
# pool; the juice-slurm controller; then a few jobs as researchers would submit them. Everything keeps running.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
TB=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
BIN=$REPO/bin
# JUICE_TESTBED_INSTALLED=/usr (make demo-installed): everything juice-slurm runs comes from the installed package
# (/usr/lib/juice-slurm, /usr/share/juice-slurm), not from this tree (on the host's Slurm 22.05 only).
INSTALLED=${JUICE_TESTBED_INSTALLED:-}
[ -z "$INSTALLED" ] || BIN=$INSTALLED/lib/juice-slurm
SLURM=${SLURM:-22.05}
case $SLURM in
22.05) SUITE= ;;
24.11) SUITE=trixie ;;
26.05) SUITE=sid ;;
*) echo "demo: SLURM=$SLURM: 22.05, 24.11 or 26.05" >&2; exit 2 ;;
esac
[ -z "$INSTALLED" ] || [ -z "$SUITE" ] || { echo "demo: the installed package is demonstrated on Slurm 22.05 only" >&2; exit 2; }

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# build WHAT: this tree's binaries, after the test bed is up: the SPANK plugin is built against Slurm's spank.h,
# which the test bed installs (on a bare machine the build would fail first).
build() {
	if [ -z "$INSTALLED" ]; then
		say "Building $1"
		make --no-print-directory "$2" >/dev/null
	fi
}
[ -z "$INSTALLED" ] || say "Using the installed package: $("$BIN/juice-slurm" version --config= | head -1), from $BIN"
if [ -z "$SUITE" ]; then
	RUN=$TB/run LOG=$TB/log DEMO=$TB/demo JOBDIR=$TB/demo
	say "Bringing up the test bed: Slurm 22.05 (slurmctld, slurmd, slurmrestd, munge, slurmdbd on MariaDB) and PostgreSQL"
	bash test/testbed.sh up
	build "juice-slurm, juice-sim and the SPANK plugin" build
	say "Wiring juice-slurm into Slurm (plugstack, job_submit.lua, PrologSlurmctld/EpilogSlurmctld)"
	JUICE_TESTBED_PROLOG_WAIT=${JUICE_DEMO_PROLOG_WAIT:-15s} bash test/testbed.sh wire
	say "Starting juice-sim (pool 'demo': one agent of 4 GPUs x 24 GiB; pool 'test') and the juice-slurm controller"
	if [ -z "$INSTALLED" ]; then
		bash test/testbed.sh services
	else
		bash test/testbed.sh services-restart # whatever ran before is replaced by the installed binaries
	fi
	# shellcheck disable=SC1091
	. "$TB/env"
	EXEC=()
else
	ROOT=$TB/chroot-$SUITE
	RUN=$ROOT/juice-run LOG=$ROOT/juice-run
	# Jobs run inside the chroot: their output directory is /tmp/juice-demo there.
	JOBDIR=/tmp/juice-demo DEMO=$ROOT/tmp/juice-demo
	say "Bringing up the host test bed's PostgreSQL, and Slurm $SLURM in the $SUITE chroot (slurmctld, two slurmds, slurmrestd, munge, slurmdbd on MariaDB)"
	# PostgreSQL is the host test bed's: brought up only when it is not (the host's Slurm is not needed).
	pg_isready -q -h 127.0.0.1 -p "${JUICE_TESTBED_PGPORT:-5433}" && [ -s "$TB/env" ] || bash test/testbed.sh up
	bash test/chroot/slurm-chroot.sh up "$SUITE"
	# The plugin is built inside the chroot, against that release's spank.h, by the wiring.
	build "juice-slurm and juice-sim" go-build
	say "Wiring juice-slurm into it (the SPANK plugin built against its spank.h, job_submit.lua, PrologSlurmctld/EpilogSlurmctld)"
	JUICE_TESTBED_PROLOG_WAIT=${JUICE_DEMO_PROLOG_WAIT:-15s} bash test/chroot/slurm-chroot.sh wire "$SUITE"
	say "Starting juice-sim (pool 'demo': one agent of 4 GPUs x 24 GiB; pool 'test') and the juice-slurm controller"
	bash test/chroot/slurm-chroot.sh services "$SUITE"
	# The env file's values hold spaces: read them one by one rather than source it.
	for k in EXEC DEMO_DB_URL CLUSTER SIM_PORT HOOK_PORT; do
		printf -v "JUICE_TESTBED_$k" '%s' "$(sed -n "s/^JUICE_TESTBED_$k=//p" "$ROOT/env")"
	done
	read -r -a EXEC <<<"$JUICE_TESTBED_EXEC"
	# The Slurm clients of that release, inside the chroot.
	srun() { "${EXEC[@]}" srun "$@"; }
	sbatch() { "${EXEC[@]}" sbatch "$@"; }
	squeue() { "${EXEC[@]}" squeue "$@"; }
	scancel() { "${EXEC[@]}" scancel "$@"; }
fi
# Not exported: sbatch would copy them into every job's environment.
JUICE_DATABASE_URL=$JUICE_TESTBED_DEMO_DB_URL
JUICE_CLUSTER=$JUICE_TESTBED_CLUSTER
mkdir -p "$DEMO" && chmod 0755 "$DEMO"
say "Slurm $("${EXEC[@]}" sinfo -V), cluster $JUICE_CLUSTER, nodes: $("${EXEC[@]}" sinfo -h -N -o %N | sort -u | paste -sd' ')"

js() { "$BIN/juice-slurm" "$@" --database-url "$JUICE_DATABASE_URL" --cluster "$JUICE_CLUSTER"; }
status() { js status; }
reservation_state() { js describe job "$1" 2>/dev/null | sed -n 's/^State: *//p' | tail -1; }
cd "$DEMO"
rm -f "$DEMO"/*.out

say "1. srun --juice-pool=demo --juice-gpu-count=2: an interactive job on two remote GPUs"
echo "\$ srun --juice-pool=demo --juice-gpu-count=2 env | grep ^JUICE_"
srun --juice-pool=demo --juice-gpu-count=2 env | grep ^JUICE_ | sed 's/^/    /'

say "2. A batch job holding 3 GPUs for 40 s, and a 1.5 GiB slice of the fourth"
hold=$(sbatch --parsable --job-name=hold3 -L juice_demo --juice-pool=demo --juice-gpu-count=3 -o "$JOBDIR/hold3.out" --wrap 'env | grep ^JUICE_; sleep 40')
echo "    submitted job $hold (3 GPUs)"
for _ in $(seq 1 60); do [ "$(reservation_state "$hold")" = ready ] && break; sleep 0.5; done
slice=$(sbatch --parsable --job-name=slice --juice-pool=demo --juice-vram=1.5 -o "$JOBDIR/slice.out" --wrap 'env | grep ^JUICE_')
echo "    job $hold has its session; submitted job $slice (--juice-vram=1.5)"

say "3. An srun that cannot fit now (2 GPUs while all 4 are taken): Slurm keeps it PENDING for the pool's license"
echo "   juice_demo@juice (squeue's reason: Licenses), holding no node, and runs it once the 3-GPU job ends"
echo "\$ srun --juice-pool=demo --juice-gpu-count=2 env | grep ^JUICE_   (in the background)"
srun --job-name=nofit --juice-pool=demo --juice-gpu-count=2 env 2>&1 | grep ^JUICE_ >"$DEMO/nofit.out" &
nofit_srun=$!
nofit="" why=""
for _ in $(seq 1 120); do
	read -r nofit why < <(squeue -h -n nofit -o '%i %T(%r)' 2>/dev/null) || true
	[ "$why" = "PENDING(Licenses)" ] && break
	sleep 0.5
done
[ "$why" = "PENDING(Licenses)" ] || { echo "demo: the srun that cannot fit is not PENDING (Licenses) but '${why:-gone}'" >&2; exit 1; }
echo "    job $nofit: $(squeue -h -j "$nofit" -o '%T (%r)'); $("${EXEC[@]}" scontrol show lic juice_demo@juice | grep -o 'Total=[0-9]* Used=[0-9]* Free=[0-9]*')"

say "4. A job that may start in a minute (sbatch --begin=now+60) is reserved while pending, so that its session is"
echo "   ready when it starts; cancelled before then, its session is released"
# Not a job that waits for a license: the look-ahead leaves those alone (a license may not free up for long).
cancelme=$(sbatch --parsable --job-name=cancelme --begin=now+60 --juice-pool=test -o /dev/null --wrap true)
for _ in $(seq 1 30); do [ "$(reservation_state "$cancelme")" = ready ] && break; sleep 1; done
echo "    job $cancelme: $(squeue -h -j "$cancelme" -o '%T (%r)'), reservation $(reservation_state "$cancelme")"
scancel "$cancelme"

say "Watching the runs (juice-slurm status) until the demo jobs are done"
start=$SECONDS
while :; do
	printf '\n--- %ds ---\n' $((SECONDS - start))
	status || true
	left=$(squeue -h -j "$hold,$slice,$nofit" -o %i 2>/dev/null | wc -l)
	[ "$left" = 0 ] && break
	if ((SECONDS - start > 300)); then echo "still not done after 300 s; look at $LOG/juice-controller.log"; break; fi
	sleep 5
done

wait "$nofit_srun" || { echo "demo: the srun that waited for its license failed" >&2; exit 1; }

say "What each job saw in its environment"
for f in hold3 slice nofit; do
	echo "--- $f ($DEMO/$f.out)"
	sed 's/^/    /' "$DEMO/$f.out" 2>/dev/null || echo "    (no output)"
done
say "The history of job $nofit (it waited in Slurm's queue for its license: one run, never requeued)"
js describe job "$nofit" | sed 's/^/    /'
say "The history of job $cancelme (cancelled while pending)"
js describe job "$cancelme" | sed 's/^/    /'
say "Final status"
status
cat <<EOF

Everything is still running: Slurm $SLURM, PostgreSQL, juice-sim (127.0.0.1:${JUICE_TESTBED_SIM_PORT:-7070}) and the controller
(127.0.0.1:${JUICE_TESTBED_HOOK_PORT:-7171}).
Try: ${JUICE_TESTBED_EXEC:+$JUICE_TESTBED_EXEC }srun --juice-pool=demo --juice-gpu-count=2 env | grep JUICE_
     JUICE_DATABASE_URL='$JUICE_DATABASE_URL' JUICE_CLUSTER=$JUICE_CLUSTER $BIN/juice-slurm status
Logs: $LOG/juice-controller.log, $LOG/juice-sim.log
Stop everything with: make testbed-down
EOF
