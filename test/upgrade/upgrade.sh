#!/bin/bash
# An upgrade with live jobs (issue 25 item 1), on the wired 22.05 test bed, as docs/admin.md section 8 does it:
#
#   test/upgrade/upgrade.sh REF [RUNS]
#
# REF is an older commit of this repository (its juice-slurm, and its juice-slurm-hook where it has one, are built
# from `git archive REF` into build/upgrade/REF). That release is installed the way it was: its own settings file
# (the settings it knows), its schema (its own `migrate`, or the controller migrating itself before migrate
# existed), two replicas as SlurmUser at addresses of their own (10.231.2.2 and .3 on lo), the hooks on the
# slurmctld host running its binary. The nodes run this checkout's SPANK plugin throughout (the bed's).
#
# With that release serving, RUNS jobs of pool test (at least 14; 24 by default) are put in every state a run
# can be in when the upgrade comes: ended (sessions released), running with their sessions (each waits for a
# signal to start a second step), waiting in their prolog with their sessions queued at the Juice Controller (the
# pool is full), pending in Slurm behind a dependency (this bed's partition shares its cores four ways, so no job
# pends there for Resources), and reserved ahead while pending: a job of pool demo with a begin time after the
# upgrade, within the look-ahead window, whose session is ready before Slurm starts it (in a pool of its own: in
# pool test the jobs Slurm started and that wait for GPUs take the pool from it, by design; a release that does not
# reserve such a job has none, and says so); and, after migrate, a request and a release in flight (requesting,
# releasing: the old release asked a juice-sim held with SIGSTOP) when the old replicas stop, taken up by this
# checkout's. Then the upgrade, in the guide's order:
#   1. this checkout's `juice-slurm settings controller` reads the old settings file (kept by the package);
#   2. `juice-slurm migrate` as the owner role, while the old replicas serve;
#   3. an old binary started again on the migrated schema refuses it (releases that check it);
#   4. the replicas restarted one at a time on this checkout's binary, with the old settings file and only the
#      lines the upgrade needs (the runtime role's URL; the hook socket);
#   5. the hooks on the slurmctld host switched to this checkout's, then job_submit.lua (every job of the test was
#      submitted through the old release's job_submit.lua, and this checkout's controller reads what it recorded).
# Then every job is let go on. Checked: each job completed, none requeued or failed; each running job's second
# step, started after the upgrade, opened the session file the old release sealed and saw the same session as its
# first; the job reserved ahead started after the upgrade with the session reserved for it before; every run that
# waited in its prolog or was pending was served; no run had two sessions and no session
# served two runs; no reservation is left open and the Juice pool has no session left.
#
# The bed's own controller is stopped for the run, and the bed's juice-config.sh put back and its services started
# again at the end, whatever happened. Run by make test-upgrade and make chaos-upgrade (under the host lock, after
# wire and services).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
env_file=${JUICE_TESTBED_ENV:-/var/tmp/juice-testbed/env}
# shellcheck disable=SC1090
. "$env_file"
# shellcheck source=../lib/replica.sh
. "$(dirname "$0")/../lib/replica.sh"
TB=$JUICE_TESTBED_DIR
BIN=${JUICE_SLURM_BIN:-$REPO/bin/juice-slurm}
HOOK_BIN=$(dirname "$BIN")/juice-slurm-hook
GO=${GO:-go}
SLURM_USER=$JUICE_TESTBED_SLURM_USER
CONFIG_SH=/etc/juice-slurm/juice-config.sh
POLICY=/etc/juice-slurm/juice-policy.conf
A=10.231.2.2 B=10.231.2.3 PORT=7171
W=$TB/upgrade
DB=juice_upgrade
POOL=test
REF=${1:?usage: $0 REF [RUNS]}
RUNS=${2:-24}
log() { printf '[upgrade %s %s] %s\n' "${REF:0:9}" "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
[ "$RUNS" -ge 14 ] || fail "RUNS $RUNS: at least 14 (8 running, 4 waiting, one ended, one pending; and one reserved ahead)"
[ -n "${JUICE_TESTBED_DEMO_DB_URL:-}" ] || fail "$env_file has no JUICE_TESTBED_DEMO_DB_URL: run test/testbed.sh services first"
[ -s "$CONFIG_SH" ] || fail "$CONFIG_SH is missing: run test/testbed.sh wire first"
[ -x "$BIN" ] && [ -x "$HOOK_BIN" ] || fail "$BIN or $HOOK_BIN is missing: run make build"
sha=$(git -C "$REPO" rev-parse --verify --short=12 "$REF^{commit}" 2>/dev/null) ||
	fail "commit $REF is not in this clone (the upgrade test needs the history)"
OLD=$REPO/build/upgrade/$sha

pids=()
sim_stopped=""
restore() {
	local rc=$? i
	# juice-sim held for the in-flight calls: let go, whatever happened.
	[ -z "$sim_stopped" ] || kill -CONT "$sim_stopped" 2>/dev/null || true
	# A run stopped midway: its jobs cancelled, and the replicas still up given time to release their sessions,
	# which would otherwise stay at the bed's Juice simulator once the database is dropped.
	if [ -n "$(squeue -h -n upgrade-test -o %i 2>/dev/null)" ]; then
		scancel --name=upgrade-test 2>/dev/null || true
		for i in $(seq 1 30); do
			[ "$(psql "${owner_url:-x}" -qtAc "SELECT count(*) FROM juice_reservations WHERE state NOT IN ('released', 'failed')" 2>/dev/null || echo 0)" = 0 ] && break
			sleep 1
		done
	fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
	[ -s "$W/juice-config.sh.bed" ] && mv "$W/juice-config.sh.bed" "$CONFIG_SH"
	[ -s "$W/juice-policy.conf.bed" ] && mv "$W/juice-policy.conf.bed" "$POLICY"
	lua_put "$W/lua.bed"
	ip addr del $A/32 dev lo 2>/dev/null || true
	ip addr del $B/32 dev lo 2>/dev/null || true
	[ $rc = 0 ] || { log "replica logs:"; tail -n 15 "$W"/ctl-*.log >&2 || true; }
	psql "$JUICE_TESTBED_PG_URL" -qtAc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
	bash "$REPO/test/testbed.sh" services >/dev/null 2>&1 || log "the test bed's services did not start again"
	exit $rc
}
# lua_put DIR: the job_submit.lua (and juice_submit.lua, where DIR has it) of DIR in /etc/slurm, the module first,
# each by rename, as the guide's step 5 does: slurmctld loads a job_submit.lua whose mtime changed at the next
# submission.
lua_put() {
	local f
	for f in juice_submit.lua job_submit.lua; do
		[ -s "$1/$f" ] || continue
		install -m 0644 "$1/$f" "/etc/slurm/.$f.upgrade"
		mv "/etc/slurm/.$f.upgrade" "/etc/slurm/$f"
	done
}
trap restore EXIT

# The old release, built once per commit (its source in a temporary directory: not a package of this module's
# tree). What it can do is read from its binary and its tree in git.
if [ ! -x "$OLD/juice-slurm" ]; then
	log "building juice-slurm at $sha"
	tree=$(mktemp -d) && rm -rf "$OLD" && mkdir -p "$OLD"
	git -C "$REPO" archive "$sha" | tar -x -C "$tree"
	(cd "$tree" && GOFLAGS=-mod=mod $GO build -o "$OLD/juice-slurm.new" ./cmd/juice-slurm &&
		{ [ ! -d cmd/juice-slurm-hook ] || GOFLAGS=-mod=mod $GO build -o "$OLD/juice-slurm-hook" ./cmd/juice-slurm-hook; }) >&2 ||
		{ rm -rf "$tree"; fail "cannot build juice-slurm at $sha"; }
	rm -rf "$tree"
	mv "$OLD/juice-slurm.new" "$OLD/juice-slurm"
fi
chmod 0755 "$REPO/build" "$REPO/build/upgrade" "$OLD" 2>/dev/null || true
old_flags=$("$OLD/juice-slurm" controller -h 2>&1 | sed -n 's/^  -\([a-z-]*\).*/\1/p')
knows() { grep -qx -- "$1" <<<"$old_flags"; }
old_migrates=false && git -C "$REPO" cat-file -e "$sha:cmd/juice-slurm/migrate.go" 2>/dev/null && old_migrates=true
old_tls=false && knows hook-cert && old_tls=true
old_list=false && git -C "$REPO" show "$sha:hooks/juice-config.sh" | grep -q 'comma-separated list' && old_list=true
old_schema=$(git -C "$REPO" ls-tree -r --name-only "$sha" | sed -n 's#.*/migrations/0*\([0-9]*\)_[^/]*\.sql$#\1#p' | sort -n | tail -1)
log "old release: schema $old_schema, migrate command $old_migrates, hook API over TLS $old_tls, hooks take a list $old_list"

# The bed's controller steps aside.
if [ -s "$TB/run/juice-controller.pid" ]; then
	kill "$(cat "$TB/run/juice-controller.pid")" 2>/dev/null || true
	while kill -0 "$(cat "$TB/run/juice-controller.pid")" 2>/dev/null; do sleep 0.1; done
fi
# (An earlier run that died before putting the bed's hooks config back left it here.)
[ ! -s "$W/juice-config.sh.bed" ] || mv "$W/juice-config.sh.bed" "$CONFIG_SH"
[ ! -d "$W/lua.bed" ] || lua_put "$W/lua.bed"
[ ! -s "$W/juice-policy.conf.bed" ] || mv "$W/juice-policy.conf.bed" "$POLICY"
rm -rf "$W" && install -d -m 0755 "$W" "$W/out" "$W/lua.bed" "$W/lua.old"
cp -p "$CONFIG_SH" "$W/juice-config.sh.bed"
cp -p "$POLICY" "$W/juice-policy.conf.bed"
cp -p /etc/slurm/job_submit.lua "$W/lua.bed/"
[ ! -s /etc/slurm/juice_submit.lua ] || cp -p /etc/slurm/juice_submit.lua "$W/lua.bed/"
# The old release's job_submit.lua (and its module, where it has one) records every job submitted before the
# upgrade's step 5: this checkout's controller reads the requests it wrote. The nodes, and srun and sbatch here, run
# this checkout's SPANK plugin (the guide's step 2 comes first), whose options that script reads.
for f in job_submit.lua juice_submit.lua; do
	git -C "$REPO" cat-file -e "$sha:hooks/$f" 2>/dev/null || continue
	git -C "$REPO" show "$sha:hooks/$f" >"$W/lua.old/$f"
done
[ -s "$W/lua.old/job_submit.lua" ] || fail "the release at $sha has no hooks/job_submit.lua"
ip addr replace $A/32 dev lo
ip addr replace $B/32 dev lo

# A database of its own, owned by the owner role; the runtime role as the installation has it.
psql "$JUICE_TESTBED_PG_URL" -qtAc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
psql "$JUICE_TESTBED_PG_URL" -qtAc "CREATE DATABASE $DB" >/dev/null
owner_url=${JUICE_TESTBED_PG_URL/\/postgres\?/\/$DB?}
runtime_url=$(sed "s#^postgres://[^@]*@#postgres://$JUICE_TESTBED_PG_RUNTIME_ROLE@#" <<<"$owner_url")
q() { psql "$owner_url" -qtAc "$1"; }

# The secrets as the slurmctld host has them, and a certificate naming both replicas.
src=$W/slurmctld-host
install -d -m 0755 -o root -g "$SLURM_USER" "$src"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" /etc/juice-slurm/cluster.key /etc/juice-slurm/hook.secret "$src/"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" "$TB/demo/juice.token" "$src/juice.token"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" "$JUICE_TESTBED_TOKEN_FILE" "$src/slurm.token"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" "$(sed -n 's/.*passfile=\([^&]*\).*/\1/p' <<<"$owner_url")" "$src/pgpass"
JUICE_HOOK_SANS="IP:$A,IP:$B" sh "$REPO/deploy/make-hook-cert.sh" "$src" "$SLURM_USER" >/dev/null 2>&1

# The site policy as the old release read it (the bed's has settings of later releases, which an older
# job_submit.lua refuses: "the site's Juice policy is broken"): the limits every release knows. It is the site's
# file for the whole run, in its place for job_submit.lua and named by the replicas' settings; this checkout's
# replicas and job_submit.lua go on reading it after the upgrade, as a site's kept file.
printf '%s\n' "max_gpus = 8" "max_vram = 80GiB" "pools = demo, small, test, lab" >"$W/juice-policy.conf"
install -m 0644 "$W/juice-policy.conf" "$POLICY.upgrade" && mv "$POLICY.upgrade" "$POLICY"

# Each replica's directory: the secrets (owners and modes kept) and the old release's settings file, holding the
# settings it knows of those an installation sets.
etc_of() { echo "$W/$1"; }
old_settings() { # old_settings NAME ADDRESS DBURL
	local etc line
	etc=$(etc_of "$1")
	install -d -m 0750 -o root -g "$SLURM_USER" "$etc"
	tar -C "$src" -cpf - cluster.key hook.secret hook.crt hook.key juice.token slurm.token pgpass | tar -C "$etc" --same-owner -xpf -
	install -d -m 0755 -o "$SLURM_USER" -g "$SLURM_USER" "$W/sock-$1"
	{
		echo "# $1: the settings of juice-slurm at $sha (schema $old_schema), as its installation had them"
		{ replica_settings "$etc" "$2" "$3" && echo "policy = $W/juice-policy.conf"; } |
			while IFS= read -r line; do ! knows "${line%% =*}" || echo "$line"; done
	} >"$etc/juice-slurm.conf"
	chown root:"$SLURM_USER" "$etc/juice-slurm.conf" && chmod 0640 "$etc/juice-slurm.conf"
}
start() { # start NAME BINARY [CONF]: a replica as SlurmUser
	local etc
	etc=$(etc_of "$1")
	setsid setpriv --reuid "$SLURM_USER" --regid "$SLURM_USER" --init-groups \
		"$2" controller --config "${3:-$etc/juice-slurm.conf}" </dev/null >>"$W/ctl-$1.log" 2>&1 &
	pids+=($!)
	eval "pid_$1=$!"
}
stop() { # stop NAME: SIGTERM, as systemctl stop does
	local p
	p=$(eval echo "\$pid_$1")
	kill -TERM "$p" 2>/dev/null || true
	while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
}
ready() { # ready ADDRESS TLS
	if [ "$2" = true ]; then
		curl -fsS --max-time 2 --cacert "$src/hook.crt" "https://$1:$PORT/readyz" >/dev/null 2>&1
	else
		curl -fsS --max-time 2 "http://$1:$PORT/readyz" >/dev/null 2>&1
	fi
}
wait_ready() { # wait_ready ADDRESS TLS
	local i
	for i in $(seq 1 60); do
		ready "$1" "$2" && return 0
		sleep 1
	done
	fail "the replica at $1 is not ready after 60 s"
}
leader() { q "SELECT holder FROM juice_leases WHERE expires_at > now()" 2>/dev/null | head -1; }

# Step 0: the old release installed and serving.
old_url=$owner_url
if $old_migrates; then
	"$OLD/juice-slurm" migrate --database-url "$owner_url" --runtime-role "$JUICE_TESTBED_PG_RUNTIME_ROLE" >&2
	old_url=$runtime_url
fi
old_settings ctl1 $A "$old_url"
old_settings ctl2 $B "$old_url"
start ctl1 "$OLD/juice-slurm"
wait_ready $A $old_tls
start ctl2 "$OLD/juice-slurm"
wait_ready $B $old_tls
scheme=http && $old_tls && scheme=https
urls="$scheme://$A:$PORT" && $old_list && urls="$urls,$scheme://$B:$PORT"
hooks_config() { # hooks_config JUICE_SLURM_BIN JUICE_HOOK_BIN JUICE_HOOK_URL
	{
		grep -v '^JUICE_SLURM_BIN=\|^JUICE_HOOK_BIN=\|^JUICE_HOOK_URL=\|^JUICE_HOOK_CA=\|^JUICE_PROLOG_WAIT=\|^JUICE_LICENSES=' "$W/juice-config.sh.bed"
		echo "JUICE_SLURM_BIN=$1"
		echo "JUICE_HOOK_BIN=$2"
		echo "JUICE_HOOK_URL=$3"
		echo "JUICE_HOOK_CA=$src/hook.crt"
		# Long enough for a prolog to outlast the upgrade; the pool's license is not the old release's to keep.
		echo "JUICE_PROLOG_WAIT=300s"
		echo "JUICE_LICENSES=off"
		echo "export JUICE_PROLOG_WAIT JUICE_HOOK_URL JUICE_HOOK_CA"
	} >"$W/juice-config.sh.new"
	chmod 0644 "$W/juice-config.sh.new" && mv "$W/juice-config.sh.new" "$CONFIG_SH"
}
hooks_config "$OLD/juice-slurm" "$OLD/juice-slurm-hook" "$urls"
lua_put "$W/lua.old"
for i in $(seq 1 30); do [ -n "$(leader)" ] && break; sleep 1; done
[ -n "$(leader)" ] || fail "no old replica took the lease"
log "the old release serves: replicas at $A and $B, leader $(leader), hooks at $urls, its job_submit.lua ($(ls "$W/lua.old" | tr '\n' ' '))"

# Step 1: live runs in every state. Jobs are named upgrade-test; each writes the session its steps saw.
job() { # job KIND GPUS [sbatch options...] -- prints the job id
	local kind=$1 gpus=$2
	shift 2
	sbatch --parsable --job-name=upgrade-test --comment="upgrade-$kind" --juice-pool="${JOB_POOL:-$POOL}" --juice-gpu-count="$gpus" \
		-o "$W/out/%j.$kind" "$@"
}
state_of() { squeue -h -j "$1" -o %T 2>/dev/null || true; }
wait_jobs() { # wait_jobs WHAT SECONDS TEST: until TEST (a command) holds, saying where it stands every 10 s
	local what=$1 limit=$2 start=$SECONDS
	shift 2
	until "$@"; do
		[ $((SECONDS - start)) -lt "$limit" ] || fail "$what: not within $limit s ($(squeue -h -n upgrade-test -o '%i %T %r' | tr '\n' ';'))"
		[ $(((SECONDS - start) % 10)) = 0 ] && log "waiting for $what ($((SECONDS - start)) s)"
		sleep 1
	done
}
ended=$(((RUNS - 12) / 2)) # and 8 running, 4 waiting, the rest pending
E=() R=() Wt=() P=() Ah=()
for i in $(seq 1 $ended); do
	E+=("$(job ended 1 --wrap 'test -n "$JUICE_SESSION_ID" || exit 42; echo "$JUICE_SESSION_ID"')")
done
none_left() { [ -z "$(squeue -h -n upgrade-test -o %i)" ]; }
wait_jobs "$ended jobs to end before the upgrade" 300 none_left
# Running: 8 jobs of 2 GPUs fill the pool's 16. Each says its session, waits for $W/go, then starts a second
# step, whose task opens the session file again on the node.
for i in $(seq 1 8); do
	R+=("$(job running 2 --wrap "test -n \"\$JUICE_SESSION_ID\" || exit 42; echo \"\$JUICE_SESSION_ID\"; while [ ! -e $W/go ]; do sleep 0.5; done; srun -n1 sh -c 'test -n \"\$JUICE_SESSION_ID\" || exit 43; echo \"\$JUICE_SESSION_ID\"'")")
done
all_running() { for j in "${R[@]}"; do [ "$(state_of "$j")" = RUNNING ] && [ -s "$W/out/$j.running" ] || return 1; done; }
wait_jobs "8 jobs running with their sessions" 300 all_running
# Reserved ahead: a job of pool demo that Slurm starts at its begin time, after the upgrade (60 s leaves room for
# the rest of the set-up and the upgrade on a loaded machine; the look-ahead window is 2 minutes). Releases whose
# look-ahead does not take a job pending for its begin time (before Candidate.BeginsWithin) have no such run.
ahead="" ahead_session=""
if git -C "$REPO" show "$sha:reconcile/lookahead.go" | grep -q 'func (c Candidate) BeginsWithin'; then
	ahead=$(JOB_POOL=demo job ahead 2 --begin=now+60 --wrap 'test -n "$JUICE_SESSION_ID" || exit 42; echo "$JUICE_SESSION_ID"')
	Ah+=("$ahead")
	for i in $(seq 1 30); do
		ahead_session=$(q "SELECT session_id FROM juice_reservations WHERE job_id = $ahead AND state = 'ready'")
		[ -n "$ahead_session" ] && break
		sleep 1
	done
	[ -n "$ahead_session" ] || fail "job $ahead, pending for its begin time within the look-ahead window, was not reserved ahead within 30 s: $(q "SELECT state, reason FROM juice_reservations WHERE job_id = $ahead")"
	log "job $ahead, pending for its begin time, reserved ahead: session $ahead_session ready"
else
	log "the release at $sha reserves no job pending for its begin time ahead (no Candidate.BeginsWithin): the state reserved ahead is not covered from it"
fi
# Waiting: Slurm starts them (no license in the way), their prologs wait for sessions the full pool queues.
for i in $(seq 1 4); do
	Wt+=("$(job waiting 2 --wrap 'test -n "$JUICE_SESSION_ID" || exit 42; echo "$JUICE_SESSION_ID"')")
done
all_configuring() { for j in "${Wt[@]}"; do [ "$(state_of "$j")" = CONFIGURING ] || return 1; done; }
wait_jobs "4 jobs waiting in their prologs" 120 all_configuring
# Pending: behind a running job.
for i in $(seq 1 $((RUNS - 12 - ended))); do
	P+=("$(job pending 1 -d "afterany:${R[0]}" --wrap 'test -n "$JUICE_SESSION_ID" || exit 42; echo "$JUICE_SESSION_ID"')")
done
sleep 3
log "live runs: ${#E[@]} ended, ${#R[@]} running, ${#Ah[@]} reserved ahead, ${#Wt[@]} waiting in their prologs, ${#P[@]} pending; runs by state in the database: $(q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM juice_reservations GROUP BY state ORDER BY state) s")"
before_sessions=$(for j in "${R[@]}"; do echo "$j $(head -1 "$W/out/$j.running")"; done)

