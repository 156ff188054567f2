/*
 * juice.c - the juice SPANK plugin: registration, option callbacks and the
 * callbacks of each context.
 *
 *   srun (local), sbatch/salloc (allocator): validate the --juice-* options
 *     and put the canonical request into the job control environment
 *     (JUICE_REQUEST, JUICE_POOL, JUICE_GPU_COUNT, JUICE_VRAM), which lands
 *     in the job's spank_job_env for job_submit.lua and PrologSlurmctld.
 *   slurmstepd (remote): open this job's session file and give the tasks
 *     its JUICE_* variables and JUICE_BIN.
 *
 * Every callback is idempotent: slurmstepd calls the option callbacks twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "args.h"
#include "remote.h"
#include "session.h"
#include "validate.h"

/* The build's version (Makefile: git describe, or VERSION=). */
#ifndef JUICE_VERSION
#define JUICE_VERSION "unknown"
#endif

SPANK_PLUGIN(juice, 1);

static struct juice_config cfg;
static int cfg_loaded;

/* Raw option values as given (NULL = not given); the last one given wins. */
static char *opt_val[4];     /* indexed by enum juice_opt */
static int remote_options_seen;

static struct juice_env session;
static int session_loaded;   /* remote: session read in init_post_opt */
static int juice_wanted;     /* remote: this step belongs to a Juice job */
static char session_error[1024]; /* remote: why the session is unusable */

static char usage_pool[256], usage_gpus[256], usage_vram[256];

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option options[] = {
	{ "juice-pool", "NAME", usage_pool, 1, JUICE_OPT_POOL, opt_cb },
	{ "juice-gpu-count", "N", usage_gpus, 1, JUICE_OPT_GPUS, opt_cb },
	{ "juice-vram", "SIZE", usage_vram, 1, JUICE_OPT_VRAM, opt_cb },
	SPANK_OPTIONS_TABLE_END
};

static int opt_cb(int val, const char *optarg, int remote)
{
	char err[512];
	unsigned gpus;
	uint64_t vram;
	char *copy;
	int rc = 0;

	if (val < JUICE_OPT_POOL || val > JUICE_OPT_VRAM)
		return -1;
	if (!optarg)
		optarg = "";
	copy = strdup(optarg);
	if (!copy) {
		slurm_error("juice: out of memory");
		return -1;
	}
	free(opt_val[val]);
	opt_val[val] = copy;

	/*
	 * slurmstepd: note that the job asked for Juice.  The values were
	 * validated at submission; the session file decides what the tasks
	 * get, and init_post_opt refuses a session whose request disagrees
	 * with a value given here.
	 */
	if (remote) {
		remote_options_seen = 1;
		return 0;
	}
	switch (val) {
	case JUICE_OPT_POOL:
		rc = juice_check_pool(optarg, err, sizeof(err));
		break;
	case JUICE_OPT_GPUS:
		rc = juice_check_gpu_count(optarg, cfg.limits.max_gpus, &gpus,
					   err, sizeof(err));
		break;
	case JUICE_OPT_VRAM:
		rc = juice_check_vram(optarg, cfg.limits.max_vram, &vram, err,
				      sizeof(err));
		break;
	}
	if (rc < 0)
		slurm_error("juice: %s", err);
	return rc < 0 ? -1 : 0;
}

