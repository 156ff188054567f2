#!/usr/bin/env bash
# slurm-chroot.sh up|down|status|destroy SUITE
#
# A Slurm test bed inside a debootstrap chroot, used to test the slurmrest client against newer Slurm
# releases than the host's:
#   trixie -> Slurm 24.11 (REST v0.0.40..v0.0.42), ports 7817/7818/7820
#   sid    -> Slurm 26.05 (REST v0.0.42..v0.0.45), ports 8817/8818/8820
#
# `up` is idempotent: it builds the chroot once (about 80 s, 500 MB) and keeps it, (re)starts the daemons
# when they are not running and writes $ROOT/env (KEY=VALUE lines, same keys as the main test bed's env).
# `down` stops the chroot's daemons by pid (only processes whose root is this chroot) and unmounts.
# `destroy` = down + delete the chroot, refused while anything is still mounted inside it.
#
# The daemons share user names (and possibly uids) with the host's Slurm: never stop anything by name.
set -euo pipefail

BASE=${JUICE_TESTBED_DIR:-/var/tmp/juice-testbed}

usage() { echo "usage: $0 up|down|status|destroy trixie|sid" >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD=$1 SUITE=$2

case "$SUITE" in
trixie) PORT_BASE=7800 NODE=juicetrixie1 ;;
sid) PORT_BASE=8800 NODE=juicesid1 ;;
*) usage ;;
esac
CTLD_PORT=$((PORT_BASE + 17)) SLURMD_PORT=$((PORT_BASE + 18)) REST_PORT=$((PORT_BASE + 20))
ROOT=$BASE/chroot-$SUITE
RUNDIR=$ROOT/juice-run # pid files and logs of the daemons we started (host paths)
ENVFILE=$ROOT/env
CLUSTER=juice$SUITE
PARTITION=debug
REST_USER=juice        # the user the REST requests are made as (X-SLURM-USER-NAME); not SlurmUser:
                       # 24.11+ slurmrestd rejects SlurmUser's and root's tokens
RESTD_USER=juicerestd  # the uid slurmrestd runs as
PACKAGES="slurmctld slurmd slurm-client slurmrestd munge libslurm-dev gcc"

log() { echo "[slurm-chroot $SUITE] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"; }

# ---- mounts ---------------------------------------------------------------------------------------
MOUNTS="proc sys dev dev/pts" # mount order; unmounted in reverse

is_mounted() { # path
	awk -v p="$1" '$2 == p { found = 1 } END { exit !found }' /proc/mounts
}

any_mount_inside() {
	awk -v p="$ROOT/" 'index($2, p) == 1 { found = 1 } END { exit !found }' /proc/mounts
}

mount_all() {
	for m in $MOUNTS; do
		is_mounted "$ROOT/$m" && continue
		mkdir -p "$ROOT/$m"
		case $m in
		proc) mount -t proc proc "$ROOT/proc" ;;
		sys) mount -t sysfs sysfs "$ROOT/sys" ;;
		dev) mount --bind /dev "$ROOT/dev" ;;
		dev/pts) mount --bind /dev/pts "$ROOT/dev/pts" ;;
		esac
	done
}

umount_all() {
	local m
	for m in dev/pts dev sys proc; do
		if is_mounted "$ROOT/$m"; then
			umount "$ROOT/$m" 2>/dev/null || umount -l "$ROOT/$m"
		fi
	done
}

# ---- processes ------------------------------------------------------------------------------------
# Processes whose root directory is this chroot: only those can be ours.
chroot_pids() {
	local p r
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		[ "$r" = "$ROOT" ] && echo "${p#/proc/}"
	done
	return 0
}

pid_in_root() { # pid
	[ -n "$1" ] && [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "$ROOT" ]
}

daemon_running() { # name
	local f=$RUNDIR/$1.pid
	[ -f "$f" ] && pid_in_root "$(cat "$f")"
}

start_daemon() { # name, command... (run inside the chroot, kept in the foreground, our pid file)
	local name=$1
	shift
	if daemon_running "$name"; then
		log "$name already running (pid $(cat "$RUNDIR/$name.pid"))"
		return
	fi
	log "starting $name"
	setsid chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@" \
		>"$RUNDIR/$name.log" 2>&1 </dev/null &
	echo $! >"$RUNDIR/$name.pid"
}