# The upgrade.
if [ -n "$ahead" ]; then
	st=$(state_of "$ahead")
	[ "$st" = PENDING ] || fail "job $ahead, reserved ahead, is $st before the upgrade: its begin time came too soon (the set-up took $SECONDS s)"
fi
log "upgrade: the old settings file read by this checkout's juice-slurm"
"$BIN" settings controller --config "$(etc_of ctl1)/juice-slurm.conf" >"$W/settings.out" 2>&1 ||
	fail "this checkout's juice-slurm refuses the old settings file: $(cat "$W/settings.out")"
log "upgrade: juice-slurm migrate, the old replicas serving"
upgrade_start=$SECONDS
"$BIN" migrate --database-url "$owner_url" --runtime-role "$JUICE_TESTBED_PG_RUNTIME_ROLE" >"$W/migrate.out" 2>&1 ||
	fail "migrate: $(cat "$W/migrate.out")"
grep -q "schema migrated from version $old_schema to" "$W/migrate.out" || fail "migrate said: $(cat "$W/migrate.out")"
log "$(cat "$W/migrate.out" | head -1)"
if $old_migrates; then
	# A downgrade: the old binary started on the migrated schema must refuse it, saying so.
	if out=$(timeout 30 setpriv --reuid "$SLURM_USER" --regid "$SLURM_USER" --init-groups "$OLD/juice-slurm" controller \
		--config "$(etc_of ctl1)/juice-slurm.conf" --hook-listen 127.0.0.1:0 --holder downgrade 2>&1); then
		fail "the old binary ran on the migrated schema: $out"
	fi
	grep -q "newer than this binary knows" <<<"$out" || fail "the old binary on the migrated schema said: $(tail -3 <<<"$out")"
	log "downgrade refused: $(grep -o 'the database schema is newer[^"]*' <<<"$out" | head -1)"
