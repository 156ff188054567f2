/*
 * remote.c - compute node (slurmstepd, remote context).
 *
 * The session file is read in init_post_opt, which slurmstepd runs as root
 * (user_init already runs with the job user's effective uid, and the key and
 * the session file are readable by root only).  The variables are kept in
 * memory and put into the job environment in user_init: spank_setenv there
 * changes the environment every task of the step on this node inherits.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SLURM_EXTERN_CONT in slurm.h: the same value in 22.05 to 26.05. */
#define JUICE_EXTERN_STEP 0xfffffffcU

/* Variables that say the job was submitted with --juice-* options. */
static const char *const wanted_env[] = {
	"SLURM_SPANK_JUICE_REQUEST",   /* spank_job_control_setenv copies */
	"SLURM_SPANK_JUICE_POOL",
	"SPANK_JUICE_REQUEST",
	"SPANK_JUICE_POOL",
	"_SLURM_SPANK_OPTION_juice_juice_pool",  /* options passed on */
	"_SLURM_SPANK_OPTION_juice_juice_gpu_count",
	"_SLURM_SPANK_OPTION_juice_juice_vram",
	NULL,
};

static int env_get(spank_t sp, const char *name, char *buf, int len)
{
	if (spank_getenv(sp, name, buf, len) != ESPANK_SUCCESS)
		return -1;
	return 0;
}

int juice_remote_wanted(spank_t sp, int options_seen)
{
	char buf[1100];
	int i;

	if (options_seen)
		return 1;
	for (i = 0; wanted_env[i]; i++)
		if (env_get(sp, wanted_env[i], buf, sizeof(buf)) == 0 &&
		    buf[0] != '\0') {
			slurm_debug("juice: %s is set: a Juice job",
				    wanted_env[i]);
			return 1;
		}
	return 0;
}

int juice_remote_is_extern_step(spank_t sp)
{
	uint32_t step = 0;

	if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return 0;
	return step == JUICE_EXTERN_STEP;
}

/* Strict decimal for the restart count from the environment. */
static int parse_count(const char *s, uint32_t *out)
{
	unsigned long long v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long long)(*s - '0');
		if (v > 1000000)
			return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/*
 * A lower bound for the run: the largest of slurmstepd's restart count and
 * SLURM_RESTART_COUNT in the job environment, 0 when neither.  Measured on
 * 22.05: S_SLURM_RESTART_COUNT gives 0 in every step, and the batch step of a
 * requeued job does not see SLURM_RESTART_COUNT at any SPANK callback (its
 * srun steps do).  juice_session_find() therefore takes the newest file at
 * or above this bound: runs only grow, so the newest file is this run's.
 */
static uint32_t restart_count(spank_t sp)
{
	uint32_t item = 0, env = 0;
	char buf[32];

	if (spank_get_item(sp, S_SLURM_RESTART_COUNT, &item) != ESPANK_SUCCESS)
		item = 0;
	if (env_get(sp, "SLURM_RESTART_COUNT", buf, sizeof(buf)) < 0 ||
	    parse_count(buf, &env) < 0)
		env = 0;
	return item > env ? item : env;
}

int juice_remote_load(spank_t sp, const struct juice_config *cfg,
		      const char *pool, const char *gpus, const char *vram,
		      struct juice_env *env, char *err, size_t errlen)
{
	struct juice_request req;
	struct juice_keys keys;
	char why[1024], path[PATH_MAX + 64], cluster[JUICE_CLUSTER_MAX + 1];
	char buf[128];
	uint32_t job_id = 0, run, found_run = 0;
	struct juice_state_id sid;
	int rc;

	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		snprintf(err, errlen, "the job asked for Juice GPUs but its "
			 "job id is unknown; failing the task");
		return -1;
	}
	run = restart_count(sp);

	/* The cluster: plugstack cluster= first, else the job's. */
	cluster[0] = '\0';
	if (cfg->cluster[0])
		snprintf(cluster, sizeof(cluster), "%s", cfg->cluster);
	else if (env_get(sp, "SLURM_CLUSTER_NAME", buf, sizeof(buf)) == 0 &&
		 juice_cluster_valid(buf) == 0)
		memcpy(cluster, buf, strlen(buf) + 1);  /* valid: <= 63 */

	/* The keys (the current one and, during a rotation, the previous
	 * one) are on this node's own disk, root's: read them as root. */
	if (juice_keys_load(cfg->key_file, &keys, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "job %u asked for Juice GPUs but the "
			 "cluster key cannot be read: %s; failing the task",
			 job_id, why);
		return -1;
	}
	/* The state directory may be on NFS with root squashed: read it as
	 * its owner (juice_state_enter), and as root again right after. */
	if (juice_state_enter(cfg->state_dir, &sid, why, sizeof(why)) < 0) {
		juice_keys_clear(&keys);
		snprintf(err, errlen, "job %u asked for Juice GPUs but %s; "
			 "failing the task", job_id, why);
		return -1;
	}
	rc = juice_session_find(cfg->state_dir, job_id, run, path, sizeof(path),
				&found_run, why, sizeof(why));
	if (rc < 0)
		snprintf(err, errlen, "job %u asked for Juice GPUs but %s; "
			 "failing the task", job_id, why);
	else if ((rc = juice_session_open_owned(path, &keys, cluster, job_id,
						(long)found_run, sid.owner,
						env, why, sizeof(why))) < 0)
		snprintf(err, errlen, "job %u asked for Juice GPUs but its "
			 "session cannot be used: %s; failing the task",
			 job_id, why);
	juice_keys_clear(&keys);
	if (juice_state_leave(&sid, why, sizeof(why)) < 0) {
		/* Never go on with another identity than root's. */
		if (rc == 0)
			juice_env_clear(env);
		snprintf(err, errlen, "job %u: %s; failing the task", job_id,
			 why);
		return -1;
	}
	if (rc < 0)
		return -1;
	/* The sealed request is the job's: the step may not ask for another. */
	if (juice_session_check_request(env, pool, gpus, vram, &req, why,
					sizeof(why)) < 0) {
		snprintf(err, errlen, "job %u asked for Juice GPUs but its "
			 "session cannot be used: %s: %s; failing the task",
			 job_id, path, why);
		juice_env_clear(env);
		return -1;
	}
	slurm_info("juice: job %u run %u: session %s of reservation %s opened "
		   "under key %s (%zu variables)", job_id, found_run, path,
		   env->reservation[0] ? env->reservation : "(version 1)",
		   env->key_id, env->n);
	return 0;
}

int juice_remote_apply(spank_t sp, const struct juice_config *cfg,
		       const struct juice_env *env, char *err, size_t errlen)
{
	spank_err_t e;
	size_t i;

	for (i = 0; i < env->n; i++) {
		e = spank_setenv(sp, env->vars[i].name, env->vars[i].value, 1);
		if (e != ESPANK_SUCCESS) {
			snprintf(err, errlen, "job %u: cannot set %s in the "
				 "job environment: %s; failing the task",
				 env->job_id, env->vars[i].name,
				 spank_strerror(e));
			return -1;
		}
	}
	/* Last, so that the session cannot point it elsewhere. */
	e = spank_setenv(sp, "JUICE_BIN", cfg->juice_bin, 1);
	if (e != ESPANK_SUCCESS) {
		snprintf(err, errlen, "job %u: cannot set JUICE_BIN in the job "
			 "environment: %s; failing the task", env->job_id,
			 spank_strerror(e));
		return -1;
	}
	return 0;
}
