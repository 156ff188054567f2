#!/bin/bash
# Failover to a backup slurmctld during a chaos run (issue 25 item 2), on a release's test bed:
#
#   test/slurmfailover/failover.sh RELEASE [chaos flags...]     (RELEASE = 22.05 | 24.11 | 26.05)
#
# 22.05 is the host's test bed (test/testbed.sh), 24.11 and 26.05 the trixie and sid chroots
# (test/chroot/slurm-chroot.sh), each wired already. The bed gets two SlurmctldHost lines (JUICE_TESTBED_CTLD_HOSTS,
# which both scripts honour): the primary, this host, at 10.231.5.1 (a bridge of this test's), and a backup named
# juicebackup at 10.231.5.2, in a network namespace this test makes (its own loopback, so its slurmctld can listen
# on the same port as the primary's) with a UTS namespace of its own (slurmctld finds its role by its host name).
# There it reaches what the bed points at 127.0.0.1 through socat relays on its own loopback, over the bridge: the
# slurmds and slurmdbd (which listen on every address of this host), and on a chroot bed the controller's hook API
# (https://127.0.0.1:PORT in the hooks' config; the controller listens on 127.0.0.1 only, so a second relay on the
# bridge's address reaches it: the TLS session runs through both, the certificate's name is the URL's). munge, the
# state save location and, on the host, the hook socket are files it shares. Its pid and log files are its own (bind
# mounts in its mount namespace), slurm.conf the same file as the primary's. slurmctld, the slurmds and slurmrestd
# are restarted on that slurm.conf.
#
# Then the chaos run (test/chaos -slurm-failover, with the flags given): while reservations are made and prologs
# wait, the primary is stopped after the second kill of the controller, as its host shutting down would (the backup
# takes control SlurmctldTimeout later: 10 s), and started again after the fourth (it takes control back). The
# chaos run's checks hold: every job completes, no session leaked or doubled. (Not -9: a killed primary loses what
# it did since it last saved its state, and jobs with it; slurm.go says what was seen.)
#
# At the end, whatever happened: the backup stopped, the namespaces, bridge and relays removed, slurm.conf written
# back with one SlurmctldHost and the daemons restarted on it (the bed's up), the bed rewired. Run by make
# chaos-slurm-failover, under the bed's lock (the host's, or the chroot's).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}
RELEASE=${1:-}
shift || true
log() { printf '[slurm-failover %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
# load_env FILE: the bed's env file, KEY=VALUE lines (a value may hold spaces: the file is not shell).
load_env() {
	local k v
	[ -r "$1" ] || fail "no env file $1: the bed is not up"
	while IFS='=' read -r k v; do
		[[ $k =~ ^[A-Z_][A-Z0-9_]*$ ]] && printf -v "$k" '%s' "$v"
	done <"$1"
}
# What differs between the host's bed and a chroot's: its env file, slurm.conf, the files the backup must not
# share with the primary (the paths slurmctld sees), how the backup's slurmctld is run, how the bed comes up.
case $RELEASE in
22.05)
	env_file=$BASE/env
	load_env "$env_file"
	conf=$JUICE_TESTBED_SLURM_CONF
	pid_file=$JUICE_TESTBED_DIR/run/slurmctld.pid log_file=$JUICE_TESTBED_DIR/log/slurm/slurmctld.log
	ctld_cmd="slurmctld -D"
	bed() { bash "$REPO/test/testbed.sh" "$@"; }
	hook_port="" # the host bed's hooks use the controller's Unix socket, a file the backup shares
	slurm_uid=$(id -u "$JUICE_TESTBED_SLURM_USER")
	;;
24.11 | 26.05)
	suite=trixie
	[ "$RELEASE" = 26.05 ] && suite=sid
	env_file=$BASE/chroot-$suite/env
	load_env "$env_file"
	root=$JUICE_TESTBED_CHROOT
	conf=$root/etc/slurm/slurm.conf
	pid_file=$root/run/slurmctld.pid log_file=$root/var/log/slurm/slurmctld.log
	ctld_cmd="chroot $root /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 /usr/sbin/slurmctld -D"
	bed() { bash "$REPO/test/chroot/slurm-chroot.sh" "$1" "$suite"; }
	hook_port=$JUICE_TESTBED_HOOK_PORT
	slurm_uid=$(chroot "$root" id -u "$JUICE_TESTBED_SLURM_USER") # the chroot's own, maybe not the host's
	;;
