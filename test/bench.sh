#!/usr/bin/env bash
# make bench: every benchmark, figures printed and collected in test/results/bench.md. Nothing is asserted on time.
#   P1, P3, P5, P6 and micro-benchmarks: Go, PostgreSQL only (test/bench/cmd/juice-bench)
#   P2, P4: on the real Slurm cluster with the demo's simulator and controller (test/bench/cmd/juice-bench-slurm)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p test/results
go run ./test/bench/cmd/juice-bench -out test/results/bench-go.md
bash test/testbed.sh services
go run ./test/bench/cmd/juice-bench-slurm -out test/results/bench-slurm.md "$@"
{
	echo "# juice-slurm benchmark results"
	echo
	echo "Written by \`make bench\` ($(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores). Targets from issue 7: P1 p99 ≤ 20 ms,"
	echo "P2 ≤ 1.10, P3 ≥ 2,000/s, P4 one or two requests per poll, P5 ≤ 100 MiB, P6 p99 ≤ 10 ms without busy polling."
	echo
	cat test/results/bench-go.md
	echo
	cat test/results/bench-slurm.md
} >test/results/bench.md
echo "results: test/results/bench.md"