stop_all() {
	local pids p i
	# Our daemons first (by their pid files), then anything else still living in the chroot (job steps).
	for name in slurmrestd slurmd slurmctld munged; do
		if daemon_running "$name"; then
			p=$(cat "$RUNDIR/$name.pid")
			log "stopping $name (pid $p)"
			kill -TERM "$p" 2>/dev/null || true
			for i in $(seq 1 50); do pid_in_root "$p" || break; sleep 0.1; done
			pid_in_root "$p" && kill -KILL "$p" 2>/dev/null || true
		fi
		rm -f "$RUNDIR/$name.pid"
	done
	pids=$(chroot_pids)
	if [ -n "$pids" ]; then
		log "stopping left-over processes in the chroot: $(echo $pids)"
		for p in $pids; do pid_in_root "$p" && kill -TERM "$p" 2>/dev/null || true; done
		sleep 1
		for p in $(chroot_pids); do pid_in_root "$p" && kill -KILL "$p" 2>/dev/null || true; done
	fi
}

# ---- build ----------------------------------------------------------------------------------------
# The Debian mirror the host's apt uses (never written into the repository).
host_mirror() {
	local m=""
	if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
		m=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' \
			/etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
	fi
	if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
		m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp):\/\// && $i ~ /\/debian\/?$/) { print $i; exit } }' \
			/etc/apt/sources.list | head -n1)
	fi
	[ -n "$m" ] || die "cannot find a Debian mirror in /etc/apt/sources.list*"
	echo "${m%/}"
}

build() {
	if [ -f "$ROOT/.juice-built" ]; then
		return
	fi
	if ! command -v debootstrap >/dev/null; then
		log "installing debootstrap on the host"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
	fi
	local mirror
	mirror=$(host_mirror)
	if [ -d "$ROOT" ] && [ ! -f "$ROOT/.juice-debootstrapped" ]; then
		any_mount_inside && die "a half-built $ROOT has mounts inside; run '$0 down $SUITE' first"
		log "removing a half-built chroot"
		rm -rf --one-file-system "$ROOT"
	fi
	if [ ! -f "$ROOT/.juice-debootstrapped" ]; then
		log "debootstrap --variant=minbase $SUITE (about 50 s)"
		mkdir -p "$BASE"
		debootstrap --variant=minbase "$SUITE" "$ROOT" "$mirror" >"$BASE/debootstrap-$SUITE.log" 2>&1 ||
			die "debootstrap failed, see $BASE/debootstrap-$SUITE.log"
		touch "$ROOT/.juice-debootstrapped"
	fi
	# The mirror is a frozen snapshot: its Release files have expired.
	printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' >"$ROOT/etc/apt/apt.conf.d/99juice-snapshot"
	printf 'APT::Install-Recommends "false";\n' >"$ROOT/etc/apt/apt.conf.d/99juice-norecommends"
	# Package scripts must not start daemons.
	printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
	chmod 755 "$ROOT/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
	mount_all
	log "installing $PACKAGES (about 30 s)"
	in_root apt-get update -qq >"$BASE/apt-$SUITE.log" 2>&1 || die "apt-get update failed, see $BASE/apt-$SUITE.log"
	local pkgs=$PACKAGES
	if in_root apt-cache show slurm-wlm-jwt-plugin >/dev/null 2>&1; then
		pkgs="$pkgs slurm-wlm-jwt-plugin"
	fi
	in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >>"$BASE/apt-$SUITE.log" 2>&1 ||
		die "apt-get install failed, see $BASE/apt-$SUITE.log"
	in_root apt-get clean
	touch "$ROOT/.juice-built"
	log "chroot built: $(du -sh --one-file-system "$ROOT" | cut -f1)"
}

# ---- configuration --------------------------------------------------------------------------------
configure() {
	mkdir -p "$RUNDIR"
	local etc=$ROOT/etc/slurm
	mkdir -p "$etc"
	for d in /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/munge /var/log/munge; do
		mkdir -p "$ROOT$d"
	done
	in_root chown -R slurm:slurm /var/lib/slurm /var/log/slurm
	in_root chown munge:munge /run/munge /var/log/munge
	if [ ! -s "$ROOT/etc/munge/munge.key" ]; then
		in_root setpriv --reuid=munge --regid=munge --clear-groups mungekey --create >/dev/null
	fi
	if [ ! -s "$etc/jwt.key" ]; then
		head -c 32 /dev/urandom >"$etc/jwt.key"
	fi
	in_root chown slurm:slurm /etc/slurm/jwt.key
	if ! in_root getent passwd $REST_USER >/dev/null; then
		in_root useradd --create-home --shell /bin/sh $REST_USER
	fi
	# slurmrestd refuses root and (since 23.x) SlurmUser: it runs as its own unprivileged user.
	if ! in_root getent passwd $RESTD_USER >/dev/null; then
		in_root useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin $RESTD_USER
	fi
	chmod 600 "$etc/jwt.key"

	# slurmd -C prints this machine's node line; keep the hardware words, set our own name and memory.
	local hw mem
	hw=$(in_root slurmd -C 2>/dev/null | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
	mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
	cat >"$etc/slurm.conf" <<EOF
# Generated by test/chroot/slurm-chroot.sh for the $SUITE test bed.
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt.key
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerParameters=sched_interval=2
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$(hostname -s) ${hw}RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
	printf 'CgroupPlugin=disabled\n' >"$etc/cgroup.conf"
}

# ---- start and wait -------------------------------------------------------------------------------
rest_versions() {
	case "$SUITE" in
	trixie) echo "openapi/slurmctld" ;;
	sid) echo "" ;;
	esac
}

