#!/bin/bash
# The controller on hosts of its own, two replicas, as docs/admin.md section 7 sets them up, on the wired 22.05
# test bed. Each replica runs in a network namespace of its own that this test makes (jsr-ctl1 at 10.231.1.2,
# jsr-ctl2 at 10.231.1.3, each with one veth on a bridge whose host side, the slurmctld host, is 10.231.1.1): its
# 127.0.0.1 is its own, so it reaches PostgreSQL, slurmrestd, the Juice Controller and slurmdbd (through its own
# slurm.conf's AccountingStorageHost, for sacctmgr) only over that network, at 10.231.1.1, where socat relays to
# the bed's services (they listen on 127.0.0.1 only). Each has its own settings directory (the secrets copied with
# their owners and modes), runs as SlurmUser and serves the hook API at its address; the hook certificate names
# both (JUICE_HOOK_SANS), and the hooks on the slurmctld host call both over TLS (JUICE_HOOK_URL, a list). Checked:
#   - inside a replica's namespace the bed's loopback services are out of reach (it is a host of its own);
#   - each replica answers /readyz over TLS at its address; a certificate made without JUICE_HOOK_SANS is refused
#     there (the hooks' check, curl's here);
#   - juice-slurm status names the leader; an srun gets its GPUs through the replicas;
#   - the leader killed (SIGKILL: no lease given back), the other takes the lease and the next srun gets its GPUs;
#   - the killed one started again, and the leader killed while an srun's prolog waits: the srun gets its GPUs,
#     its job not requeued; nothing leaks.
# The test bed's own controller is stopped for the run, and the bed's juice-config.sh put back, the namespaces,
# bridge and relays removed and the bed's services started again at the end, whatever happened. Run by make
# test-replicas (under the host lock, after wire and services).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
env_file=${JUICE_TESTBED_ENV:-/var/tmp/juice-testbed/env}
# shellcheck disable=SC1090
. "$env_file"
# shellcheck source=../lib/replica.sh
. "$(dirname "$0")/../lib/replica.sh"
# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
TB=$JUICE_TESTBED_DIR
BIN=${JUICE_SLURM_BIN:-$REPO/bin/juice-slurm}
SLURM_USER=$JUICE_TESTBED_SLURM_USER
CONFIG_SH=/etc/juice-slurm/juice-config.sh
HOST=10.231.1.1 A=10.231.1.2 B=10.231.1.3 PORT=7171 BR=jsr-br
W=$TB/replicas
log() { printf '[replicas %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
[ -n "${JUICE_TESTBED_DEMO_DB_URL:-}" ] || fail "$env_file has no JUICE_TESTBED_DEMO_DB_URL: run test/testbed.sh services first"
[ -s "$CONFIG_SH" ] || fail "$CONFIG_SH is missing: run test/testbed.sh wire first"

pids=()
restore() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
	[ -s "$W/juice-config.sh.bed" ] && mv "$W/juice-config.sh.bed" "$CONFIG_SH"
	net_down
	bash "$REPO/test/testbed.sh" services >/dev/null 2>&1 || log "the test bed's services did not start again"
	[ $rc = 0 ] || { log "replica logs:"; tail -n 20 "$W"/ctl*.log >&2 || true; }
	exit $rc
}
trap restore EXIT

