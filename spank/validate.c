/*
 * validate.c - option validation and VRAM sizes (see test/vectors/README.md
 * sections 1-3).  Pure C: no Slurm, no allocation.
 */
#include "validate.h"

#include <stdio.h>
#include <string.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alnum(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

const char *juice_opt_name(enum juice_opt opt)
{
	switch (opt) {
	case JUICE_OPT_POOL: return "juice-pool";
	case JUICE_OPT_GPUS: return "juice-gpu-count";
	case JUICE_OPT_VRAM: return "juice-vram";
	default: return "none";
	}
}

void juice_limits_default(struct juice_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_gpus = JUICE_DEFAULT_MAX_GPUS;
	lim->max_vram = JUICE_DEFAULT_MAX_VRAM;
}

void juice_quote(const char *s, char *out, size_t outlen)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, n = 0;

	if (outlen == 0)
		return;
	for (; s && *s && n < 64; s++, n++) {
		unsigned char c = (unsigned char)*s;
		char tmp[4];
		size_t k = 0;

		if (c == '"' || c == '\\') {
			tmp[k++] = '\\';
			tmp[k++] = (char)c;
		} else if (c >= 0x20 && c < 0x7f) {
			tmp[k++] = (char)c;
		} else {
			tmp[k++] = '\\';
			tmp[k++] = 'x';
			tmp[k++] = hex[c >> 4];
			tmp[k++] = hex[c & 15];
		}
		if (o + k + 4 > outlen)  /* room for "..." and NUL */
			break;
		memcpy(out + o, tmp, k);
		o += k;
	}
	if (s && *s && o + 4 <= outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

void juice_format_size(uint64_t bytes, char *out, size_t outlen)
{
	static const struct {
		uint64_t size;
		const char *name;
	} units[] = { { 1ULL << 30, "GiB" }, { 1ULL << 20, "MiB" },
		      { 1000000000ULL, "GB" }, { 1000000ULL, "MB" } };
	uint64_t whole, rest, frac;
	size_t i;
	int d;

	/* The exact size in the first unit that shows it with at most 3
	 * decimals (rest < 2^30 and 10^3: no overflow). */
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		uint64_t p10 = 1;

		if (bytes < units[i].size)
			continue;
		whole = bytes / units[i].size;
		rest = bytes % units[i].size;
		if (rest == 0) {
			snprintf(out, outlen, "%llu%s", (unsigned long long)whole,
				 units[i].name);
			return;
		}
		for (d = 1; d <= 3; d++) {
			p10 *= 10;
			if (rest * p10 % units[i].size == 0) {
				snprintf(out, outlen, "%llu.%0*llu%s",
					 (unsigned long long)whole, d,
					 (unsigned long long)(rest * p10 /
							      units[i].size),
					 units[i].name);
				return;
			}
		}
	}
	if (bytes < (1ULL << 20)) {
		snprintf(out, outlen, "%lluB", (unsigned long long)bytes);
		return;
	}
	/* GiB rounded up to 9 decimals: gives back the bare GiB a user typed
	 * (rest < 2^30 and 10^9 < 2^30: no overflow). */
	whole = bytes >> 30;
	rest = bytes & ((1ULL << 30) - 1);
	frac = (rest * 1000000000ULL + (1ULL << 30) - 1) >> 30;
	if (frac == 1000000000ULL) {
		whole++;
		frac = 0;
	}
	if (frac == 0) {
		snprintf(out, outlen, "%lluGiB", (unsigned long long)whole);
		return;
	}
	for (d = 9; frac % 10 == 0; d--)
		frac /= 10;
	snprintf(out, outlen, "%llu.%0*lluGiB", (unsigned long long)whole, d,
		 (unsigned long long)frac);
}

/* Case-insensitive whole-string compare for the unit (ASCII only). */
static int unit_is(const char *s, const char *unit)
{
	for (; *s && *unit; s++, unit++) {
		char a = *s, b = *unit;
		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (a != b)
			return 0;
	}
	return *s == '\0' && *unit == '\0';
}

