/*
 * remote.h - the compute node side (slurmstepd, remote context, as root).
 */
#ifndef JUICE_REMOTE_H
#define JUICE_REMOTE_H

#include <slurm/spank.h>

#include "args.h"
#include "session.h"

/*
 * Does this step belong to a job that asked for Juice?  options_seen: an
 * option callback ran in remote context.  Returns 1 or 0.
 */
int juice_remote_wanted(spank_t sp, int options_seen);

/* Is this the extern step (no user tasks)?  1 or 0. */
int juice_remote_is_extern_step(spank_t sp);

/*
 * Find, verify and decrypt this job's session file (needs root: call it from
 * init_post_opt), then check its JUICE_REQUEST against the --juice-* values
 * given to this step (pool, gpus, vram: NULL = not given).  Returns 0 with
 * *env filled, or -1 with err saying why (without the "juice: " prefix).
 */
int juice_remote_load(spank_t sp, const struct juice_config *cfg,
		      const char *pool, const char *gpus, const char *vram,
		      struct juice_env *env, char *err, size_t errlen);

/*
 * Put the session variables and JUICE_BIN into the job environment
 * (spank_setenv, overwriting).  Returns 0, or -1 with err.
 */
int juice_remote_apply(spank_t sp, const struct juice_config *cfg,
		       const struct juice_env *env, char *err, size_t errlen);

#endif