# net_down removes what net_up made (also what an earlier run killed mid-way left).
net_down() {
	netns_down $BR jsr-ctl1 jsr-ctl2
	ip addr del $A/32 dev lo 2>/dev/null || true # where replicas were before they had namespaces
	ip addr del $B/32 dev lo 2>/dev/null || true
	pkill -f "^socat TCP-LISTEN:[0-9]*,bind=$HOST," 2>/dev/null || true
}
# net_up NAME ADDRESS...: the bridge (the slurmctld host's side, $HOST) with the relays to the bed's services, and
# for each NAME a namespace jsr-NAME whose one veth on the bridge has ADDRESS.
net_up() {
	netns_bridge $BR $HOST
	while (($#)); do
		netns_host jsr-$1 $BR "$2"
		shift 2
	done
	local port
	for port in "${PG_PORT}" "${REST_PORT}" 7070 "${DBD_PORT}"; do
		setsid socat "TCP-LISTEN:$port,bind=$HOST,fork,reuseaddr" "TCP:127.0.0.1:$port" </dev/null >/dev/null 2>&1 &
		pids+=($!)
	done
	for port in "${PG_PORT}" "${REST_PORT}" 7070 "${DBD_PORT}"; do
		for i in $(seq 1 50); do
			ip netns exec jsr-ctl1 bash -c "</dev/tcp/$HOST/$port" 2>/dev/null && break
			[ "$i" = 50 ] && fail "the relay of port $port at $HOST is not reachable from namespace jsr-ctl1"
			sleep 0.1
		done
	done
}

# The bed's controller steps aside: the replicas are the only controllers of the cluster.
if [ -s "$TB/run/juice-controller.pid" ]; then
	kill "$(cat "$TB/run/juice-controller.pid")" 2>/dev/null || true
	while kill -0 "$(cat "$TB/run/juice-controller.pid")" 2>/dev/null; do sleep 0.1; done
fi
rm -rf "$W" && install -d -m 0755 "$W"
cp -p "$CONFIG_SH" "$W/juice-config.sh.bed"
command -v socat >/dev/null || fail "socat is missing (test/testbed.sh up installs it)"
PG_PORT=$(sed -n 's#.*@127\.0\.0\.1:\([0-9]*\)/.*#\1#p' <<<"$JUICE_TESTBED_DEMO_DB_URL")
REST_PORT=${JUICE_TESTBED_SLURMRESTD_URL##*:}
DBD_PORT=${JUICE_TESTBED_SLURMDBD##*:}
[ -n "$PG_PORT" ] && [ -n "$REST_PORT" ] && [ -n "$DBD_PORT" ] || fail "no PostgreSQL, slurmrestd or slurmdbd port in $env_file"
net_down
net_up ctl1 $A ctl2 $B
# A host of its own: the bed's services, on 127.0.0.1 only, are out of a replica's reach but through the network.
if ip netns exec jsr-ctl1 bash -c "</dev/tcp/127.0.0.1/$PG_PORT" 2>/dev/null; then
	fail "PostgreSQL at 127.0.0.1:$PG_PORT is reachable inside namespace jsr-ctl1: the replica would not be on a host of its own"
fi
log "namespaces jsr-ctl1 ($A) and jsr-ctl2 ($B) on bridge $BR ($HOST, relays to PostgreSQL :$PG_PORT, slurmrestd :$REST_PORT, juice-sim :7070, slurmdbd :$DBD_PORT)"
# The replicas' hosts' slurm.conf (for sacctmgr, which writes the pools' licenses): slurmdbd on the slurmctld host.
sed "s/^AccountingStorageHost=.*/AccountingStorageHost=$HOST/" "$JUICE_TESTBED_SLURM_CONF" >"$W/slurm.conf"
grep -q "^AccountingStorageHost=$HOST\$" "$W/slurm.conf" || fail "$JUICE_TESTBED_SLURM_CONF names no AccountingStorageHost"
chmod 0644 "$W/slurm.conf"

# Step 1: the certificate names every replica (made where the secrets are, /etc/juice-slurm on the slurmctld host;
# here a directory of the test's own, with the bed's cluster key and hook secret).
src=$W/slurmctld-host
install -d -m 0750 -o root -g "$SLURM_USER" "$src"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" /etc/juice-slurm/cluster.key /etc/juice-slurm/hook.secret "$src/"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" "$TB/demo/juice.token" "$src/juice.token"
install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" "$JUICE_TESTBED_TOKEN_FILE" "$src/slurm.token"
pgpass=$(sed -n 's/.*passfile=\([^&]*\).*/\1/p' <<<"$JUICE_TESTBED_DEMO_DB_URL")
sed "s/^127\.0\.0\.1:/$HOST:/" "$pgpass" | install -m 0600 -o "$SLURM_USER" -g "$SLURM_USER" /dev/stdin "$src/pgpass"
JUICE_HOOK_SANS="IP:$A,IP:$B" sh "$REPO/deploy/make-hook-cert.sh" "$src" "$SLURM_USER" >&2
openssl x509 -in "$src/hook.crt" -noout -ext subjectAltName | grep -q "IP Address:$B" || fail "hook.crt does not name $B"
# A certificate without JUICE_HOOK_SANS, to show that the names matter.
bare=$W/bare-cert && install -d -m 0700 "$bare"
sh "$REPO/deploy/make-hook-cert.sh" "$bare" root >/dev/null

# Steps 2 to 4: each replica's own directory, the secrets copied keeping owners and modes, its settings file.
start_replica() { # start_replica NAME ADDRESS
	local name=$1 addr=$2 etc=$W/$1
	install -d -m 0750 -o root -g "$SLURM_USER" "$etc"
	tar -C "$src" -cpf - cluster.key hook.secret hook.crt hook.key juice.token slurm.token pgpass | tar -C "$etc" --same-owner -xpf -
	{
		replica_settings "$etc" "$addr" "$JUICE_TESTBED_DEMO_DB_URL" $HOST
		# The pools' licenses, as the bed's controller keeps them: sacctmgr reaches slurmdbd over the network.
		[ "${JUICE_TESTBED_ACCOUNTING:-0}" != 1 ] || printf 'licenses = on\ncaps-qos = %s\n' "$JUICE_TESTBED_CAPS_QOS"
	} >"$etc/juice-slurm.conf"
	chown root:"$SLURM_USER" "$etc/juice-slurm.conf" && chmod 0640 "$etc/juice-slurm.conf"
	# ip netns exec and setsid exec (no fork): $! is the controller's pid.
	SLURM_CONF=$W/slurm.conf ip netns exec jsr-$name setsid setpriv --reuid "$SLURM_USER" --regid "$SLURM_USER" --init-groups \
		"$BIN" controller --config "$etc/juice-slurm.conf" </dev/null >"$W/ctl-$name.log" 2>&1 &
	pids+=($!)
	eval "pid_$name=$!"
}
ready() { curl -fsS --max-time 2 --cacert "$src/hook.crt" "https://$1:$PORT/readyz" >/dev/null 2>&1; }
wait_ready() { # wait_ready ADDRESS
	local i
	for i in $(seq 1 60); do
		ready "$1" && return 0
		sleep 1
	done
	fail "the replica at $1 is not ready after 60 s"
}
start_replica ctl1 $A
wait_ready $A
start_replica ctl2 $B
wait_ready $B
log "two replicas ready, as $SLURM_USER, at https://$A:$PORT and https://$B:$PORT"
# Step 7's check, and what a certificate without the names gets.
if out=$(curl -sS --max-time 5 --cacert "$bare/hook.crt" "https://$A:$PORT/readyz" 2>&1); then
	fail "a certificate that does not name $A was taken: $out"
fi
grep -qi "certificate\|SSL" <<<"$out" || fail "curl with the certificate that lacks $A said: $out"

status() { "$BIN" status --config "$W/ctl1/juice-slurm.conf"; }
leader=""
for i in $(seq 1 30); do
	leader=$(status | sed -n 's/^leader: \([^ ]*\) (lease until.*/\1/p')
	[ -n "$leader" ] && break
	sleep 1
done
[ -n "$leader" ] || fail "juice-slurm status names no leader: $(status | head -3)"
log "leader: $leader"
# The leader's license sync read slurmdbd from its namespace (sacctmgr with the replica host's slurm.conf) and
# reports no failure.
if [ "${JUICE_TESTBED_ACCOUNTING:-0}" = 1 ]; then
	case $leader in *:"$pid_ctl1") at=$A ;; *) at=$B ;; esac
	for i in $(seq 1 30); do
		curl -fsS --max-time 2 "http://$at:8171/metrics" 2>/dev/null | grep -q '^juice_slurm_license_count{pool="test"}' && break
		[ "$i" = 30 ] && fail "the leader at $at exports no juice_slurm_license_count for pool test after 30 s: its license sync never read slurmdbd"
		sleep 1
	done
	body=$(curl -sS --max-time 2 --cacert "$src/hook.crt" "https://$at:$PORT/readyz")
	[ "$body" = ok ] || fail "the leader's /readyz reports: $body"
	log "the leader's license sync reads slurmdbd through $HOST"
fi

# Step 6: the hooks on the slurmctld host call both replicas, and pin the certificate that names them.
{
	grep -v '^JUICE_HOOK_URL=\|^JUICE_HOOK_CA=' "$W/juice-config.sh.bed"
	echo "JUICE_HOOK_URL=https://$A:$PORT,https://$B:$PORT"
	echo "JUICE_HOOK_CA=$src/hook.crt"
} >"$W/juice-config.sh.new"
chmod 0644 "$W/juice-config.sh.new" && mv "$W/juice-config.sh.new" "$CONFIG_SH"
chmod 0755 "$src" # the prolog (SlurmUser) reads hook.crt and hook.secret there, as in /etc/juice-slurm

job() { # job NAME: an srun with 2 GPUs from pool test; prints the session id the task saw
	local out
	out=$(timeout 120 srun --job-name="$1" --juice-pool=test --juice-gpu-count=2 printenv JUICE_SESSION_ID 2>&1) ||
		fail "srun $1 failed: $out"
	grep -Eqx '[0-9a-f-]{36}' <<<"$out" || fail "srun $1 printed no session id: $out"
	echo "$out"
}
s1=$(job replicas-1)
log "srun through the replicas got session $s1"

# The leader dies without giving the lease back; the other replica takes it within lease-ttl and serves the next.
case $leader in
*:"$pid_ctl1") dead=$pid_ctl1 other=$A ;;
*:"$pid_ctl2") dead=$pid_ctl2 other=$B ;;
*) fail "the leader $leader is neither replica (pids $pid_ctl1, $pid_ctl2)" ;;
esac
kill -KILL "$dead"
log "killed the leader (pid $dead); the replica at $other goes on"
new=""
for i in $(seq 1 30); do
	new=$(status | sed -n 's/^leader: \([^ ]*\) (lease until.*/\1/p')
	[ -n "$new" ] && [ "$new" != "$leader" ] && break
	sleep 1