wait_for() { # description, seconds, command...
	local what=$1 secs=$2 i
	shift 2
	for i in $(seq 1 $((secs * 2))); do
		if "$@" >/dev/null 2>&1; then
			log "$what: ready"
			return 0
		fi
		[ $((i % 10)) -eq 0 ] && log "waiting for $what ($((i / 2)) s)"
		sleep 0.5
	done
	die "$what not ready after $secs s (logs in $RUNDIR and $ROOT/var/log/slurm)"
}

node_idle() { in_root sinfo -h -n "$NODE" -o %t | grep -Eq '^(idle|mix|alloc)'; }
rest_up() { # any HTTP answer will do (/openapi/v3 wants a token on some releases)
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$REST_PORT/openapi/v3")" != 000 ]
}

start() {
	mount_all
	configure
	start_daemon munged setpriv --reuid=munge --regid=munge --clear-groups /usr/sbin/munged -F
	wait_for munged 20 in_root munge -n
	start_daemon slurmctld /usr/sbin/slurmctld -D
	wait_for slurmctld 30 in_root scontrol ping
	start_daemon slurmd /usr/sbin/slurmd -D -N "$NODE"
	wait_for "node $NODE" 60 node_idle
	local plugins rest_args=()
	plugins=$(rest_versions)
	[ -n "$plugins" ] && rest_args=(-s "$plugins")
	start_daemon slurmrestd SLURM_JWT=daemon setpriv --reuid=$RESTD_USER --regid=$RESTD_USER --clear-groups \
		/usr/sbin/slurmrestd "${rest_args[@]}" -a rest_auth/jwt "127.0.0.1:$REST_PORT"
	wait_for "slurmrestd on :$REST_PORT" 30 rest_up

	# A long-lived token for the REST user, in a file the tests may rewrite.
	local tok
	tok=$(in_root scontrol token username=$REST_USER lifespan=604800 | sed -n 's/^SLURM_JWT=//p')
	[ -n "$tok" ] || die "scontrol token failed"
	umask 077
	printf '%s\n' "$tok" >"$ROOT/token"
	local slurmv
	slurmv=$(in_root sinfo -V | awk '{print $2}')
	cat >"$ENVFILE.tmp" <<EOF
JUICE_TESTBED_KIND=chroot-$SUITE
JUICE_TESTBED_SLURM_VERSION=$slurmv
JUICE_TESTBED_SLURMRESTD_URL=http://127.0.0.1:$REST_PORT
JUICE_TESTBED_SLURM_USER=$REST_USER
JUICE_TESTBED_TOKEN_FILE=$ROOT/token
JUICE_TESTBED_CLUSTER=$CLUSTER
JUICE_TESTBED_PARTITION=$PARTITION
JUICE_TESTBED_NODE=$NODE
JUICE_TESTBED_CHROOT=$ROOT
EOF
	chmod 644 "$ENVFILE.tmp"
	mv "$ENVFILE.tmp" "$ENVFILE"
	log "Slurm $slurmv up: REST http://127.0.0.1:$REST_PORT, env file $ENVFILE"
}

status() {
	local rc=0
	for name in munged slurmctld slurmd slurmrestd; do
		if daemon_running "$name"; then
			echo "$name: running (pid $(cat "$RUNDIR/$name.pid"))"
		else
			echo "$name: stopped"
			rc=1
		fi
	done
	for m in $MOUNTS; do is_mounted "$ROOT/$m" && echo "mounted: $ROOT/$m"; done
	[ -f "$ENVFILE" ] && echo "env: $ENVFILE"
	return $rc
}

case "$CMD" in
up)
	build
	start
	;;
down)
	[ -d "$ROOT" ] || exit 0
	stop_all
	rm -f "$ENVFILE"
	umount_all
	log "down"
	;;
status)
	[ -d "$ROOT" ] || { echo "not built"; exit 1; }
	status
	;;
destroy)
	[ -d "$ROOT" ] || exit 0
	stop_all
	umount_all
	any_mount_inside && die "something is still mounted inside $ROOT; not deleting"
	rm -rf --one-file-system "$ROOT"
	log "destroyed"
	;;
*) usage ;;
esac
