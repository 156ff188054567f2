/*
 * validate.h - option validation and VRAM sizes for the juice SPANK plugin.
 *
 * Pure C, no Slurm: unit-tested against test/vectors/options.tsv,
 * test/vectors/vram.tsv and test/vectors/requests.tsv (the same tables the Go
 * side reads).
 */
#ifndef JUICE_VALIDATE_H
#define JUICE_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#define JUICE_POOL_MAX 63          /* characters in a pool name */
#define JUICE_REQUEST_MAX 1024     /* bytes in a canonical request */
/* The grammar's bounds (test/vectors/README.md section 3, rules 6 and 7). */
#define JUICE_REQUEST_MAX_GPUS 1024
#define JUICE_REQUEST_MAX_VRAM 9223372036854775807ULL  /* 2^63-1: a bigint */
#define JUICE_DEFAULT_MAX_GPUS 8
#define JUICE_DEFAULT_MAX_VRAM (80ULL << 30)  /* 80GiB */
/* The largest max_gpus= a site may configure: what a request can carry. */
#define JUICE_MAX_GPUS_LIMIT JUICE_REQUEST_MAX_GPUS

/* The options, for "which option is wrong". */
enum juice_opt {
	JUICE_OPT_NONE = 0,
	JUICE_OPT_POOL,
	JUICE_OPT_GPUS,
	JUICE_OPT_VRAM,
};

struct juice_limits {
	char default_pool[JUICE_POOL_MAX + 1];  /* "" = no default pool */
	unsigned max_gpus;
	uint64_t max_vram;
};

struct juice_request {
	char pool[JUICE_POOL_MAX + 1];
	unsigned gpus;
	uint64_t vram;  /* bytes of one GPU; 0 = no slice asked for */
};

/* "juice-pool", "juice-gpu-count", "juice-vram" (no leading dashes). */
const char *juice_opt_name(enum juice_opt opt);

void juice_limits_default(struct juice_limits *lim);

/*
 * Parse a VRAM size: <digits>[.<1-9 digits>][B|MB|GB|MiB|GiB], unit
 * case-insensitive, none = GiB.  Exact in uint64, rounded down.
 * Returns 0 and sets *bytes, or -1 on a grammar error or overflow.
 */
int juice_parse_vram(const char *s, uint64_t *bytes);

/* Pool name: 1-63 of [A-Za-z0-9._-], the first a letter or digit. 0/-1. */
int juice_pool_valid(const char *pool);

/*
 * Per-option checks.  On error return -1 and write a message (without the
 * "juice: " prefix) that names the option and quotes the value.
 */
int juice_check_pool(const char *pool, char *err, size_t errlen);
int juice_check_gpu_count(const char *s, unsigned max_gpus, unsigned *out,
			  char *err, size_t errlen);
int juice_check_vram(const char *s, uint64_t max_vram, uint64_t *out,
		     char *err, size_t errlen);

/*
 * All rules together.  pool/gpus/vram are the raw option values, NULL when
 * the option was not given.  Returns 0 when no option was given (not a Juice
 * job), 1 with *req filled, or -1 with *bad naming the option and err a
 * message.  Limits above the grammar's bounds count as those bounds, so a
 * resolved request always formats.
 */
int juice_request_resolve(const char *pool, const char *gpus, const char *vram,
			  const struct juice_limits *lim,
			  struct juice_request *req, enum juice_opt *bad,
			  char *err, size_t errlen);

/*
 * "juice:v1:pool=P,gpus=N[,vram=B]".  Returns 0, or -1 (out "") when it does
 * not fit or req is not a valid request: what it writes always parses back
 * to *req with juice_request_parse.
 */
int juice_request_format(const struct juice_request *req, char *out,
			 size_t outlen);

/*
 * Parse a canonical request strictly (test/vectors/README.md section 3,
 * rules checked in order).  Returns 1 with *req filled; 0 when s is not a
 * Juice request at all (it does not start with "juice:"); -1 when it is a
 * broken one, with *what the first rule broken: "version", "length",
 * "form", "pool", "gpus" or "vram".  *req is zeroed unless 1; *what is NULL
 * unless -1 (what may be NULL).  No allocation.
 */
int juice_request_parse(const char *s, struct juice_request *req,
			const char **what);

/*
 * Does a request agree with the --juice-* values given to a step (NULL = not
 * given)?  Only what was given is compared: the pool as text, the GPU count
 * and the VRAM as numbers (so "02" agrees with 2 and "1.5" with 1610612736).
 * Returns 0, or -1 with a message (no "juice: " prefix) naming the option
 * and quoting its value.
 */
int juice_request_matches(const struct juice_request *req, const char *pool,
			  const char *gpus, const char *vram, char *err,
			  size_t errlen);

/*
 * Copy a user-supplied value for a message: printable ASCII as is, anything
 * else as \xNN, '"' and '\' escaped, cut to about 64 characters with "...".
 */
void juice_quote(const char *s, char *out, size_t outlen);

/*
 * A size for a message a user reads, as internal/vram.Readable prints it
 * (test/vectors/sizes.tsv): "80GiB", "1536MiB", "1.5GB", "123B" under 1MiB,
 * else GiB rounded up to 9 decimals ("80.000000001GiB"), which gives back a
 * bare --juice-vram as typed.  out holds at least 32 bytes.
 */
void juice_format_size(uint64_t bytes, char *out, size_t outlen);

#endif
