/*
 * args.c - plugstack.conf arguments: two absolute paths, then key=value
 * settings.  Anything unknown, repeated or malformed is an error, so that a
 * typo in plugstack.conf stops the plugin from loading instead of silently
 * changing behaviour.
 */
#include "args.h"

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

int juice_cluster_valid(const char *name)
{
	size_t n;

	for (n = 0; name[n]; n++) {
		char c = name[n];
		if (n >= JUICE_CLUSTER_MAX)
			return -1;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return -1;
	}
	return n ? 0 : -1;
}

/* An absolute path without control characters that fits in PATH_MAX. */
static int path_ok(const char *p)
{
	size_t n = strlen(p);

	if (n < 2 || n >= PATH_MAX || p[0] != '/')
		return -1;
	for (; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -1;
	return 0;
}

/* What a setting accepts, for the error message. */
static const char *key_help(const char *k, size_t klen)
{
	if (klen == 3)
		return "an absolute path to the cluster key file";
	if (klen == 12)
		return "a pool name: 1-63 of A-Z a-z 0-9 . _ -, first a letter "
		       "or digit";
	if (strncmp(k, "max_gpus", klen) == 0)
		return "a whole number from 1 to " STR(JUICE_MAX_GPUS_LIMIT);
	if (strncmp(k, "max_vram", klen) == 0)
		return "a VRAM size above 0 such as 80, 80GiB or 40960MiB, "
		       "at most 2^63-1 bytes";
	return "a cluster name: 1-63 of A-Z a-z 0-9 . _ -";
}

int juice_args_parse(int ac, char **av, struct juice_config *cfg,
		     char *err, size_t errlen)
{
	int seen_pool = 0, seen_gpus = 0, seen_vram = 0, i;
	char q[80];

	memset(cfg, 0, sizeof(*cfg));
	juice_limits_default(&cfg->limits);

	if (ac < 2) {
		snprintf(err, errlen,
			 "plugstack.conf: expected arguments JUICE_BINARY "
			 "STATE_DIR [key=FILE] [default_pool=NAME] [max_gpus=N] "
			 "[max_vram=SIZE] [cluster=NAME], got %d argument%s",
			 ac, ac == 1 ? "" : "s");
		return -1;
	}
	for (i = 0; i < 2; i++) {
		juice_quote(av[i], q, sizeof(q));
		if (path_ok(av[i]) < 0) {
			snprintf(err, errlen,
				 "plugstack.conf: argument %d \"%s\" (%s) must "
				 "be an absolute path", i + 1, q,
				 i == 0 ? "the juice binary" :
					  "the state directory");
			return -1;
		}
	}
	snprintf(cfg->juice_bin, sizeof(cfg->juice_bin), "%s", av[0]);
	snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s", av[1]);

	for (i = 2; i < ac; i++) {
		const char *a = av[i], *eq = strchr(a, '=');
		const char *v = eq ? eq + 1 : NULL;
		size_t klen = eq ? (size_t)(eq - a) : 0;
		int bad = 0, dup = 0;

		juice_quote(a, q, sizeof(q));
		if (!eq) {
			snprintf(err, errlen,
				 "plugstack.conf: argument %d \"%s\" is not "
				 "key=value", i + 1, q);
			return -1;
		}
#define KEY_IS(k) (klen == strlen(k) && strncmp(a, k, klen) == 0)
		if (KEY_IS("key")) {
			dup = cfg->key_file[0] != '\0';
			bad = path_ok(v) < 0;
			if (!bad && !dup)
				snprintf(cfg->key_file, sizeof(cfg->key_file),
					 "%s", v);
		} else if (KEY_IS("default_pool")) {
			dup = seen_pool++;
			bad = juice_pool_valid(v) < 0;
			if (!bad && !dup)
				snprintf(cfg->limits.default_pool,
					 sizeof(cfg->limits.default_pool),
					 "%s", v);
		} else if (KEY_IS("max_gpus")) {
			unsigned n = 0;
			char e[8];
			dup = seen_gpus++;
			bad = juice_check_gpu_count(v, JUICE_MAX_GPUS_LIMIT,
						    &n, e, sizeof(e)) < 0;
			if (!bad && !dup)
				cfg->limits.max_gpus = n;
		} else if (KEY_IS("max_vram")) {
			uint64_t n = 0;
			dup = seen_vram++;
			bad = juice_parse_vram(v, &n) < 0 || n == 0 ||
			      n > JUICE_REQUEST_MAX_VRAM;
			if (!bad && !dup)
				cfg->limits.max_vram = n;
		} else if (KEY_IS("cluster")) {
			dup = cfg->cluster[0] != '\0';
			bad = juice_cluster_valid(v) < 0;
			if (!bad && !dup)
				snprintf(cfg->cluster, sizeof(cfg->cluster),
					 "%s", v);
		} else {
			snprintf(err, errlen,
				 "plugstack.conf: argument %d \"%s\": unknown "
				 "setting (known: key, default_pool, max_gpus, "
				 "max_vram, cluster)", i + 1, q);
			return -1;
		}
#undef KEY_IS
		if (dup) {
			snprintf(err, errlen,
				 "plugstack.conf: argument %d \"%s\": setting "
				 "given twice", i + 1, q);
			return -1;
		}
		if (bad) {
			snprintf(err, errlen,
				 "plugstack.conf: argument %d \"%s\": invalid "
				 "value (%s)", i + 1, q,
				 key_help(a, klen));
			return -1;
		}
	}
	return 0;
}
