/*
 * juice-security-submit: what any cluster user can do with libslurm, which sbatch and slurmrestd v0.0.38 do not
 * expose: submit a batch job with any spank_job_env. The security suite (test/e2e/security_test.go) builds it
 * with `gcc -o juice-security-submit submit.c -lslurm` and runs it as an ordinary user.
 *
 *   juice-security-submit OUTFILE PARTITION [NAME=VALUE | env:NAME=VALUE ...]
 *
 * prints the job id, or the refusal and exits 1. The job prints its environment into OUTFILE. Each NAME=VALUE
 * goes into spank_job_env as given (a value may hold a newline); each env:NAME=VALUE into the job's environment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s OUTFILE PARTITION [NAME=VALUE...]\n", argv[0]);
		return 2;
	}
	slurm_init(NULL);
	job_desc_msg_t d;
	slurm_init_job_desc_msg(&d);
	char **env = calloc((size_t)argc + 1, sizeof(char *));
	char **spank = calloc((size_t)argc + 1, sizeof(char *));
	uint32_t nenv = 0, nspank = 0;
	if (!env || !spank)
		return 1;
	env[nenv++] = "PATH=/usr/bin:/bin";
	for (int i = 3; i < argc; i++) {
		if (strncmp(argv[i], "env:", 4) == 0)
			env[nenv++] = argv[i] + 4;
		else
			spank[nspank++] = argv[i];
	}
	d.name = "juice-security";
	d.partition = argv[2];
	d.script = "#!/bin/sh\nenv\n";
	d.std_out = argv[1];
	d.work_dir = "/tmp";
	d.user_id = getuid();
	d.group_id = getgid();
	d.min_nodes = 1;
	d.time_limit = 2;
	d.environment = env;
	d.env_size = nenv;
	d.spank_job_env = spank;
	d.spank_job_env_size = nspank;
	submit_response_msg_t *resp = NULL;
	if (slurm_submit_batch_job(&d, &resp) != SLURM_SUCCESS) {
		fprintf(stderr, "refused: %s\n", slurm_strerror(slurm_get_errno()));
		return 1;
	}
	printf("%u\n", resp->job_id);
	slurm_free_submit_response_response_msg(resp);
	slurm_fini();
	return 0;
}