else
	log "downgrade: the release at $sha predates the schema check (it migrates itself): not checked"
fi
# In flight at the restart: a run whose request and a run whose release the old release has committed (requesting,
# releasing) and asked of a Juice Controller that does not answer (juice-sim stopped with SIGSTOP), so that this
# checkout's leader takes both up from the old release's intents: the request found or made once, the session
# cancelled. The release in pool demo, which has room for it beside the job reserved ahead; the request in pool
# test, full, where it queues behind the jobs waiting in their prologs: in pool demo it could find the GPU of the
# release not yet given back, and a started job whose session is queued takes the pool from a job reserved ahead
# (reconcile.MustYield), which would then start with another session than the one the old release made (seen from
# 124ffeb). juice-sim goes on once the last old replica has stopped (the old release never hears its answers).
E_end=$W/end-releasing
rel=$(JOB_POOL=demo job releasing 1 --wrap "test -n \"\$JUICE_SESSION_ID\" || exit 42; echo \"\$JUICE_SESSION_ID\"; while [ ! -e $E_end ]; do sleep 0.5; done")
rel_running() { [ "$(state_of "$rel")" = RUNNING ] && [ -s "$W/out/$rel.releasing" ]; }
wait_jobs "job $rel running with its session" 120 rel_running
sim_pid=$(cat "$TB/run/juice-sim.pid")
kill -STOP "$sim_pid"
sim_stopped=$sim_pid
touch "$E_end"
req=$(job requesting 1 --wrap 'test -n "$JUICE_SESSION_ID" || exit 42; echo "$JUICE_SESSION_ID"')
in_flight() {
	[ "$(q "SELECT count(*) FROM juice_reservations WHERE job_id = $rel AND state = 'releasing'")" = 1 ] &&
		[ "$(q "SELECT count(*) FROM juice_reservations WHERE job_id = $req AND state = 'requesting'")" = 1 ]
}
wait_jobs "job $rel's release and job $req's request in flight at a stopped juice-sim" 120 in_flight
log "in flight at the restart: job $rel releasing, job $req requesting (juice-sim stopped)"
new_settings() { # new_settings NAME: the old file, with what the upgrade changes
	local etc
	etc=$(etc_of "$1")
	{
		grep -v '^database-url = ' "$etc/juice-slurm.conf"
		echo "# the upgrade: the controller runs as the runtime role, and serves the hooks of this host on a socket"
		echo "database-url = $(sed "s#passfile=[^&]*#passfile=$etc/pgpass#" <<<"$runtime_url")"
		# A release before the hook API's TLS keeps plain HTTP on its address until its hooks are gone: they
		# cannot speak TLS. (The hooks of this release call the socket.)
		$old_tls || echo "hook-cert ="
		echo "hook-socket = $W/sock-$1/hook.sock"
		echo "hook-socket-users = $SLURM_USER"
	} >"$etc/juice-slurm.conf.new"
	chown root:"$SLURM_USER" "$etc/juice-slurm.conf.new" && chmod 0640 "$etc/juice-slurm.conf.new"
}
for r in ctl2:$B ctl1:$A; do
	name=${r%%:*} addr=${r#*:}
	new_settings "$name"
	stop "$name"
	if [ "$name" = ctl1 ]; then
		kill -CONT "$sim_stopped" && sim_stopped=""
		log "upgrade: juice-sim goes on, no old replica left"
	fi
	start "$name" "$BIN" "$(etc_of "$name")/juice-slurm.conf.new"
	wait_ready "$addr" $old_tls
	log "upgrade: replica $name restarted on this checkout's binary; leader $(leader)"
done
"$BIN" migrate --check --database-url "$owner_url" >/dev/null || fail "the schema is not the one this checkout needs"
if $old_tls; then new_urls="https://$A:$PORT,https://$B:$PORT"; else new_urls="unix:$W/sock-ctl1/hook.sock"; fi
hooks_config "$BIN" "$HOOK_BIN" "$new_urls"
lua_put "$W/lua.bed"
log "upgrade: the hooks switched to this checkout's ($new_urls), and job_submit.lua"
upgrade_took=$((SECONDS - upgrade_start))
after_start=$SECONDS

# Every job let go on, and what each saw.
touch "$W/go"
wait_jobs "every job to end after the upgrade" 600 none_left
after_took=$((SECONDS - after_start))
all=("${E[@]}" "${R[@]}" "${Ah[@]}" "${Wt[@]}" "${P[@]}" "$rel" "$req")
for j in "${all[@]}"; do
	line=$(sacct -n -X -P -j "$j" -o state,exitcode 2>&1 | head -1)
	[ "$line" = "COMPLETED|0:0" ] || fail "job $j ended as $line (want COMPLETED, exit 0): $(cat "$W"/out/"$j".* 2>/dev/null)"
	grep -Eqx '[0-9a-f-]{36}' <(head -1 "$W"/out/"$j".*) || fail "job $j saw no session: $(cat "$W"/out/"$j".*)"
done
while read -r j s; do
	second=$(sed -n 2p "$W/out/$j.running")
	[ "$second" = "$s" ] || fail "job $j: its step after the upgrade saw session '${second}', its first step $s"
done <<<"$before_sessions"
if [ -n "$ahead" ]; then
	saw=$(head -1 "$W/out/$ahead.ahead")
	[ "$saw" = "$ahead_session" ] || fail "job $ahead, reserved ahead before the upgrade with session $ahead_session, saw '$saw'"
	log "job $ahead, reserved ahead before the upgrade, started after it with that session"
fi
log "every job completed; each running job's step after the upgrade opened its old session file"
# A requeued job's next run has its restart count (sacct of 22.05 has no field for it).
requeued=$(q "SELECT string_agg(DISTINCT job_id::text, ' ') FROM juice_reservations WHERE run > 0")
[ -z "$requeued" ] || fail "jobs requeued: $requeued"
# Two sessions of one run at once: two of its reservations with sessions whose lives overlapped. (A run let go
# for now, yielding its pool to a job Slurm started, is reserved again later: one after the other is no double.)
doubled=$(q "WITH lives AS (SELECT r.id, r.job_id, r.run, r.session_id, r.created_at, coalesce((SELECT max(e.at)
	FROM juice_events e WHERE e.reservation_id = r.id AND e.to_state IN ('released', 'failed')), 'infinity') AS ended
	FROM juice_reservations r WHERE r.session_id <> '')
	SELECT DISTINCT a.job_id || '.' || a.run FROM lives a JOIN lives b ON a.job_id = b.job_id AND a.run = b.run
	AND a.id <> b.id AND a.session_id <> b.session_id AND a.created_at < b.ended AND b.created_at < a.ended")
