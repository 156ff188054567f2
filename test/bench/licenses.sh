#!/usr/bin/env bash
# The pools as Slurm licenses (issue 23), on and off, beside plain Slurm, on the wired host test bed with the
# demo's settings (1 s polls; juice-sim's 500 ms tick, 1 s activation, 500 ms cancel) and the prolog's default wait
# (4 minutes, not the test bed's 15 s: with licenses off the jobs a full pool cannot serve wait in their prologs,
# and should not be requeued for the bed's short wait). Figures in test/results/bench-licenses.md. Run by make bench
# and make bench-licenses; about 15 minutes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p test/results
export JUICE_TESTBED_PROLOG_WAIT=240s
bash test/testbed.sh wire
bash test/testbed.sh services-restart
go run ./test/bench/cmd/juice-bench-slurm -p2-jobs 0 -p4-held 0 -licenses-array "${BENCH_ARRAY:-201}" \
	-licenses-burst "${BENCH_BURST:-30}" -licenses-rounds "${BENCH_LICENSE_ROUNDS:-3}" -poll "1 s" \
	-sim "500 ms tick, 1 s activation, 500 ms cancel; prolog wait 4 min" -out test/results/bench-licenses.md
