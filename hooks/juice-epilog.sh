#!/bin/sh
# EpilogSlurmctld for juice-slurm: tells the controller the run is finished (it releases the session) and
# removes the session file. Always exits 0.
. "${JUICE_CONFIG_SH:-/etc/juice-slurm/juice-config.sh}" || exit 0
exec "$JUICE_SLURM_BIN" hook epilog