[ -z "$doubled" ] || fail "runs with two sessions at once: $doubled"
shared=$(q "SELECT session_id FROM juice_reservations WHERE session_id <> '' GROUP BY session_id HAVING count(DISTINCT (job_id, run)) > 1")
[ -z "$shared" ] || fail "sessions that served two runs: $shared"
served=$(q "SELECT count(DISTINCT (job_id, run)) FROM juice_reservations WHERE session_id <> '' AND job_id IN ($(IFS=,; echo "${all[*]}"))")
[ "$served" = "${#all[@]}" ] || fail "$served runs had sessions, ${#all[@]} jobs ran"
open=""
for i in $(seq 1 60); do
	open=$(q "SELECT count(*) FROM juice_reservations WHERE state NOT IN ('released', 'failed')")
	left=0
	for pool in $POOL demo; do
		n=$(curl -fsS -H "Authorization: Bearer $(cat "$TB/demo/juice.token")" "http://127.0.0.1:7070/v1/agents?pool_id=$pool" |
			jq '[.[].sessions // [] | length] | add // 0')
		left=$((left + n))
	done
	[ "$open" = 0 ] && [ "$left" = 0 ] && break
	sleep 1
done
[ "$open" = 0 ] || fail "$open reservations still open: $(q "SELECT job_id, run, state FROM juice_reservations WHERE state NOT IN ('released', 'failed')")"
[ "$left" = 0 ] || fail "$left sessions left in pools $POOL and demo at the Juice Controller"
failed=$(q "SELECT count(*) FROM juice_reservations WHERE state = 'failed'")
[ "$failed" = 0 ] || fail "$failed reservations failed"
log "PASS: from $sha (schema $old_schema) to this checkout with ${#all[@]} live runs: 0 lost, 0 doubled, 0 left open, 0 sessions left"
# One row for the results table (test/upgrade/run.sh): on stdout, the rest went to stderr.
echo "| $sha | $old_schema | $($old_migrates && echo migrate || echo "itself, as the owner") | $($old_tls && echo TLS || echo "plain HTTP") | ${#all[@]} | ${#E[@]} / ${#R[@]} / ${#Ah[@]} / ${#Wt[@]} / ${#P[@]} / 1 / 1 | ${upgrade_took} s | ${after_took} s | $($old_migrates && echo refused || echo "not checked") | 0 | 0 | 0 | 0 |"