static int register_options(spank_t sp)
{
	char max[32];
	int i;

	juice_format_size(cfg.limits.max_vram, max, sizeof(max));
	if (cfg.limits.default_pool[0])
		snprintf(usage_pool, sizeof(usage_pool),
			 "Attach remote GPUs from the Juice pool NAME "
			 "(default pool: %s)", cfg.limits.default_pool);
	else
		snprintf(usage_pool, sizeof(usage_pool),
			 "Attach remote GPUs from the Juice pool NAME");
	snprintf(usage_gpus, sizeof(usage_gpus),
		 "Number of Juice GPUs, 1 to %u (default 1)",
		 cfg.limits.max_gpus);
	snprintf(usage_vram, sizeof(usage_vram),
		 "VRAM of one Juice GPU in GiB, e.g. 16, 1.5 or 2560MiB "
		 "(at most %s; only with 1 GPU)", max);

	for (i = 0; options[i].name; i++) {
		spank_err_t e = spank_option_register(sp, &options[i]);
		if (e != ESPANK_SUCCESS) {
			slurm_error("juice: cannot register --%s: %s",
				    options[i].name, spank_strerror(e));
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	static int version_logged;
	spank_context_t ctx = spank_context();
	char err[1024];

	/*
	 * Once per slurmstepd, into slurmd's log (slurm_info there does not
	 * reach the user's terminal; on srun/sbatch it would, so not there).
	 */
	if (ctx == S_CTX_REMOTE && !version_logged) {
		slurm_info("juice: spank_juice %s", JUICE_VERSION);
		version_logged = 1;
	}
	if (!cfg_loaded) {
		if (juice_args_parse(ac, av, &cfg, err, sizeof(err)) < 0) {
			slurm_error("juice: %s", err);
			return -1;
		}
		cfg_loaded = 1;
	}
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE)
		return register_options(sp);
	return 0;
}

/* srun, sbatch, salloc: the cross-option rules, then the request. */
static int submit_request(spank_t sp)
{
	struct juice_request req;
	enum juice_opt bad;
	char err[1024], request[JUICE_REQUEST_MAX + 1], num[32];
	spank_err_t e;
	int rc;

	rc = juice_request_resolve(opt_val[JUICE_OPT_POOL],
				   opt_val[JUICE_OPT_GPUS],
				   opt_val[JUICE_OPT_VRAM], &cfg.limits, &req,
				   &bad, err, sizeof(err));
	if (rc < 0) {
		slurm_error("juice: %s", err);
		return -1;
	}
	if (rc == 0)
		return 0;  /* not a Juice job */
	if (juice_request_format(&req, request, sizeof(request)) < 0) {
		slurm_error("juice: cannot form the canonical request for "
			    "pool %s, %u GPUs", req.pool, req.gpus);
		return -1;
	}

#define SET(name, value)                                                     \
	do {                                                                 \
		e = spank_job_control_setenv(sp, name, value, 1);            \
		if (e != ESPANK_SUCCESS) {                                   \
			slurm_error("juice: cannot pass %s to the job: %s",  \
				    name, spank_strerror(e));                \
			return -1;                                           \
		}                                                            \
	} while (0)
	SET("JUICE_REQUEST", request);
	SET("JUICE_POOL", req.pool);
	snprintf(num, sizeof(num), "%u", req.gpus);
	SET("JUICE_GPU_COUNT", num);
	if (req.vram) {
		snprintf(num, sizeof(num), "%llu",
			 (unsigned long long)req.vram);
		SET("JUICE_VRAM", num);
	} else {
		spank_job_control_unsetenv(sp, "JUICE_VRAM");
	}
#undef SET
	slurm_debug("juice: request %s", request);
	return 0;
}

/*
 * slurmstepd, as root: read the session file when the job asked for it.
 *
 * A failure here is recorded, not returned: a step that fails in
 * init_post_opt or user_init ends before its tasks exist, the user only sees
 * "Plugin initialization failed" and (measured on 22.05) srun exits 0 and a
 * batch job ends COMPLETED with exit code 0.  Instead each task fails in
 * task_init_privileged, before exec, with the message on its stderr and a
 * non-zero exit status.
 */
static void remote_post_opt(spank_t sp)
{
	if (session_loaded || session_error[0])
		return;  /* idempotent */
	juice_wanted = juice_remote_wanted(sp, remote_options_seen);
	if (!juice_wanted)
		return;
	if (juice_remote_is_extern_step(sp)) {
		juice_wanted = 0;  /* no user tasks in the extern step */
		return;
	}
	if (juice_remote_load(sp, &cfg, opt_val[JUICE_OPT_POOL],
			      opt_val[JUICE_OPT_GPUS], opt_val[JUICE_OPT_VRAM],
			      &session, session_error,
			      sizeof(session_error)) < 0) {
		slurm_error("juice: %s", session_error);
		return;
	}
	session_loaded = 1;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return submit_request(sp);
	case S_CTX_REMOTE:
		remote_post_opt(sp);
		return 0;
	default:
		return 0;
	}
}

/* slurmstepd, job user's euid: the session into the job environment. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_remote(sp) != 1 || !juice_wanted || !session_loaded)
		return 0;
	if (juice_remote_apply(sp, &cfg, &session, session_error,
			       sizeof(session_error)) < 0) {
		slurm_error("juice: %s", session_error);
		session_loaded = 0;
	}
	return 0;
}

/* slurmstepd, each task as root before exec: no session, no task. */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_remote(sp) != 1 || !juice_wanted)
		return 0;
	if (!session_loaded && !session_error[0])
		snprintf(session_error, sizeof(session_error),
			 "the job asked for Juice GPUs but no session was "
			 "loaded; failing the task");
	if (session_error[0]) {
		slurm_error("juice: %s", session_error);
		return -1;
	}
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	int i;

	(void)sp;
	(void)ac;
	(void)av;
	juice_env_clear(&session);
	session_loaded = 0;
	session_error[0] = '\0';
	for (i = 0; i < 4; i++) {
		free(opt_val[i]);
		opt_val[i] = NULL;
	}
	return 0;
}
