#!/usr/bin/env bash
# test/pgpair.sh up|promote|kill-primary|status|down: a PostgreSQL 15 primary and its streaming standby on this
# host, for the failover test (make test-failover). Their own data directories, ports and sockets under
# $JUICE_PGPAIR_DIR (default /var/tmp/juice-testbed/pgpair), run by the postgres user, trust auth on 127.0.0.1
# only; the test bed's PostgreSQL (port 5433) is not touched.
#
#   up            primary A on 127.0.0.1:5441, standby B on 127.0.0.1:5442 (pg_basebackup -R, synchronous:
#                 a commit returns once B has it, as an HA site runs it; see docs/admin.md, PostgreSQL);
#                 writes $DIR/env (JUICE_PGPAIR_URL: the multi-host URL with target_session_attrs=read-write)
#   promote       A stops at once (immediate: as if its host died) and B becomes the primary (pg_ctl promote)
#   down          both stop (by their postmaster.pid) and $DIR is removed
set -euo pipefail
DIR=${JUICE_PGPAIR_DIR:-/var/tmp/juice-testbed/pgpair}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_USER=postgres
A_PORT=${JUICE_PGPAIR_PORT_A:-5441}
B_PORT=${JUICE_PGPAIR_PORT_B:-5442}

log() { printf '[pgpair %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
as_pg() { setpriv --reuid=$PG_USER --regid=$PG_USER --clear-groups "$@"; }
# Daemons must not inherit our descriptors (a caller's lock, a test's pipes).
start() { # start DATADIR LOG
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] 2>/dev/null && [ "$fd" -ne 255 ] && eval "exec $fd>&-"
		done
		as_pg $PGBIN/pg_ctl -D "$1" -l "$2" -w -t 60 start >/dev/null
	)
}
pid_of() { [ -s "$1/postmaster.pid" ] && head -1 "$1/postmaster.pid" || true; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

cmd_up() {
	[ -x $PGBIN/postgres ] || die "$PGBIN/postgres is missing (Debian: apt-get install postgresql-15)"
	if alive "$DIR/a" || alive "$DIR/b"; then cmd_down; fi
	rm -rf "$DIR" && install -d -o $PG_USER -g $PG_USER -m 0700 "$DIR"
	as_pg $PGBIN/initdb -D "$DIR/a" -U postgres --auth=trust -E UTF8 >/dev/null
	cat >>"$DIR/a/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $A_PORT
unix_socket_directories = '$DIR'
wal_level = replica
max_wal_senders = 4
hot_standby = on
synchronous_standby_names = '*'
fsync = off
full_page_writes = off
CONF
	printf 'host replication postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 trust\n' >>"$DIR/a/pg_hba.conf"
	start "$DIR/a" "$DIR/a.log"
	as_pg $PGBIN/pg_basebackup -h 127.0.0.1 -p $A_PORT -U postgres -D "$DIR/b" -R -X stream >/dev/null
	echo "port = $B_PORT" >>"$DIR/b/postgresql.auto.conf"
	start "$DIR/b" "$DIR/b.log"
	local i
	for i in $(seq 1 100); do
		[ "$(as_pg $PGBIN/psql -h 127.0.0.1 -p $A_PORT -U postgres -Atc "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ] && break
		sleep 0.1
	done
	[ "$i" != 100 ] || die "the standby is not streaming (see $DIR/b.log)"
	cat >"$DIR/env" <<ENV
JUICE_PGPAIR_DIR=$DIR
JUICE_PGPAIR_PRIMARY=127.0.0.1:$A_PORT
JUICE_PGPAIR_STANDBY=127.0.0.1:$B_PORT
JUICE_PGPAIR_URL=postgres://postgres@127.0.0.1:$A_PORT,127.0.0.1:$B_PORT/postgres?target_session_attrs=read-write&connect_timeout=2
ENV
	log "primary 127.0.0.1:$A_PORT, standby 127.0.0.1:$B_PORT streaming (synchronous); env in $DIR/env"
}

cmd_promote() {
	alive "$DIR/b" || die "the standby is not running"
	# The old primary goes first, as when its host dies; then B is promoted. B inherited A's settings, so it would
	# wait for a synchronous standby of its own for ever: alone, it commits locally (what Patroni does when the
	# last standby is gone, unless synchronous_mode_strict).
	if alive "$DIR/a"; then as_pg $PGBIN/pg_ctl -D "$DIR/a" -m immediate -w -t 30 stop >/dev/null; fi
	as_pg $PGBIN/pg_ctl -D "$DIR/b" -w -t 30 promote >/dev/null
	as_pg $PGBIN/psql -h 127.0.0.1 -p $B_PORT -U postgres -qAtc "ALTER SYSTEM SET synchronous_standby_names = ''" \
		-c "SELECT pg_reload_conf()" >/dev/null
	log "standby promoted; old primary stopped (immediate)"
}

cmd_down() {
	local d p
	for d in "$DIR/b" "$DIR/a"; do
		p=$(pid_of "$d")
		[ -n "$p" ] && kill -0 "$p" 2>/dev/null && as_pg $PGBIN/pg_ctl -D "$d" -m immediate -w -t 30 stop >/dev/null || true
	done
	rm -rf "$DIR"
	log "down"
}

cmd_status() {
	local d
	for d in a b; do if alive "$DIR/$d"; then echo "$d: running (pid $(pid_of "$DIR/$d"))"; else echo "$d: stopped"; fi; done
}

case ${1:-} in
up) cmd_up ;;
promote) cmd_promote ;;
down) cmd_down ;;
status) cmd_status ;;
*) echo "usage: $0 up|promote|status|down" >&2; exit 2 ;;
esac
