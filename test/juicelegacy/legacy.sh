#!/usr/bin/env bash
# The legacy open-source Juice controller (2023, MIT) as a second counterparty in the test bed, with JWT
# validation on, our own JWT issuer and our agent emulator in place of GPU hosts.
#
#   test/juicelegacy/legacy.sh build    build the controller from a copy of the legacy source (cached) and our tools
#   test/juicelegacy/legacy.sh up       build, then start issuer, controller, pools and agent emulator; write the env file
#   test/juicelegacy/legacy.sh down     stop exactly what up started, by pid, and drop the database it created
#   test/juicelegacy/legacy.sh status   say what runs
#
# Everything lives under $JUICE_LEGACY_DIR (default /var/tmp/juice-testbed/legacy); the env file for the tests is
# $JUICE_LEGACY_DIR/env. The legacy module is built in its own directory: none of its dependencies enter our go.mod.
#
# Parameters (environment):
#   JUICE_LEGACY_PG_URL     admin URL of the PostgreSQL server (default: JUICE_TESTBED_PG_URL of the test bed's env
#                           file, else postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable); a password in it
#                           is passed on, never printed
#   JUICE_LEGACY_SRC        the legacy source (default: ../shared/third_party/juice-labs-legacy beside the repository)
#   JUICE_LEGACY_PORT       controller port (default 8480); JUICE_LEGACY_ISSUER_PORT (8481); JUICE_LEGACY_AGENTS_PORT (8482)
#   JUICE_LEGACY_POOLS      pools to create, comma-separated (default test,demo,small)
#   JUICE_LEGACY_AGENTS     agent emulator config JSON file (default: agents.json beside this script)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LEG=${JUICE_LEGACY_DIR:-/var/tmp/juice-testbed/legacy}
BIN=$LEG/bin
RUN=$LEG/run
LOG=$LEG/log
GO=${GO:-go}