int juice_parse_vram(const char *s, uint64_t *bytes)
{
	uint64_t ipart = 0, frac = 0, pow10 = 1, unit, total;
	int ndigits = 0, nfrac = 0;

	if (!s)
		return -1;
	for (; is_digit(*s); s++, ndigits++) {
		uint64_t d = (uint64_t)(*s - '0');
		if (ipart > (UINT64_MAX - d) / 10)
			return -1;
		ipart = ipart * 10 + d;
	}
	if (ndigits == 0)
		return -1;
	if (*s == '.') {
		s++;
		for (; is_digit(*s); s++, nfrac++) {
			if (nfrac == 9)
				return -1;
			frac = frac * 10 + (uint64_t)(*s - '0');
			pow10 *= 10;
		}
		if (nfrac == 0)
			return -1;
	}
	if (*s == '\0' || unit_is(s, "gib"))
		unit = 1ULL << 30;
	else if (unit_is(s, "mib"))
		unit = 1ULL << 20;
	else if (unit_is(s, "gb"))
		unit = 1000000000ULL;
	else if (unit_is(s, "mb"))
		unit = 1000000ULL;
	else if (unit_is(s, "b"))
		unit = 1;
	else
		return -1;

	if (ipart > UINT64_MAX / unit)
		return -1;
	total = ipart * unit;
	/* frac < 10^9 and unit <= 2^30: the product fits in 64 bits. */
	frac = frac * unit / pow10;
	if (total > UINT64_MAX - frac)
		return -1;
	*bytes = total + frac;
	return 0;
}

int juice_pool_valid(const char *pool)
{
	size_t n;

	if (!pool || !is_alnum(pool[0]))
		return -1;
	for (n = 0; pool[n]; n++) {
		char c = pool[n];
		if (n >= JUICE_POOL_MAX)
			return -1;
		if (!is_alnum(c) && c != '.' && c != '_' && c != '-')
			return -1;
	}
	return 0;
}

int juice_check_pool(const char *pool, char *err, size_t errlen)
{
	char q[80];

	if (juice_pool_valid(pool) == 0)
		return 0;
	juice_quote(pool, q, sizeof(q));
	snprintf(err, errlen,
		 "invalid --juice-pool \"%s\": must be 1 to %d characters from "
		 "A-Z a-z 0-9 . _ -, the first a letter or digit",
		 q, JUICE_POOL_MAX);
	return -1;
}

int juice_check_gpu_count(const char *s, unsigned max_gpus, unsigned *out,
			  char *err, size_t errlen)
{
	unsigned long v = 0;
	const char *p;
	char q[80];

	for (p = s; p && is_digit(*p); p++) {
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > max_gpus)
			break;  /* also stops overflow */
	}
	if (s && p != s && *p == '\0' && v >= 1 && v <= max_gpus) {
		*out = (unsigned)v;
		return 0;
	}
	juice_quote(s, q, sizeof(q));
	snprintf(err, errlen,
		 "invalid --juice-gpu-count \"%s\": must be a whole number "
		 "from 1 to %u", q, max_gpus);
	return -1;
}

int juice_check_vram(const char *s, uint64_t max_vram, uint64_t *out,
		     char *err, size_t errlen)
{
	uint64_t v;
	char q[80], m[32];

	juice_quote(s, q, sizeof(q));
	if (juice_parse_vram(s, &v) < 0) {
		snprintf(err, errlen,
			 "invalid --juice-vram \"%s\": must be a size in GiB "
			 "such as 16, 1.5 or 2560MiB (units: B, MB, GB, MiB, "
			 "GiB; at most 9 decimals)", q);
		return -1;
	}
	if (v == 0) {
		snprintf(err, errlen,
			 "invalid --juice-vram \"%s\": must be above 0", q);
		return -1;
	}
	if (v > max_vram) {
		juice_format_size(max_vram, m, sizeof(m));
		snprintf(err, errlen,
			 "invalid --juice-vram \"%s\": more than the maximum "
			 "of %s per GPU", q, m);
		return -1;
	}
	*out = v;
	return 0;
}

