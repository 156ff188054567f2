#!/bin/bash
# Failover to a backup slurmctld during a chaos run (issue 25 item 2), on the 22.05 host test bed:
#
#   test/slurmfailover/failover.sh [chaos flags...]
#
# The bed gets two SlurmctldHost lines (JUICE_TESTBED_CTLD_HOSTS, test/testbed.sh): the primary, this host, at
# 10.231.5.1 (a bridge of this test's), and a backup named juicebackup at 10.231.5.2, in a network namespace this
# test makes (its own loopback, so its slurmctld can listen on the same port as the primary's) with a UTS namespace
# of its own (slurmctld finds its role by its host name). There it reaches the slurmds and slurmdbd, which the bed
# points at 127.0.0.1, through socat relays on its own loopback to the bed's, over the bridge; munge, the state
# save location and the hook socket are files it shares. Its pid and log files are its own (bind mounts in its
# mount namespace), slurm.conf the same file as the primary's. slurmctld, the slurmds and slurmrestd are restarted
# on that slurm.conf.
#
# Then the chaos run (test/chaos -slurm-failover, with the flags given): while reservations are made and prologs
# wait, the primary is stopped after the second kill of the controller, as its host shutting down would (the backup
# takes control SlurmctldTimeout later: 10 s), and started again after the fourth (it takes control back). The
# chaos run's checks hold: every job completes, no session leaked or doubled. (Not -9: a killed primary loses what
# it did since it last saved its state, and jobs with it; slurm.go says what was seen.)
#
# At the end, whatever happened: the backup stopped, the namespaces, bridge and relays removed, slurm.conf written
# back with one SlurmctldHost and the daemons restarted on it (test/testbed.sh up), the bed rewired. Run by make
# chaos-slurm-failover (under the host lock).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
env_file=${JUICE_TESTBED_ENV:-/var/tmp/juice-testbed/env}
# shellcheck disable=SC1090
. "$env_file"
# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
TB=$JUICE_TESTBED_DIR
RUN=$TB/run
LOG=$TB/log
GO=${GO:-go}
HOST=10.231.5.1 BACKUP=10.231.5.2 BR=jsr-cbr NS=jsr-ctld BACKUP_NAME=juicebackup
W=$TB/slurmfailover
log() { printf '[slurm-failover %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
command -v socat >/dev/null || fail "socat is missing (test/testbed.sh up installs it)"

backup_pid=""
relays=()
restore() {
	local rc=$?
	[ -z "$backup_pid" ] || { kill "$backup_pid" 2>/dev/null || true; while kill -0 "$backup_pid" 2>/dev/null; do sleep 0.1; done; }
	for p in "${relays[@]}"; do kill "$p" 2>/dev/null || true; done
	netns_down $BR $NS
	log "slurm.conf back to one slurmctld, the daemons restarted on it"
	{ env -u JUICE_TESTBED_CTLD_HOSTS bash "$REPO/test/testbed.sh" up && bash "$REPO/test/testbed.sh" wire; } >"$W/restore.log" 2>&1 ||
		{ log "the test bed did not come back: $(tail -5 "$W/restore.log")"; rc=1; }
	[ $rc = 0 ] || { log "the backup's log:"; tail -n 30 "$W/backup.log" >&2 || true; }
	exit $rc
}
trap restore EXIT
rm -rf "$W" && install -d -m 0755 "$W"

# The bridge (this host's side is the primary's address) and the backup's namespace.
netns_down $BR $NS
netns_bridge $BR $HOST
netns_host $NS $BR $BACKUP
# Relays on the backup's loopback to what the bed's slurm.conf names at 127.0.0.1: the slurmds and slurmdbd (each
# listening on every address of this host, the bridge's too).
ports=$(sed -n 's/^NodeName=.* Port=\([0-9]*\).*/\1/p' "$JUICE_TESTBED_SLURM_CONF")
dbd_port=${JUICE_TESTBED_SLURMDBD##*:}
[ -n "$ports" ] && [ -n "$dbd_port" ] || fail "no slurmd or slurmdbd port in $JUICE_TESTBED_SLURM_CONF and $env_file"
for port in $ports $dbd_port; do
	ip netns exec $NS setsid socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "TCP:$HOST:$port" </dev/null >/dev/null 2>&1 &
	relays+=($!)
done
log "namespace $NS ($BACKUP) on bridge $BR ($HOST); relays on its loopback for ports $(echo $ports $dbd_port)"

# slurm.conf with both slurmctlds; slurmctld, the slurmds and slurmrestd restarted on it.
export JUICE_TESTBED_CTLD_HOSTS="$(hostname -s)($HOST) $BACKUP_NAME($BACKUP)"
bash "$REPO/test/testbed.sh" up >"$W/up.log" 2>&1 || fail "test/testbed.sh up with two slurmctlds: $(tail -5 "$W/up.log")"
grep -q "^SlurmctldHost=$BACKUP_NAME($BACKUP)\$" "$JUICE_TESTBED_SLURM_CONF" || fail "slurm.conf names no backup slurmctld"
bash "$REPO/test/testbed.sh" wire >"$W/wire.log" 2>&1 || fail "test/testbed.sh wire: $(tail -5 "$W/wire.log")"

# The backup: its host name, its pid and log files; the same slurm.conf. (ip netns exec, unshare and exec keep
# the pid: $! is slurmctld's.)
: >"$W/backup.pid" && : >"$W/backup.log"
chown "$JUICE_TESTBED_SLURM_USER:" "$W/backup.pid" "$W/backup.log"
ip netns exec $NS unshare --uts sh -c "hostname $BACKUP_NAME && mount --bind $W/backup.pid $RUN/slurmctld.pid &&
	mount --bind $W/backup.log $LOG/slurm/slurmctld.log && exec slurmctld -D" </dev/null >"$W/backup.out" 2>&1 &
backup_pid=$!
for i in $(seq 1 30); do
	out=$(scontrol ping 2>&1 || true)
	grep -q "at $BACKUP_NAME is UP" <<<"$out" && break
	[ "$i" = 30 ] && fail "the backup slurmctld does not answer after 30 s: $out; $(tail -5 "$W/backup.out" "$W/backup.log")"
	kill -0 $backup_pid 2>/dev/null || fail "the backup slurmctld exited: $(tail -5 "$W/backup.out" "$W/backup.log")"
	sleep 1
done
log "$(tr '\n' ';' <<<"$out")"

# The chaos run, the primary stopped and started again in it.
cd "$REPO"
"$GO" run ./test/chaos -slurm-failover "$@"
log "PASS: the backup slurmctld took over from the stopped primary and gave control back, with reservations and prologs in flight"