log() { printf '[legacy %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

find_src() {
	local c
	for c in "${JUICE_LEGACY_SRC:-}" "$REPO/../shared/third_party/juice-labs-legacy" \
		"$REPO/../../shared/third_party/juice-labs-legacy"; do
		if [ -n "$c" ] && [ -f "$c/cmd/controller/main.go" ]; then (cd "$c" && pwd); return; fi
	done
	die "the legacy controller's source (cmd/controller/main.go) is in none of: ${JUICE_LEGACY_SRC:+$JUICE_LEGACY_SRC, }$REPO/../shared/third_party/juice-labs-legacy, $REPO/../../shared/third_party/juice-labs-legacy; a checkout outside the work tree needs JUICE_LEGACY_SRC=/path/to/juice-labs-legacy"
}

# build_controller: copy the legacy source into $LEG/src and build it there, unless the binary is newer than
# every file of the source.
build_controller() {
	local src out=$BIN/juice-legacy-controller start=$SECONDS
	src=$(find_src)
	mkdir -p "$BIN" "$LOG"
	if [ -x "$out" ] && [ -z "$(find "$src" -newer "$out" -print -quit)" ]; then
		log "controller: up to date ($out)"
		return
	fi
	command -v gcc >/dev/null || die "gcc is needed (go-sqlite3 is cgo)"
	log "controller: copying $src to $LEG/src"
	rm -rf "$LEG/src.new"
	cp -a "$src" "$LEG/src.new"
	chmod -R u+w "$LEG/src.new"
	rm -rf "$LEG/src"
	mv "$LEG/src.new" "$LEG/src"
	log "controller: building (its modules come from the Go module proxy; about a minute cold)"
	# GOWORK=off and GOFLAGS=-mod=readonly: its own go.mod/go.sum, never ours; CGO for go-sqlite3.
	(cd "$LEG/src" && GOWORK=off GOFLAGS='-mod=readonly -buildvcs=false' CGO_ENABLED=1 \
		"$GO" build -trimpath -o "$out.tmp" ./cmd/controller) >"$LOG/build.log" 2>&1 ||
		{ tail -20 "$LOG/build.log" >&2; die "controller build failed (log: $LOG/build.log)"; }
	mv "$out.tmp" "$out"
	log "controller: built in $((SECONDS - start))s"
}

# build_tools: our issuer and agent emulator (stdlib only), from the repository.
build_tools() {
	local start=$SECONDS
	mkdir -p "$BIN"
	(cd "$REPO" && "$GO" build -trimpath -o "$BIN/" ./test/juicelegacy/cmd/...) ||
		die "building juice-legacy-issuer and juice-legacy-agents failed"
	log "tools: built in $((SECONDS - start))s"
}

cmd_build() {
	build_controller
	build_tools
}

PORT=${JUICE_LEGACY_PORT:-8480}
ISSUER_PORT=${JUICE_LEGACY_ISSUER_PORT:-8481}
AGENTS_PORT=${JUICE_LEGACY_AGENTS_PORT:-8482}
AUDIENCE=${JUICE_LEGACY_AUDIENCE:-https://juice-legacy.test/api}
SUBJECT=${JUICE_LEGACY_SUBJECT:-juice-slurm-test}
DB=${JUICE_LEGACY_DB:-juice_legacy_tb}
POOLS=${JUICE_LEGACY_POOLS:-test,demo,small}
AGENTS_CONFIG=${JUICE_LEGACY_AGENTS:-$HERE/agents.json}
ENV_FILE=$LEG/env
TESTBED_ENV=${JUICE_TESTBED_ENV:-/var/tmp/juice-testbed/env}
URL=http://127.0.0.1:$PORT

# The PostgreSQL admin URL: a parameter (it will carry a password one day); exported for juice-legacy-db only.
pg_url() {
	local u=${JUICE_LEGACY_PG_URL:-}
	if [ -z "$u" ] && [ -r "$TESTBED_ENV" ]; then
		u=$(sed -n 's/^JUICE_TESTBED_PG_URL=//p' "$TESTBED_ENV" | tail -1)
	fi
	echo "${u:-postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable}"
}

# running PID: the process exists and is not a zombie (this machine's init may reap exited orphans late).
running() {
	kill -0 "$1" 2>/dev/null || return 1
	[ "$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# alive NAME: the pid in run/NAME.pid runs and is the program this script started under that name.
alive() {
	local f=$RUN/$1.pid pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	running "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "juice-legacy-$1" || return 1
}

# wait_for DESCRIPTION SECONDS COMMAND...: retry until the command succeeds, saying every 5 s that we still wait.
wait_for() {
	local what=$1 limit=$2 start=$SECONDS next=5
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start >= limit)); then
			die "$what: not ready after ${limit}s"
		fi
		if ((SECONDS - start >= next)); then
			log "still waiting for $what ($((SECONDS - start))s)"
			next=$((next + 5))
		fi
		sleep 0.2
	done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME PROGRAM ARGS...: run PROGRAM in its own session, logging to log/NAME.log; the pid goes to run/NAME.pid.
# It returns once the child has exec'd the program: until then /proc/PID/cmdline is this shell's, and alive() would
# call a program that is only starting "exited" (seen in CI: the agent emulator "exited" 0 s after its start).
start() {
	local name=$1 pid i
	shift
	setsid "$@" </dev/null >>"$LOG/$name.log" 2>&1 &
	pid=$!
	echo "$pid" >"$RUN/$name.pid"
	for ((i = 0; i < 100; i++)); do
		running "$pid" || return 0 # it exited: alive() says so, and the caller shows the log
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "juice-legacy-$name" && return 0
		sleep 0.05
	done
	die "$name: pid $pid has not started $1 after 5s"
}

# api METHOD PATH [BODY]: a request to the controller with the admin token; the token is read by curl from a
# header file (0600), never put on a command line.
api() {
	local args=(-sS -X "$1" -H @"$RUN/auth.header" --max-time 10)
	[ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' -d "$3")
	curl "${args[@]}" "$URL$2"
}

status_ok() { curl -fsS --max-time 2 "$URL/v1/status" | grep -q '"state":"Active"'; }

cmd_up() {
	local t0=$SECONDS t pg
	mkdir -p "$RUN" "$LOG"
	rm -f "$ENV_FILE"
	cmd_build
	pg=$(pg_url)
	export JUICE_LEGACY_PG_URL=$pg

	# 1. The issuer: keys, CA and server certificate, then HTTPS.
	"$BIN/juice-legacy-issuer" init -dir "$LEG/issuer" -listen "127.0.0.1:$ISSUER_PORT" >/dev/null
	if ! alive issuer; then
		port_free "$ISSUER_PORT" || die "127.0.0.1:$ISSUER_PORT is taken (by something this script did not start)"
		log "starting the JWT issuer on https://127.0.0.1:$ISSUER_PORT/"
		start issuer "$BIN/juice-legacy-issuer" serve -dir "$LEG/issuer" -listen "127.0.0.1:$ISSUER_PORT"
	fi
	wait_for "the issuer" 20 curl -fsS --cacert "$LEG/issuer/ca.pem" "https://127.0.0.1:$ISSUER_PORT/healthz"

	# 2. Tokens (0600): one for tests and pool creation, one for the agents.
	"$BIN/juice-legacy-issuer" mint -dir "$LEG/issuer" -aud "$AUDIENCE" -sub "$SUBJECT" -ttl 168h -out "$LEG/token"
	"$BIN/juice-legacy-issuer" mint -dir "$LEG/issuer" -aud "$AUDIENCE" -sub juice-legacy-agents -ttl 720h -out "$LEG/agents.token"
	(umask 077 && printf 'Authorization: Bearer %s\n' "$(cat "$LEG/token")" >"$RUN/auth.header")

	# 3. The database.
	"$BIN/juice-legacy-db" ping || die "PostgreSQL does not answer (JUICE_LEGACY_PG_URL; start the test bed: make testbed-up)"
	log "database $DB: $("$BIN/juice-legacy-db" create -db "$DB" -conn-file "$RUN/psql.conn")"
	echo "$DB" >"$RUN/db"

	# 4. The controller, validating JWTs against our issuer (SSL_CERT_FILE: our CA only).
	if ! alive controller; then
		port_free "$PORT" || die "127.0.0.1:$PORT is taken (by something this script did not start)"
		log "starting the legacy controller on $URL"
		t=$SECONDS
		# Its working directory is run/: it reads .env from there (there is none) and never writes controller.db
		# (storage is PostgreSQL).
		(cd "$RUN" && export SSL_CERT_FILE="$LEG/issuer/ca.pem" && start controller "$BIN/juice-legacy-controller" \
			-address "127.0.0.1:$PORT" -psql-connection-from-file "$RUN/psql.conn" \
			-enable-token-validation -auth-domain "127.0.0.1:$ISSUER_PORT" -auth-audience "$AUDIENCE")
		until status_ok; do
			if ! alive controller; then
				tail -3 "$LOG/controller.log" >&2
				die "the controller exited (log: $LOG/controller.log; a queued session it can never place makes it exit at every start: down, then up, starts afresh)"
			fi
			((SECONDS - t < 60)) || die "the controller: not answering after 60s (log: $LOG/controller.log)"
			sleep 0.2
		done
		log "controller: answering after $((SECONDS - t))s"
	fi

	# 5. Pools, through the API (PUT /v1/pool answers the id and grants the token's sub its permissions). Pool
	# names are not unique in the legacy controller: an existing pool of the name is reused.
	local pools_json="{" pools_env="" name id sep=""
	for name in ${POOLS//,/ }; do
		id=$("$BIN/juice-legacy-db" pool-id -db "$DB" -name "$name")
		if [ -z "$id" ]; then
			id=$(api PUT /v1/pool "{\"name\":\"$name\"}" | sed -n 's/^{"id":"\([0-9a-f-]\{36\}\)".*/\1/p')
			[ -n "$id" ] || die "PUT /v1/pool $name: no id in the answer (log: $LOG/controller.log)"
			log "pool $name: created $id"
		else
			log "pool $name: $id"
		fi
		pools_json+="$sep\"$name\":\"$id\""
		pools_env+="$sep$name=$id"
		sep=,
	done
	pools_json+="}"
	echo "$pools_json" >"$RUN/pools.json"

	# 6. The agent emulator.
	if ! alive agents; then
		port_free "$AGENTS_PORT" || die "127.0.0.1:$AGENTS_PORT is taken (by something this script did not start)"
		log "starting the agent emulator ($AGENTS_CONFIG), admin API on http://127.0.0.1:$AGENTS_PORT"
		start agents "$BIN/juice-legacy-agents" -config "$AGENTS_CONFIG" -pool-ids "$RUN/pools.json" \
			-controller "127.0.0.1:$PORT" -token-file "$LEG/agents.token" -admin "127.0.0.1:$AGENTS_PORT"
	fi
	local body start=$SECONDS
	until body=$(curl -fsS --max-time 2 "http://127.0.0.1:$AGENTS_PORT/healthz" 2>&1); do
		case $body in *"exited before registering"*)
			die "agent emulator: ${body#*: } (log: $LOG/agents.log)" ;;
		esac
		alive agents || die "the agent emulator exited (log: $LOG/agents.log)"
		((SECONDS - start < 30)) || die "the agents to register: not ready after 30s: $body"
		sleep 0.2
	done
	local n bad
	n=$(api GET /v1/agents | { grep -o '"state":"active"' || true; } | wc -l)
	log "controller lists $n active agents"
	# An emulator left from an earlier up may hold agents that stopped or exited (as a real agent would).
	bad=$(curl -fsS "http://127.0.0.1:$AGENTS_PORT/agents" | tr -d ' \n' | { grep -o '"name":"[^"]*","id":"[^"]*","state":"\(stopped\|exited\|closed\)"' || true; } | paste -sd' ')
	[ -z "$bad" ] || log "warning: emulated agents not running: ${bad//\"/} (curl -X POST http://127.0.0.1:$AGENTS_PORT/agents/NAME/resume, or .../restart for a new registration; or down and up)"

	# 7. The env file for the tests, last: its presence means everything above is up.
	cat >"$ENV_FILE.tmp" <<EOF
JUICE_LEGACY_DIR=$LEG
JUICE_LEGACY_URL=$URL
JUICE_LEGACY_TOKEN_FILE=$LEG/token
JUICE_LEGACY_AUDIENCE=$AUDIENCE
JUICE_LEGACY_SUBJECT=$SUBJECT
JUICE_LEGACY_ISSUER_URL=https://127.0.0.1:$ISSUER_PORT/
JUICE_LEGACY_ISSUER_DIR=$LEG/issuer
JUICE_LEGACY_CA_FILE=$LEG/issuer/ca.pem
JUICE_LEGACY_POOLS=$pools_env
JUICE_LEGACY_AGENTS_URL=http://127.0.0.1:$AGENTS_PORT
JUICE_LEGACY_DB=$DB
JUICE_LEGACY_CONTROLLER_PID_FILE=$RUN/controller.pid
JUICE_LEGACY_LOG_DIR=$LOG
EOF
	mv "$ENV_FILE.tmp" "$ENV_FILE"
	log "up in $((SECONDS - t0))s: controller $URL, issuer https://127.0.0.1:$ISSUER_PORT/, agents admin http://127.0.0.1:$AGENTS_PORT; env file $ENV_FILE"
}

# stop NAME: stop what run/NAME.pid names, if this script started it; SIGTERM, then SIGKILL after 10 s.
stop() {
	local f=$RUN/$1.pid pid i
	if ! alive "$1"; then rm -f "$f"; return 0; fi
	pid=$(cat "$f")
	log "stopping $1 (pid $pid)"
	kill "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		running "$pid" || break
		sleep 0.1
	done
	running "$pid" && kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

cmd_down() {
	rm -f "$ENV_FILE"
	stop agents # first: they send state "closed" to the controller
	stop controller
	stop issuer
	if [ -s "$RUN/db" ]; then
		JUICE_LEGACY_PG_URL=$(pg_url) "$BIN/juice-legacy-db" drop -db "$(cat "$RUN/db")" &&
			log "dropped database $(cat "$RUN/db")" && rm -f "$RUN/db"
	fi
	rm -f "$RUN/pools.json" "$RUN/psql.conn" "$RUN/auth.header"
}

cmd_status() {
	local n
	for n in issuer controller agents; do
		if alive "$n"; then echo "$n: running (pid $(cat "$RUN/$n.pid"))"; else echo "$n: stopped"; fi
	done
	[ -f "$ENV_FILE" ] && echo "env file: $ENV_FILE" || echo "env file: none (not up)"
	if alive controller && [ -f "$RUN/auth.header" ]; then
		echo "controller: $(curl -sS --max-time 2 "$URL/v1/status")"
		echo "agents listed active by the controller: $(api GET /v1/agents | { grep -o '"hostname":"[^"]*"' || true; } | cut -d'"' -f4 | paste -sd' ')"
	fi
	if alive agents; then
		curl -sS --max-time 2 "http://127.0.0.1:$AGENTS_PORT/agents" |
			sed -n 's/^    "\(name\|id\|state\|controllerState\)": \(.*\),$/\1=\2/p' | paste -sd' ' | sed 's/ name=/\nname=/g'
		echo
	fi
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