int juice_request_resolve(const char *pool, const char *gpus, const char *vram,
			  const struct juice_limits *lim,
			  struct juice_request *req, enum juice_opt *bad,
			  char *err, size_t errlen)
{
	/* Within the grammar's bounds, whatever the limits say. */
	unsigned max_gpus = lim->max_gpus < JUICE_REQUEST_MAX_GPUS ?
			    lim->max_gpus : JUICE_REQUEST_MAX_GPUS;
	uint64_t max_vram = lim->max_vram < JUICE_REQUEST_MAX_VRAM ?
			    lim->max_vram : JUICE_REQUEST_MAX_VRAM;
	char q[80], q2[80];

	memset(req, 0, sizeof(*req));
	*bad = JUICE_OPT_NONE;
	if (!pool && !gpus && !vram)
		return 0;

	/* Each option on its own. */
	if (pool && juice_check_pool(pool, err, errlen) < 0) {
		*bad = JUICE_OPT_POOL;
		return -1;
	}
	req->gpus = 1;
	if (gpus && juice_check_gpu_count(gpus, max_gpus, &req->gpus, err,
					  errlen) < 0) {
		*bad = JUICE_OPT_GPUS;
		return -1;
	}
	if (vram && juice_check_vram(vram, max_vram, &req->vram, err,
				     errlen) < 0) {
		*bad = JUICE_OPT_VRAM;
		return -1;
	}

	/* Across options. */
	if (vram && req->gpus > 1) {
		juice_quote(vram, q, sizeof(q));
		juice_quote(gpus, q2, sizeof(q2));
		snprintf(err, errlen,
			 "invalid --juice-vram \"%s\" with --juice-gpu-count "
			 "\"%s\": a VRAM slice is for a single GPU (drop "
			 "--juice-vram or ask for 1 GPU)", q, q2);
		*bad = JUICE_OPT_VRAM;
		return -1;
	}
	if (!pool) {
		if (lim->default_pool[0] == '\0') {
			juice_quote(gpus ? gpus : vram, q, sizeof(q));
			snprintf(err, errlen,
				 "missing --juice-pool: --juice-%s \"%s\" needs "
				 "a pool and this cluster has no default pool",
				 gpus ? "gpu-count" : "vram", q);
			*bad = JUICE_OPT_POOL;
			return -1;
		}
		pool = lim->default_pool;
	}
	snprintf(req->pool, sizeof(req->pool), "%s", pool);
	return 1;
}

int juice_request_format(const struct juice_request *req, char *out,
			 size_t outlen)
{
	struct juice_request back;
	size_t plen = strnlen(req->pool, sizeof(req->pool));
	int n;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	if (plen == sizeof(req->pool))
		return -1;  /* not NUL-terminated */
	if (req->vram)
		n = snprintf(out, outlen, "juice:v1:pool=%s,gpus=%u,vram=%llu",
			     req->pool, req->gpus,
			     (unsigned long long)req->vram);
	else
		n = snprintf(out, outlen, "juice:v1:pool=%s,gpus=%u",
			     req->pool, req->gpus);
	if (n < 0 || (size_t)n >= outlen || n > JUICE_REQUEST_MAX)
		goto bad;
	/* Only a text that parses back to the same request leaves here. */
	if (juice_request_parse(out, &back, NULL) != 1 ||
	    strcmp(back.pool, req->pool) != 0 || back.gpus != req->gpus ||
	    back.vram != req->vram)
		goto bad;
	return 0;
bad:
	out[0] = '\0';
	return -1;
}

/*
 * A decimal number from 1 to max without a leading zero, exactly the bytes
 * [p, end).  0 with *out, or -1.
 */
