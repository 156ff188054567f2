#!/bin/sh
# PrologSlurmctld for juice-slurm: waits until the job's Juice session is ready and writes its sealed file into
# the shared state directory. Exits non-zero when the session cannot be had, so Slurm requeues a batch job.
# slurmctld runs it as SlurmUser with no PATH: every path here is absolute.
. "${JUICE_CONFIG_SH:-/etc/juice-slurm/juice-config.sh}" || exit 1
exec "$JUICE_SLURM_BIN" hook prolog
