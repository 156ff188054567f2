#!/usr/bin/env bash
# Run libFuzzer targets for SECONDS each (from spank/: make fuzz / fuzz-smoke).
#
#   fuzz/run.sh SECONDS TARGET...
#
# Each target's binary is build/fuzz/bin/TARGET. Its seeds are made fresh in
# build/fuzz/TARGET/seeds from the shared vectors (test/vectors), its corpus
# grows in build/fuzz/TARGET/corpus (kept between runs, never committed), its
# crashes land in build/fuzz/TARGET/ and its output in build/fuzz/TARGET/log.
# Prints per target the executions and whether anything was found; exits 1
# when a target found anything.
set -uo pipefail
cd "$(dirname "$0")/.."

secs=${1:?usage: fuzz/run.sh SECONDS TARGET...}
secs=${secs%s}  # "30s" as the Go targets take it
shift
VECTORS=${VECTORS_DIR:-../test/vectors}
# The key and session targets rewrite a temporary file per input: in memory.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
BUILD=${BUILD:-build}

seed_request() {  # every requests.tsv input, unescaped (\\ \t \n \xNN: printf %b)
	local line n=0
	while IFS= read -r line; do
		case $line in '#'*) continue ;; esac
		n=$((n + 1))
		printf '%b' "${line%%$'\t'*}" >"$1/row$n"
	done <"$VECTORS/requests.tsv"
}

seed_key() {
	cp "$VECTORS/session/key.hex" "$1/key.hex"
	cp "$VECTORS/session/key.hex.previous" "$1/key.hex.previous"
	head -c 64 "$VECTORS/session/key.hex" >"$1/key-no-newline"
	tr a-f A-F <"$VECTORS/session/key.hex" >"$1/key-upper"
	printf '0001020304\n' >"$1/key-short"
}

seed_args() {  # plausible plugstack.conf argument lines
	local n=0 line
	while IFS= read -r line; do
		n=$((n + 1))
		printf '%s' "$line" >"$1/line$n"
	done <<'LINES'
/usr/bin/juice /var/spool/juice-slurm/sessions key=/etc/juice-slurm/cluster.key max_gpus=8 max_vram=80GiB
/usr/bin/juice /var/spool/juice-slurm/sessions
/usr/local/bin/juice /srv/juice/state key=/etc/juice/k default_pool=test max_gpus=1024 max_vram=40960MiB cluster=juicetest
/usr/bin/juice /s max_vram=1.5 default_pool=Pool_1.prod-A cluster=c1
/usr/bin/juice /s max_vram=9223372036854775807B max_gpus=16
/usr/bin/juice /s key=/a key=/b
/usr/bin/juice /s colour=blue
juice spool max_gpus=0
LINES
}

seed_session() {  # "\0" + a file as is; "\1" + a plaintext the target seals
	local f name
	for f in "$VECTORS"/session/*.session "$BUILD"/own-vectors/*.session; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .session)
		{ printf '\000'; cat "$f"; } >"$1/raw-$(basename "$(dirname "$f")")-$name"
	done
	for f in "$VECTORS"/session/*.expect; do
		name=$(basename "$f" .expect)
		[ "$(sed -n 2p "$f")" = ok ] || continue
		{ printf '\001'; tail -n +3 "$f"; } >"$1/plain-$name"
	done
	printf '\001JUICE_SESSION_ID=x\nJUICE_REQUEST=juice:v1:pool=test,gpus=2\nJUICE_POOL=test\n' >"$1/plain-request"
	printf '\001JUICE_REQUEST=juice:v1:pool=test,gpus=1,vram=1610612736' >"$1/plain-request-vram"
}

artifacts() {  # what libFuzzer left in DIR, newest first
	ls -t "$1" | grep -E '^(crash|leak|timeout|oom|slow-unit)-'
}

failed=0
printf '%-14s %12s %6s  %s\n' target executions time result
for t in "$@"; do
	bin=$BUILD/fuzz/bin/$t dir=$BUILD/fuzz/$t
	[ -x "$bin" ] || { echo "fuzz: $bin is missing (make fuzz-build)"; exit 2; }
	rm -rf "$dir/seeds"
	mkdir -p "$dir/seeds" "$dir/corpus"
	"seed_${t#fuzz_}" "$dir/seeds"
	dict=()
	[ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
	before=$(artifacts "$dir" | wc -l)
	start=$SECONDS
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$dir/" "${dict[@]}" "$dir/corpus" "$dir/seeds" >"$dir/log" 2>&1
	rc=$?
	took=$((SECONDS - start))
	execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$dir/log" | tail -1)
	after=$(artifacts "$dir" | wc -l)
	if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
		failed=1
		result="FOUND something (exit $rc): see $dir/log and $dir/$(artifacts "$dir" | head -1)"
	else
		result="nothing found ($(find "$dir/corpus" -type f | wc -l) corpus inputs)"
	fi
	printf '%-14s %12s %5ss  %s\n' "$t" "${execs:-?}" "$took" "$result"
done
exit $failed
