#!/usr/bin/env bash
# record.sh ENVFILE RELEASE VERSION...
#
# Records the slurmrestd replies the unit tests replay, from a running test bed, into
# testdata/replies/RELEASE-VERSION/*.json (the body, then a last line with the HTTP status), and the
# trimmed OpenAPI schemas into testdata/openapi/RELEASE-VERSION.json (checked against the wire types).
#   ./record.sh /var/tmp/juice-testbed/env 22.05 v0.0.38 v0.0.36
#   ./record.sh /var/tmp/juice-testbed/chroot-trixie/env 24.11 v0.0.42 v0.0.40
#   ./record.sh /var/tmp/juice-testbed/chroot-sid/env 26.05 v0.0.45 v0.0.42
# Listings are cut down to the job this script submitted, to keep the files small.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ENVFILE RELEASE VERSION..." >&2; exit 2; }
ENVFILE=$1 RELEASE=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

# shellcheck disable=SC1090
URL=$(sed -n 's/^JUICE_TESTBED_SLURMRESTD_URL=//p' "$ENVFILE")
USER_NAME=$(sed -n 's/^JUICE_TESTBED_SLURM_USER=//p' "$ENVFILE")
TOKEN=$(tr -d '[:space:]' <"$(sed -n 's/^JUICE_TESTBED_TOKEN_FILE=//p' "$ENVFILE")")
TOKEN=${TOKEN#SLURM_JWT=}
BADTOKEN=${TOKEN%????}AAAA
H=(-H "X-SLURM-USER-NAME: $USER_NAME" -H "Content-Type: application/json")

rec() { # file, curl args... : body + "\n" + status
	local f=$1
	shift
	curl -s -w '\n%{http_code}\n' "$@" >"$f"
}
only_job() { # file, id: keep only that job in a listing (body part)
	local f=$1 id=$2 status body
	status=$(tail -n1 "$f")
	body=$(head -n -1 "$f")
	if [ -n "$(echo "$body" | tr -d '[:space:]')" ]; then
		echo "$body" | jq --argjson id "$id" '.jobs |= map(select(.job_id == $id))' >"$f"
	else
		: >"$f"
	fi
	echo "$status" >>"$f"
}
wait_done() { # url
	for _ in $(seq 1 60); do
		st=$(curl -s -H "X-SLURM-USER-TOKEN: $TOKEN" "${H[@]}" "$1" | jq -r '.jobs[0].job_state | if type == "array" then .[0] else . end')
		case "$st" in COMPLETED | FAILED | CANCELLED | TIMEOUT) return 0 ;; esac
		sleep 1
	done
	echo "job did not finish: $1" >&2
	return 1
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
curl -sf -H "X-SLURM-USER-TOKEN: $TOKEN" "${H[@]}" "$URL/openapi/v3" >"$tmp"
(cd "$REPO" && "$GO" run ./slurmrest/internal/wire/wirecheck/trim-openapi -in "$tmp" -release "$RELEASE" \
	-versions "$(IFS=,; echo "$*")" -out "$HERE/openapi")

for V in "$@"; do
	D=$HERE/replies/$RELEASE-$V
	mkdir -p "$D"
	B=$URL/slurm/$V
	A=(-H "X-SLURM-USER-TOKEN: $TOKEN" "${H[@]}")
	BAD=(-H "X-SLURM-USER-TOKEN: $BADTOKEN" "${H[@]}")
	case $V in
	v0.0.3*)
		slash=""
		submit='{"script":"#!/bin/sh\nsleep 2\nexit 3\n","job":{"name":"rec","comment":"juice:rec","environment":{"PATH":"/bin:/usr/bin"},"current_working_directory":"/tmp","standard_output":"/dev/null","hold":true}}'
		badbody='{"admin_comment":"x"}' # unknown key before v0.0.39: a 200 with errors[]
		;;
	v0.0.40)
		slash=/
		submit='{"script":"#!/bin/sh\nsleep 2\nexit 3\n","job":{"name":"rec","comment":"juice:rec","environment":["PATH=/bin:/usr/bin"],"current_working_directory":"/tmp","standard_output":"/dev/null","hold":true}}'
		badbody='{"comment":12,"nonsense":{"x":1}}'
		;;
	*)
		slash=/
		submit='{"job":{"script":"#!/bin/sh\nsleep 2\nexit 3\n","name":"rec","comment":"juice:rec","environment":["PATH=/bin:/usr/bin"],"current_working_directory":"/tmp","standard_output":"/dev/null","hold":true}}'
		badbody='{"comment":12,"nonsense":{"x":1}}'
		;;
	esac
	rec "$D/ping.json" "${A[@]}" "$B/ping$slash"
	rec "$D/ping_badtoken.json" "${BAD[@]}" "$B/ping$slash"
	rec "$D/submit_held.json" "${A[@]}" -X POST "$B/job/submit" -d "$submit"
	ID=$(head -n -1 "$D/submit_held.json" | jq .job_id)
	rec "$D/job_held.json" "${A[@]}" "$B/job/$ID"
	rec "$D/update_badbody.json" "${A[@]}" -X POST "$B/job/$ID" -d "$badbody"
	rec "$D/update_release.json" "${A[@]}" -X POST "$B/job/$ID" -d '{"hold":false}'
	wait_done "$B/job/$ID"
	sleep 1
	rec "$D/job_failed.json" "${A[@]}" "$B/job/$ID"
	rec "$D/jobs.json" "${A[@]}" "$B/jobs$slash"
	only_job "$D/jobs.json" "$ID"
	ut=$(($(date +%s) + 5))
	[ "$V" = v0.0.40 ] || [ "$V" = v0.0.41 ] && ut=uts$ut
	rec "$D/jobs_unchanged.json" "${A[@]}" "$B/jobs$slash?update_time=$ut"
	only_job "$D/jobs_unchanged.json" "$ID"
	rec "$D/jobs_badtoken.json" "${BAD[@]}" "$B/jobs$slash"
	rec "$D/job_notfound.json" "${A[@]}" "$B/job/999999999"
	rec "$D/cancel_finished.json" "${A[@]}" -X DELETE "$B/job/$ID"
	if [ "$V" \> v0.0.44 ]; then
		RID=$(curl -s "${A[@]}" -X POST "$B/job/submit" -d "${submit/sleep 2\\nexit 3/sleep 300}" | jq .job_id)
		for _ in $(seq 1 30); do
			curl -s "${A[@]}" "$B/job/$RID" | jq -e '.jobs[0].job_state | index("RUNNING")' >/dev/null && break
			curl -s "${A[@]}" -X POST "$B/job/$RID" -d '{"hold":false}' >/dev/null
			sleep 1
		done
		rec "$D/requeue.json" "${A[@]}" "$B/job/$RID/requeue"
		sleep 1
		rec "$D/job_requeued.json" "${A[@]}" "$B/job/$RID"
		curl -s "${A[@]}" -X DELETE "$B/job/$RID" >/dev/null
	fi
	echo "recorded $D ($(du -sh "$D" | cut -f1))"
done