done
[ -n "$new" ] && [ "$new" != "$leader" ] || fail "no replica took the lease from $leader within 30 s (lease-ttl 5 s): ${new:-none}"
log "leader now: $new"
# The hooks try the dead replica first when it was the first of the list: refused, passed over.
s2=$(job replicas-2)
log "srun after the leader died got session $s2"
[ "$s1" != "$s2" ] || fail "two jobs got the same session $s1"

# A replica killed while a prolog waits (issue 25 item 3): the killed one back first, then an srun, and the leader
# killed with -9 once slurmctld shows the job CONFIGURING (its prolog waiting for the session). The hook's call to
# it breaks; the hook calls again, the other replica takes the lease and serves the prolog, and the task gets its
# GPUs: the job is neither failed nor requeued.
case $dead in
"$pid_ctl1") start_replica ctl1 $A && wait_ready $A ;;
*) start_replica ctl2 $B && wait_ready $B ;;
esac
leader=$(status | sed -n 's/^leader: \([^ ]*\) (lease until.*/\1/p')
case $leader in
*:"$pid_ctl1") dead=$pid_ctl1 ;;
*:"$pid_ctl2") dead=$pid_ctl2 ;;
*) fail "the leader $leader is neither replica (pids $pid_ctl1, $pid_ctl2)" ;;
esac
out3=$W/replicas-3.out
(job replicas-3 >"$out3") &
srun_pid=$!
seen=""
for i in $(seq 1 200); do
	seen=$(squeue -h -n replicas-3 -o %T 2>/dev/null)
	[ "$seen" = CONFIGURING ] && break
	sleep 0.05
done
[ "$seen" = CONFIGURING ] || fail "srun replicas-3 was never seen CONFIGURING (last: ${seen:-gone})"
kill -KILL "$dead"
log "killed the leader (pid $dead) while job replicas-3's prolog waited"
wait "$srun_pid" || fail "srun replicas-3 failed after the leader was killed during its prolog: $(cat "$out3")"
s3=$(cat "$out3")
log "srun whose prolog outlived the leader got session $s3"
restarts=$(sacct -n -X -P --name replicas-3 -o restarts 2>/dev/null | tail -1 || true)
[ "${restarts:-0}" = 0 ] || fail "job replicas-3 was requeued $restarts times"
# Nothing leaks: every run's reservation is released once its job ended.
for i in $(seq 1 60); do
	open=$(status | awk '$1 == "test" {print $2 + $3 + $4 + $5 + $6}')
	[ "${open:-0}" = 0 ] && break
	sleep 1
done
[ "${open:-0}" = 0 ] || fail "reservations of pool test still open: $(status)"
log "PASS: two replicas in network namespaces of their own served the hooks, the second took over from the leader, and a prolog outlived the leader's death"