*) fail "usage: $0 22.05|24.11|26.05 [chaos flags...]" ;;
esac
export JUICE_TESTBED_ENV=$env_file
# scontrol as the bed's clients run it: the env file's command prefix (none on the host).
scontrol() { if [ -n "${JUICE_TESTBED_EXEC:-}" ]; then $JUICE_TESTBED_EXEC scontrol "$@"; else command scontrol "$@"; fi; }
# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
GO=${GO:-go}
HOST=10.231.5.1 BACKUP=10.231.5.2 BR=jsr-cbr NS=jsr-ctld BACKUP_NAME=juicebackup
W=$JUICE_TESTBED_DIR/slurmfailover
command -v socat >/dev/null || fail "socat is missing (test/testbed.sh up installs it)"

backup_pid=""
relays=()
restore() {
	local rc=$?
	[ -z "$backup_pid" ] || { kill "$backup_pid" 2>/dev/null || true; while kill -0 "$backup_pid" 2>/dev/null; do sleep 0.1; done; }
	for p in "${relays[@]}"; do kill "$p" 2>/dev/null || true; done
	netns_down $BR $NS
	log "slurm.conf back to one slurmctld, the daemons restarted on it"
	{ (unset JUICE_TESTBED_CTLD_HOSTS && bed up && bed wire); } >"$W/restore.log" 2>&1 ||
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
ports=$(sed -n 's/^NodeName=.* Port=\([0-9]*\).*/\1/p' "$conf")
dbd_port=${JUICE_TESTBED_SLURMDBD##*:}
[ -n "$ports" ] && [ -n "$dbd_port" ] || fail "no slurmd or slurmdbd port in $conf and $env_file"
for port in $ports $dbd_port $hook_port; do
	ip netns exec $NS setsid socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "TCP:$HOST:$port" </dev/null >/dev/null 2>&1 &
	relays+=($!)
done
if [ -n "$hook_port" ]; then
	setsid socat "TCP-LISTEN:$hook_port,bind=$HOST,fork,reuseaddr" "TCP:127.0.0.1:$hook_port" </dev/null >/dev/null 2>&1 &
	relays+=($!)
fi
log "Slurm $RELEASE: namespace $NS ($BACKUP) on bridge $BR ($HOST); relays on its loopback for ports $(echo $ports $dbd_port $hook_port)"

# slurm.conf with both slurmctlds; slurmctld, the slurmds and slurmrestd restarted on it.
export JUICE_TESTBED_CTLD_HOSTS="$(hostname -s)($HOST) $BACKUP_NAME($BACKUP)"
bed up >"$W/up.log" 2>&1 || fail "the bed's up with two slurmctlds: $(tail -5 "$W/up.log")"
grep -q "^SlurmctldHost=$BACKUP_NAME($BACKUP)\$" "$conf" || fail "slurm.conf names no backup slurmctld"
bed wire >"$W/wire.log" 2>&1 || fail "the bed's wire: $(tail -5 "$W/wire.log")"

# The backup: its host name, its pid and log files; the same slurm.conf. (ip netns exec, unshare and exec keep
# the pid: $! is slurmctld's.)
: >"$W/backup.pid" && : >"$W/backup.log"
chown "$slurm_uid" "$W/backup.pid" "$W/backup.log"
ip netns exec $NS unshare --uts sh -c "hostname $BACKUP_NAME && mount --bind $W/backup.pid $pid_file &&
	mount --bind $W/backup.log $log_file && exec $ctld_cmd" </dev/null >"$W/backup.out" 2>&1 &
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
log "PASS (Slurm $RELEASE): the backup slurmctld took over from the stopped primary and gave control back, with reservations and prologs in flight"
