/*
 * args.h - plugstack.conf arguments of the juice SPANK plugin.
 *
 *   required /usr/lib/slurm/spank_juice.so JUICE_BIN STATE_DIR [key=value...]
 *
 * Pure C, no Slurm: unit-tested by spank/test.
 */
#ifndef JUICE_ARGS_H
#define JUICE_ARGS_H

#include <limits.h>
#include <stddef.h>

#include "validate.h"

#define JUICE_CLUSTER_MAX 63

struct juice_config {
	char juice_bin[PATH_MAX];     /* 1st argument: the juice binary */
	char state_dir[PATH_MAX];     /* 2nd argument: shared state directory */
	char key_file[PATH_MAX];      /* key=: cluster key ("" = not set) */
	char cluster[JUICE_CLUSTER_MAX + 1]; /* cluster=: ("" = not set) */
	struct juice_limits limits;   /* default_pool=, max_gpus=, max_vram= */
};

/*
 * Parse the plugstack arguments.  Returns 0, or -1 with err naming the
 * argument that is wrong (and why).
 */
int juice_args_parse(int ac, char **av, struct juice_config *cfg,
		     char *err, size_t errlen);

/* Cluster names: 1-63 of [A-Za-z0-9._-].  0/-1. */
int juice_cluster_valid(const char *name);

#endif