static int parse_count(const char *p, const char *end, uint64_t max,
		       uint64_t *out)
{
	uint64_t v = 0;

	if (p == end || *p == '0')
		return -1;
	for (; p < end; p++) {
		uint64_t d;

		if (!is_digit(*p))
			return -1;
		d = (uint64_t)(*p - '0');
		if (v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int juice_request_parse(const char *s, struct juice_request *req,
			const char **what)
{
	static const char *const key[3] = { "pool=", "gpus=", "vram=" };
	const char *f[3], *fe[3], *p, *end, *bad;
	uint64_t gpus, vram = 0;
	size_t len, n, i;

	memset(req, 0, sizeof(*req));
	if (what)
		*what = NULL;
	/* 1. none, 2. version, 3. length */
	if (!s || strncmp(s, "juice:", 6) != 0)
		return 0;
	if (strncmp(s, "juice:v1:", 9) != 0) {
		bad = "version";
		goto fail;
	}
	len = strnlen(s, JUICE_REQUEST_MAX + 1);
	if (len > JUICE_REQUEST_MAX) {
		bad = "length";
		goto fail;
	}
	/* 4. form: the rest split at every ',' into pool=, gpus=[, vram=] */
	end = s + len;
	p = s + 9;
	for (n = 0;; n++) {
		const char *comma = memchr(p, ',', (size_t)(end - p));

		if (n == 3) {
			bad = "form";
			goto fail;
		}
		f[n] = p;
		fe[n] = comma ? comma : end;
		if (!comma)
			break;
		p = comma + 1;
	}
	n++;
	if (n < 2) {
		bad = "form";
		goto fail;
	}
	for (i = 0; i < n; i++) {
		if ((size_t)(fe[i] - f[i]) < 5 || memcmp(f[i], key[i], 5) != 0) {
			bad = "form";
			goto fail;
		}
		f[i] += 5;
	}
	/* 5. pool */
	len = (size_t)(fe[0] - f[0]);
	bad = "pool";
	if (len == 0 || len > JUICE_POOL_MAX || !is_alnum(f[0][0]))
		goto fail;
	for (p = f[0]; p < fe[0]; p++)
		if (!is_alnum(*p) && *p != '.' && *p != '_' && *p != '-')
			goto fail;
	/* 6. gpus */
	bad = "gpus";
	if (parse_count(f[1], fe[1], JUICE_REQUEST_MAX_GPUS, &gpus) < 0)
		goto fail;
	/* 7. vram: a number of bytes, and only for one GPU */
	bad = "vram";
	if (n == 3 && (parse_count(f[2], fe[2], JUICE_REQUEST_MAX_VRAM,
				   &vram) < 0 || gpus != 1))
		goto fail;

	memcpy(req->pool, f[0], len);
	req->pool[len] = '\0';
	req->gpus = (unsigned)gpus;
	req->vram = vram;
	return 1;
fail:
	if (what)
		*what = bad;
	return -1;
}

int juice_request_matches(const struct juice_request *req, const char *pool,
			  const char *gpus, const char *vram, char *err,
			  size_t errlen)
{
	char q[80], m[32], e[8];
	unsigned n;
	uint64_t v;

	if (pool && strcmp(pool, req->pool) != 0) {
		juice_quote(pool, q, sizeof(q));
		snprintf(err, errlen, "this step was given --juice-pool \"%s\" "
			 "but the job's request is for pool %s", q, req->pool);
		return -1;
	}
	if (gpus && (juice_check_gpu_count(gpus, JUICE_REQUEST_MAX_GPUS, &n, e,
					   sizeof(e)) < 0 || n != req->gpus)) {
		juice_quote(gpus, q, sizeof(q));
		snprintf(err, errlen, "this step was given --juice-gpu-count "
			 "\"%s\" but the job's request is for %u GPU%s", q,
			 req->gpus, req->gpus == 1 ? "" : "s");
		return -1;
	}
	if (vram && (juice_parse_vram(vram, &v) < 0 || v == 0 ||
		     v != req->vram)) {
		juice_quote(vram, q, sizeof(q));
		if (req->vram) {
			juice_format_size(req->vram, m, sizeof(m));
			snprintf(err, errlen, "this step was given --juice-vram "
				 "\"%s\" but the job's request is for a slice of "
				 "%s", q, m);
		} else {
			snprintf(err, errlen, "this step was given --juice-vram "
				 "\"%s\" but the job's request is for whole GPUs",
				 q);
		}
		return -1;
	}
	return 0;
}
