/*
 * fuzz_args.c - libFuzzer target: the plugstack.conf argument parser
 * (juice_args_parse), which slurm_spank_init runs in every slurmstepd.
 *
 * The input is one plugstack line's arguments, split at blanks (as Slurm
 * splits them).  Oracles: a refusal says why; an accepted configuration
 * holds absolute paths and limits within the request's bounds, so that any
 * request the options resolve to under it formats and parses back.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

#define MAX_ARGS 16

static void check_resolves(const struct juice_limits *lim, const char *pool,
			   const char *gpus, const char *vram)
{
	struct juice_request req, back;
	enum juice_opt bad;
	char err[1024], out[JUICE_REQUEST_MAX + 1];
	int rc;

	rc = juice_request_resolve(pool, gpus, vram, lim, &req, &bad, err,
				   sizeof(err));
	if (rc < 0 && (bad == JUICE_OPT_NONE || err[0] == '\0'))
		abort();
	if (rc == 1 && (juice_request_format(&req, out, sizeof(out)) != 0 ||
			juice_request_parse(out, &back, NULL) != 1 ||
			strcmp(back.pool, req.pool) != 0 ||
			back.gpus != req.gpus || back.vram != req.vram))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct juice_config cfg;
	char *buf, *av[MAX_ARGS], err[1024], num[24];
	int ac = 0, rc;
	size_t i;

	if (size > 8192)
		return 0;
	buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (i = 0; i < size && ac < MAX_ARGS;) {
		while (i < size && (buf[i] == ' ' || buf[i] == '\t' ||
				    buf[i] == '\n' || buf[i] == '\0'))
			buf[i++] = '\0';
		if (i < size)
			av[ac++] = buf + i;
		while (i < size && buf[i] != ' ' && buf[i] != '\t' &&
		       buf[i] != '\n' && buf[i] != '\0')
			i++;
	}
	err[0] = '\0';
	rc = juice_args_parse(ac, av, &cfg, err, sizeof(err));
	if (rc < 0) {
		if (err[0] == '\0' || strnlen(err, sizeof(err)) == sizeof(err))
			abort();
	} else {
		const struct juice_limits *lim = &cfg.limits;

		if (rc != 0 || cfg.juice_bin[0] != '/' ||
		    cfg.state_dir[0] != '/' ||
		    (cfg.key_file[0] && cfg.key_file[0] != '/') ||
		    (cfg.cluster[0] && juice_cluster_valid(cfg.cluster) < 0) ||
		    (lim->default_pool[0] &&
		     juice_pool_valid(lim->default_pool) < 0) ||
		    lim->max_gpus < 1 || lim->max_gpus > JUICE_MAX_GPUS_LIMIT ||
		    lim->max_vram < 1 || lim->max_vram > JUICE_REQUEST_MAX_VRAM)
			abort();
		/* The largest request this site allows must be a request. */
		snprintf(num, sizeof(num), "%u", lim->max_gpus);
		check_resolves(lim, NULL, num, NULL);
		snprintf(num, sizeof(num), "%lluB",
			 (unsigned long long)lim->max_vram);
		check_resolves(lim, "p", NULL, num);
		check_resolves(lim, NULL, "1", "1B");
	}
	free(buf);
	return 0;
}
