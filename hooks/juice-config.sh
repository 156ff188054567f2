# juice-slurm hook settings, read by juice-prolog.sh and juice-epilog.sh on the slurmctld host.
# Install as /etc/juice-slurm/juice-config.sh (root-owned, mode 0644: it holds paths, not secrets).
# Each JUICE_* variable below but the two binaries and JUICE_LICENSES is also read by the hook itself (its flags,
# upper-cased).

# The hook binary the prolog and epilog exec (absolute: slurmctld runs the hooks with no PATH).
JUICE_HOOK_BIN=/usr/local/lib/juice-slurm/juice-slurm-hook
# The juice-slurm binary: the hooks run `juice-slurm hook prolog|epilog` (the same code, slower to start) only
# when JUICE_HOOK_BIN is not executable. (A config without JUICE_HOOK_BIN uses juice-slurm-hook beside it.)
JUICE_SLURM_BIN=/usr/local/lib/juice-slurm/juice-slurm
# The controller's hook API (any replica), or a comma-separated list of replicas tried in turn: one that is
# down or not ready (502/503/504) is passed over, a refusal (4xx) is final. https:// only.
JUICE_HOOK_URL=https://127.0.0.1:7171
# The certificate the hook API must prove itself with (deploy/make-hook-cert.sh): the secret goes nowhere else.
JUICE_HOOK_CA=/etc/juice-slurm/hook.crt
# The hook secret: a file owned by SlurmUser, mode 0600.
JUICE_HOOK_SECRET=/etc/juice-slurm/hook.secret
# The shared state directory where the prolog writes session files (the SPANK plugin's second argument).
JUICE_STATE_DIR=/var/spool/juice-slurm/sessions
# How long the prolog waits for a session before it fails (and Slurm requeues a batch job). Keep it well
# below srun's give-up time, (SuspendTimeout+ResumeTimeout)*5 = 450 s by default, and below
# PrologEpilogTimeout if you set one.
JUICE_PROLOG_WAIT=240s
# The hooks' own log (slurmctld 22.05 discards their output): progress of every wait, one line each.
JUICE_HOOK_LOG=/var/log/juice-slurm/hooks.log
# How long the epilog waits for the release to be confirmed.
JUICE_EPILOG_WAIT=15s
# Read by job_submit.lua (its module juice_submit.lua), at most once a second: on gives every Juice job its
# pool's Slurm license, juice_<pool>@juice:<GPUs> (a VRAM slice takes 1, a whole GPU's worth), so Slurm keeps a
# job the pool cannot serve PENDING (Reason=Licenses) instead of starting it to wait in the prolog. on needs
# accounting (slurmdbd) and the controller's `licenses = on` in juice-slurm.conf, which makes and keeps the
# licenses: a job asking a license slurmdbd does not serve is refused at submission. off (or no line) adds none.
JUICE_LICENSES=off

export JUICE_HOOK_URL JUICE_HOOK_CA JUICE_HOOK_LOG JUICE_HOOK_SECRET JUICE_STATE_DIR JUICE_PROLOG_WAIT JUICE_EPILOG_WAIT
