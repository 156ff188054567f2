/*
 * test_juice.c - unit tests of the pure-C parts of the juice SPANK plugin
 * (no Slurm needed):
 *
 *   --tables DIR    DIR/vram.tsv, DIR/options.tsv and DIR/requests.tsv
 *                   (test/vectors): every row
 *   --session DIR   DIR/key.hex and every DIR/<name>.expect + <name>.session
 *   --missing DIR   a vector directory that should exist: counted as failed
 *
 * Also the plugstack argument parser, the key loader, the session file
 * search, the session's request against the step's options, and reading the
 * state directory with its owner's identity where root is squashed (as root:
 * root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, which cannot read
 * another user's 0600 file, as on an NFS export with root_squash).  Prints one line per failure and a summary "N passed, M failed";
 * exits 1 on any failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "session.h"
#include "validate.h"

static int passed, failed;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (cond) {                                                  \
			passed++;                                            \
		} else {                                                     \
			failed++;                                            \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);          \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
		}                                                            \
	} while (0)

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	buf[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

/* Split s at tabs into at most max fields (in place).  Returns the count. */
static int split_tabs(char *s, char **f, int max)
{
	int n = 0;

	f[n++] = s;
	for (; *s && n < max; s++)
		if (*s == '\t') {
			*s = '\0';
			f[n++] = s + 1;
		}
	return n;
}

/* Iterate the data lines of a .tsv: returns the next line or NULL. */
static char *next_line(char **cursor, int *lineno)
{
	char *line, *nl;

	while (**cursor) {
		line = *cursor;
		nl = strchr(line, '\n');
		if (nl) {
			*nl = '\0';
			*cursor = nl + 1;
		} else {
			*cursor = line + strlen(line);
		}
		(*lineno)++;
		if (line[0] == '#' || line[0] == '\0')
			continue;
		return line;
	}
	return NULL;
}

static void test_vram_table(const char *dir)
{
	char path[4096], *data, *cur, *line, *f[3];
	int lineno = 0, rows = 0;

	snprintf(path, sizeof(path), "%s/vram.tsv", dir);
	data = slurp(path, NULL);
	CHECK(data != NULL, "cannot read %s", path);
	if (!data)
		return;
	cur = data;
	while ((line = next_line(&cur, &lineno))) {
		uint64_t got = 0, want;
		int rc, n = split_tabs(line, f, 3);

		rows++;
		CHECK(n == 2, "vram.tsv:%d: expected 2 columns", lineno);
		if (n != 2)
			continue;
		rc = juice_parse_vram(f[0], &got);
		if (strcmp(f[1], "error") == 0) {
			CHECK(rc < 0, "vram.tsv:%d: \"%s\" should fail, got %llu",
			      lineno, f[0], (unsigned long long)got);
		} else if (sscanf(f[1], "ok %llu", (unsigned long long *)&want)
			   == 1) {
			CHECK(rc == 0 && got == want,
			      "vram.tsv:%d: \"%s\" want %llu, got rc=%d %llu",
			      lineno, f[0], (unsigned long long)want, rc,
			      (unsigned long long)got);
		} else {
			CHECK(0, "vram.tsv:%d: bad expected column", lineno);
		}
	}
	printf("vram.tsv: %d rows\n", rows);
	free(data);
}

/* Apply a limits column ("-" or "k=v,k=v") to lim.  0 or -1. */
static int apply_limits(char *s, struct juice_limits *lim)
{
	char *tok, *save = NULL;

	juice_limits_default(lim);
	if (strcmp(s, "-") == 0)
		return 0;
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char err[256];
		if (strncmp(tok, "default_pool=", 13) == 0)
			snprintf(lim->default_pool, sizeof(lim->default_pool),
				 "%s", tok + 13);
		else if (strncmp(tok, "max_gpus=", 9) == 0) {
			if (juice_check_gpu_count(tok + 9, JUICE_MAX_GPUS_LIMIT,
						  &lim->max_gpus, err,
						  sizeof(err)) < 0)
				return -1;
		} else if (strncmp(tok, "max_vram=", 9) == 0) {
			if (juice_parse_vram(tok + 9, &lim->max_vram) < 0)
				return -1;
		} else
			return -1;
	}
	return 0;
}

/* sizes.tsv: the sizes in users' messages, as internal/vram.Readable. */
static void test_sizes_table(const char *dir)
{
	char path[4096], *data, *cur, *line, *f[3], got[64];
	int lineno = 0, rows = 0;

	snprintf(path, sizeof(path), "%s/sizes.tsv", dir);
	data = slurp(path, NULL);
	CHECK(data != NULL, "cannot read %s", path);
	if (!data)
		return;
	cur = data;
	while ((line = next_line(&cur, &lineno))) {
		unsigned long long b;
		int n = split_tabs(line, f, 3);

		rows++;
		CHECK(n == 2 && sscanf(f[0], "%llu", &b) == 1,
		      "sizes.tsv:%d: expected 2 columns", lineno);
		if (n != 2)
			continue;
		juice_format_size((uint64_t)b, got, sizeof(got));
		CHECK(strcmp(got, f[1]) == 0, "sizes.tsv:%d: %s: got %s, want %s",
		      lineno, f[0], got, f[1]);
	}
	CHECK(rows >= 10, "sizes.tsv: %d rows", rows);
	printf("sizes.tsv: %d rows\n", rows);
	free(data);
}

static void test_options_table(const char *dir)
{
	char path[4096], *data, *cur, *line, *f[6];
	int lineno = 0, rows = 0;

	snprintf(path, sizeof(path), "%s/options.tsv", dir);
	data = slurp(path, NULL);
	CHECK(data != NULL, "cannot read %s", path);
	if (!data)
		return;
	cur = data;
	while ((line = next_line(&cur, &lineno))) {
		struct juice_limits lim;
		struct juice_request req;
		enum juice_opt bad;
		char err[1024], out[JUICE_REQUEST_MAX + 1], flag[64], q[80];
		const char *pool, *gpus, *vram, *want = NULL;
		int rc, n = split_tabs(line, f, 6);

		rows++;
		CHECK(n == 5, "options.tsv:%d: expected 5 columns", lineno);
		if (n != 5)
			continue;
		pool = strcmp(f[0], "-") ? f[0] : NULL;
		gpus = strcmp(f[1], "-") ? f[1] : NULL;
		vram = strcmp(f[2], "-") ? f[2] : NULL;
		if (apply_limits(f[3], &lim) < 0) {
			CHECK(0, "options.tsv:%d: bad limits column", lineno);
			continue;
		}
		err[0] = '\0';
		rc = juice_request_resolve(pool, gpus, vram, &lim, &req, &bad,
					   err, sizeof(err));
		if (strcmp(f[4], "none") == 0) {
			CHECK(rc == 0, "options.tsv:%d: want none, got rc=%d %s",
			      lineno, rc, err);
		} else if (strncmp(f[4], "ok ", 3) == 0) {
			struct juice_request back;
			const char *what = NULL;

			out[0] = '\0';
			if (rc == 1)
				juice_request_format(&req, out, sizeof(out));
			CHECK(rc == 1 && strcmp(out, f[4] + 3) == 0,
			      "options.tsv:%d: want %s, got rc=%d \"%s\" %s",
			      lineno, f[4] + 3, rc, out, err);
			CHECK(juice_request_parse(out, &back, &what) == 1 &&
			      strcmp(back.pool, req.pool) == 0 &&
			      back.gpus == req.gpus && back.vram == req.vram,
			      "options.tsv:%d: \"%s\" does not parse back (%s)",
			      lineno, out, what ? what : "-");
		} else if (strncmp(f[4], "error ", 6) == 0) {
			CHECK(rc < 0 && strcmp(juice_opt_name(bad), f[4] + 6) == 0,
			      "options.tsv:%d: want error %s, got rc=%d %s (%s)",
			      lineno, f[4] + 6, rc, juice_opt_name(bad), err);
			if (rc >= 0)
				continue;
			/* The message names the option ... */
			snprintf(flag, sizeof(flag), "--%s", f[4] + 6);
			CHECK(strstr(err, flag) != NULL,
			      "options.tsv:%d: message does not name %s: %s",
			      lineno, flag, err);
			/* ... and quotes the bad value (the named option's,
			 * or for a missing pool the value that needs one). */
			if (bad == JUICE_OPT_POOL && pool)
				want = pool;
			else if (bad == JUICE_OPT_GPUS)
				want = gpus;
			else if (bad == JUICE_OPT_VRAM)
				want = vram;
			else
				want = gpus ? gpus : vram;
			{
				char quoted[100];
				juice_quote(want, q, sizeof(q));
				snprintf(quoted, sizeof(quoted), "\"%s\"", q);
				CHECK(strstr(err, quoted) != NULL,
				      "options.tsv:%d: message does not quote "
				      "%s: %s", lineno, quoted, err);
			}
		} else {
			CHECK(0, "options.tsv:%d: bad expected column", lineno);
		}
	}
	printf("options.tsv: %d rows\n", rows);
	free(data);
}

/*
 * Undo the requests.tsv escapes (\\ \t \n \xNN) in place.  0, or -1 on a
 * bad escape or a NUL (which a C string cannot carry).
 */
static int unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (*s != '\\') {
			*o++ = *s;
			continue;
		}
		s++;
		if (*s == '\\')
			*o++ = '\\';
		else if (*s == 't')
			*o++ = '\t';
		else if (*s == 'n')
			*o++ = '\n';
		else if (*s == 'x' && s[1] && s[2]) {
			char hex[3] = { s[1], s[2], 0 }, *end;
			long v = strtol(hex, &end, 16);
			if (*end || v == 0)
				return -1;
			*o++ = (char)v;
			s += 2;
		} else
			return -1;
	}
	*o = '\0';
	return 0;
}

static void test_requests_table(const char *dir)
{
	char path[4096], *data, *cur, *line, *f[6];
	int lineno = 0, rows = 0, nok = 0, nnone = 0, nerr = 0;

	snprintf(path, sizeof(path), "%s/requests.tsv", dir);
	data = slurp(path, NULL);
	CHECK(data != NULL, "cannot read %s", path);
	if (!data)
		return;
	cur = data;
	while ((line = next_line(&cur, &lineno))) {
		struct juice_request req;
		const char *what = "?";
		char out[JUICE_REQUEST_MAX + 1];
		int rc, n = split_tabs(line, f, 6);

		rows++;
		if (unescape(f[0]) < 0) {
			CHECK(0, "requests.tsv:%d: bad escape in the input",
			      lineno);
			continue;
		}
		rc = juice_request_parse(f[0], &req, &what);
		if (n == 5 && strcmp(f[1], "ok") == 0) {
			unsigned long long vram = strtoull(f[4], NULL, 10);
			nok++;
			CHECK(rc == 1 && what == NULL &&
			      strcmp(req.pool, f[2]) == 0 &&
			      req.gpus == strtoul(f[3], NULL, 10) &&
			      req.vram == vram,
			      "requests.tsv:%d: want ok %s %s %s, got rc=%d %s "
			      "%s %u %llu", lineno, f[2], f[3], f[4], rc,
			      rc < 0 ? what : "", req.pool, req.gpus,
			      (unsigned long long)req.vram);
			/* The one text of that request. */
			CHECK(juice_request_format(&req, out, sizeof(out)) == 0 &&
			      strcmp(out, f[0]) == 0,
			      "requests.tsv:%d: format(parse(x)) = \"%s\"",
			      lineno, out);
		} else if (n == 2 && strcmp(f[1], "none") == 0) {
			nnone++;
			CHECK(rc == 0 && what == NULL && req.pool[0] == '\0',
			      "requests.tsv:%d: want none, got rc=%d %s", lineno,
			      rc, rc < 0 ? what : "");
		} else if (n == 3 && strcmp(f[1], "error") == 0) {
			nerr++;
			CHECK(rc == -1 && what && strcmp(what, f[2]) == 0 &&
			      req.pool[0] == '\0' && req.gpus == 0,
			      "requests.tsv:%d: want error %s, got rc=%d %s",
			      lineno, f[2], rc, rc < 0 ? what : "");
		} else {
			CHECK(0, "requests.tsv:%d: bad expected columns", lineno);
		}
	}
	printf("requests.tsv: %d rows (%d ok, %d none, %d error)\n", rows, nok,
	       nnone, nerr);
	CHECK(nok > 0 && nnone > 0 && nerr > 0, "requests.tsv: every kind");
	free(data);
}

/* juice_request_format never writes a text that does not parse. */
static void test_request_format(void)
{
	struct juice_request req, back;
	char out[JUICE_REQUEST_MAX + 1], small[20];
	struct {
		const char *pool;
		unsigned gpus;
		unsigned long long vram;
		int ok;
	} cases[] = {
		{ "test", 1, 0, 1 },
		{ "test", 1024, 0, 1 },
		{ "test", 1, 9223372036854775807ULL, 1 },
		{ "test", 0, 0, 0 },
		{ "test", 1025, 0, 0 },
		{ "test", 4096, 0, 0 },
		{ "test", 2, 1, 0 },     /* a slice is for one GPU */
		{ "test", 1, 9223372036854775808ULL, 0 },
		{ "test", 1, 18446744073709551615ULL, 0 },
		{ "", 1, 0, 0 },
		{ "-x", 1, 0, 0 },
		{ "a,gpus=2", 1, 0, 0 },
		{ "a,gpus=1,vram=5", 1, 0, 0 },
		{ "te st", 1, 0, 0 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&req, 0, sizeof(req));
		snprintf(req.pool, sizeof(req.pool), "%s", cases[i].pool);
		req.gpus = cases[i].gpus;
		req.vram = cases[i].vram;
		strcpy(out, "junk");
		if (cases[i].ok)
			CHECK(juice_request_format(&req, out, sizeof(out)) == 0 &&
			      juice_request_parse(out, &back, NULL) == 1 &&
			      back.gpus == req.gpus && back.vram == req.vram &&
			      strcmp(back.pool, req.pool) == 0,
			      "format case %zu: \"%s\"", i, out);
		else
			CHECK(juice_request_format(&req, out, sizeof(out)) < 0 &&
			      out[0] == '\0',
			      "format case %zu should be refused: \"%s\"", i, out);
	}
	/* A pool without its NUL; a buffer too small. */
	memset(&req, 'a', sizeof(req.pool));
	req.gpus = 1;
	req.vram = 0;
	CHECK(juice_request_format(&req, out, sizeof(out)) < 0,
	      "unterminated pool refused");
	snprintf(req.pool, sizeof(req.pool), "test");
	CHECK(juice_request_format(&req, small, sizeof(small)) < 0 &&
	      small[0] == '\0', "small buffer refused");
	CHECK(juice_request_format(&req, small, 0) < 0, "empty buffer refused");
	/* NULL is not a request; "what" may be NULL. */
	CHECK(juice_request_parse(NULL, &req, NULL) == 0, "NULL: none");
	CHECK(juice_request_parse("juice:v1:", &req, NULL) == -1,
	      "no what pointer");
}

/* The grammar's bounds reach the options: limits cannot exceed them. */
static void test_resolve_bounds(void)
{
	struct juice_limits lim;
	struct juice_request req;
	enum juice_opt bad;
	char err[512], out[JUICE_REQUEST_MAX + 1];

	juice_limits_default(&lim);
	lim.max_gpus = 4096;
	lim.max_vram = UINT64_MAX;
	CHECK(juice_request_resolve("test", "1024", NULL, &lim, &req, &bad, err,
				    sizeof(err)) == 1 &&
	      juice_request_format(&req, out, sizeof(out)) == 0,
	      "1024 GPUs: %s", err);
	CHECK(juice_request_resolve("test", "1025", NULL, &lim, &req, &bad, err,
				    sizeof(err)) < 0 && bad == JUICE_OPT_GPUS &&
	      strstr(err, "from 1 to 1024"), "1025 GPUs: %s", err);
	CHECK(juice_request_resolve("test", NULL, "9223372036854775807B", &lim,
				    &req, &bad, err, sizeof(err)) == 1 &&
	      juice_request_format(&req, out, sizeof(out)) == 0,
	      "2^63-1 bytes: %s", err);
	CHECK(juice_request_resolve("test", NULL, "9223372036854775808B", &lim,
				    &req, &bad, err, sizeof(err)) < 0 &&
	      bad == JUICE_OPT_VRAM, "2^63 bytes: %s", err);
}

/* The session's JUICE_REQUEST against the options given to the step. */
static void test_session_request(void)
{
	struct juice_env env;
	struct juice_request req;
	char err[1024];
	const char *R = "juice:v1:pool=test,gpus=2";
	const char *RV = "juice:v1:pool=test,gpus=1,vram=1610612736";
	struct {
		const char *request;  /* NULL: the session has none */
		const char *pool, *gpus, *vram;
		int ok;
		const char *in_err;
	} cases[] = {
		{ R, NULL, NULL, NULL, 1, NULL },
		{ R, "test", NULL, NULL, 1, NULL },
		{ R, "test", "2", NULL, 1, NULL },
		{ R, NULL, "02", NULL, 1, NULL },
		{ R, "other", NULL, NULL, 0, "--juice-pool \"other\"" },
		{ R, "tes", NULL, NULL, 0, "for pool test" },
		{ R, "test", "1", NULL, 0, "--juice-gpu-count \"1\"" },
		{ R, NULL, "3", NULL, 0, "for 2 GPUs" },
		{ R, NULL, "two", NULL, 0, "--juice-gpu-count \"two\"" },
		{ R, NULL, "", NULL, 0, "--juice-gpu-count \"\"" },
		{ R, NULL, NULL, "1.5", 0, "for whole GPUs" },
		{ R, NULL, NULL, "0", 0, "--juice-vram \"0\"" },
		{ RV, "test", "1", "1.5", 1, NULL },
		{ RV, NULL, NULL, "1536MiB", 1, NULL },
		{ RV, NULL, NULL, "1610612736B", 1, NULL },
		{ RV, NULL, NULL, "1.6", 0, "--juice-vram \"1.6\"" },
		{ RV, NULL, NULL, "x", 0, "slice of 1.5GiB" },
		{ RV, NULL, "2", NULL, 0, "for 1 GPU" },
		{ NULL, NULL, NULL, NULL, 0, "no JUICE_REQUEST" },
		{ "", NULL, NULL, NULL, 0, "not a Juice request" },
		{ "hello", NULL, NULL, NULL, 0, "not a Juice request" },
		{ "juice:v1:pool=test,gpus=0", NULL, NULL, NULL, 0, "(bad gpus)" },
		{ "juice:v1:pool=test,gpus=2,vram=1", NULL, NULL, NULL, 0,
		  "(bad vram)" },
		{ "juice:v2:pool=test,gpus=1", "test", NULL, NULL, 0,
		  "(bad version)" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		memset(&env, 0, sizeof(env));
		env.vars[env.n].name = "JUICE_SESSION_ID";
		env.vars[env.n++].value = "x";
		if (cases[i].request) {
			env.vars[env.n].name = "JUICE_REQUEST";
			env.vars[env.n++].value = cases[i].request;
		}
		env.vars[env.n].name = "JUICE_REQUESTS";
		env.vars[env.n++].value = R;
		err[0] = '\0';
		rc = juice_session_check_request(&env, cases[i].pool,
						 cases[i].gpus, cases[i].vram,
						 &req, err, sizeof(err));
		CHECK((rc == 0) == cases[i].ok, "session request case %zu: "
		      "rc=%d %s", i, rc, err);
		if (cases[i].ok)
			CHECK(strcmp(req.pool, "test") == 0,
			      "session request case %zu: pool %s", i, req.pool);
		else
			CHECK(strstr(err, cases[i].in_err) != NULL,
			      "session request case %zu: message lacks \"%s\": "
			      "%s", i, cases[i].in_err, err);
	}
	CHECK(juice_env_get(&env, "JUICE_SESSION_ID") &&
	      !juice_env_get(&env, "JUICE_SESSION") &&
	      !juice_env_get(&env, "JUICE_SESSION_ID_"), "env get");
}

static void test_args(void)
{
	struct juice_config cfg;
	char err[1024];
	struct {
		const char *argv[8];
		int ok;
		const char *in_err;  /* the message must contain this */
	} cases[] = {
		{ { "/usr/bin/juice", "/var/spool/juice", NULL }, 1, NULL },
		{ { "/usr/bin/juice", "/var/spool/juice", "key=/etc/juice/k",
		    "default_pool=test", "max_gpus=16", "max_vram=40GiB",
		    "cluster=c1", NULL }, 1, NULL },
		{ { "/usr/bin/juice", NULL }, 0, "expected arguments" },
		{ { NULL }, 0, "expected arguments" },
		{ { "juice", "/var/spool/juice", NULL }, 0, "argument 1" },
		{ { "/usr/bin/juice", "spool", NULL }, 0, "argument 2" },
		{ { "/usr/bin/juice", "/s", "colour=blue", NULL }, 0,
		  "\"colour=blue\": unknown" },
		{ { "/usr/bin/juice", "/s", "max_gpus=0", NULL }, 0,
		  "argument 3 \"max_gpus=0\"" },
		{ { "/usr/bin/juice", "/s", "max_gpus=x", NULL }, 0, "max_gpus" },
		{ { "/usr/bin/juice", "/s", "max_vram=0", NULL }, 0, "max_vram" },
		{ { "/usr/bin/juice", "/s", "max_vram=1KiB", NULL }, 0, "max_vram" },
		{ { "/usr/bin/juice", "/s", "default_pool=-x", NULL }, 0,
		  "default_pool" },
		{ { "/usr/bin/juice", "/s", "key=rel/path", NULL }, 0, "key=" },
		{ { "/usr/bin/juice", "/s", "cluster=a b", NULL }, 0, "cluster" },
		{ { "/usr/bin/juice", "/s", "noequals", NULL }, 0,
		  "not key=value" },
		{ { "/usr/bin/juice", "/s", "max_gpus=4", "max_gpus=5", NULL },
		  0, "twice" },
		{ { "/usr/bin/juice", "/s", "key=/a", "key=/b", NULL }, 0,
		  "twice" },
		/* The request's bounds: 1024 GPUs, 2^63-1 bytes. */
		{ { "/usr/bin/juice", "/s", "max_gpus=1024", NULL }, 1, NULL },
		{ { "/usr/bin/juice", "/s", "max_gpus=1025", NULL }, 0,
		  "from 1 to 1024" },
		{ { "/usr/bin/juice", "/s", "max_vram=9223372036854775807B",
		    NULL }, 1, NULL },
		{ { "/usr/bin/juice", "/s", "max_vram=8589934592GiB", NULL }, 0,
		  "max_vram" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ac = 0, rc;
		while (cases[i].argv[ac])
			ac++;
		err[0] = '\0';
		rc = juice_args_parse(ac, (char **)cases[i].argv, &cfg, err,
				      sizeof(err));
		CHECK((rc == 0) == cases[i].ok, "args case %zu: rc=%d %s", i,
		      rc, err);
		if (!cases[i].ok && cases[i].in_err)
			CHECK(strstr(err, cases[i].in_err) != NULL,
			      "args case %zu: message lacks \"%s\": %s", i,
			      cases[i].in_err, err);
	}
	/* The values arrive. */
	{
		const char *av[] = { "/usr/bin/juice", "/var/spool/juice",
				     "key=/etc/juice/k", "default_pool=test",
				     "max_gpus=16", "max_vram=40GiB",
				     "cluster=c1" };
		juice_args_parse(7, (char **)av, &cfg, err, sizeof(err));
		CHECK(strcmp(cfg.juice_bin, "/usr/bin/juice") == 0 &&
		      strcmp(cfg.state_dir, "/var/spool/juice") == 0 &&
		      strcmp(cfg.key_file, "/etc/juice/k") == 0 &&
		      strcmp(cfg.limits.default_pool, "test") == 0 &&
		      cfg.limits.max_gpus == 16 &&
		      cfg.limits.max_vram == (40ULL << 30) &&
		      strcmp(cfg.cluster, "c1") == 0, "args values");
		juice_args_parse(2, (char **)av, &cfg, err, sizeof(err));
		CHECK(cfg.limits.max_gpus == 8 &&
		      cfg.limits.max_vram == (80ULL << 30) &&
		      cfg.limits.default_pool[0] == '\0' &&
		      cfg.key_file[0] == '\0', "args defaults");
	}
}

static void test_quote(void)
{
	char q[80];

	juice_quote("t\xc3\xa9st\n\"x\"", q, sizeof(q));
	CHECK(strcmp(q, "t\\xc3\\xa9st\\x0a\\\"x\\\"") == 0, "quote: %s", q);
	juice_quote("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		    q, sizeof(q));
	CHECK(strlen(q) < sizeof(q) && strstr(q, "...") != NULL, "quote cut: %s", q);
}

/* One vector: parse <name>.expect, open <name>.session. */
static void test_session_case(const char *dir, const char *name,
			      const struct juice_keys *keys)
{
	char path[4096], cluster[128], runs[32], err[2048], res[64];
	char *exp, *cur, *line;
	struct juice_env env;
	unsigned job;
	long run;
	int rc, want_ok, lineno = 0;
	size_t i = 0;

	snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
	exp = slurp(path, NULL);
	CHECK(exp != NULL, "cannot read %s", path);
	if (!exp)
		return;
	cur = exp;
	line = next_line(&cur, &lineno);
	cluster[0] = '\0';
	/* "open cluster=C job=N run=N [reservation=UUID]"; C may be empty
	 * (= do not check); no reservation: not known (the compute node). */
	res[0] = '\0';
	{
		const char *c = line ? strstr(line, "cluster=") : NULL;
		const char *j = line ? strstr(line, " job=") : NULL;
		const char *r = line ? strstr(line, " reservation=") : NULL;
		if (r && (strlen(r + 13) != JUICE_UUID_LEN ||
			  strchr(r + 13, ' '))) {
			CHECK(0, "%s: bad reservation in the first line", path);
			free(exp);
			return;
		}
		if (r)
			memcpy(res, r + 13, JUICE_UUID_LEN + 1);
		if (!c || !j || strncmp(line, "open ", 5) != 0 ||
		    (size_t)(j - c - 8) >= sizeof(cluster) ||
		    sscanf(j, " job=%u run=%31s", &job, runs) != 2) {
			CHECK(0, "%s: bad first line", path);
			free(exp);
			return;
		}
		memcpy(cluster, c + 8, (size_t)(j - c - 8));
		cluster[j - c - 8] = '\0';
	}
	run = strcmp(runs, "any") == 0 ? -1 : strtol(runs, NULL, 10);
	line = next_line(&cur, &lineno);
	want_ok = line && strcmp(line, "ok") == 0;
	if (!want_ok && !(line && strcmp(line, "error") == 0)) {
		CHECK(0, "%s: second line must be ok or error", path);
		free(exp);
		return;
	}

	snprintf(path, sizeof(path), "%s/%s.session", dir, name);
	err[0] = '\0';
	rc = juice_session_open(path, keys, cluster, job, run,
				res[0] ? res : NULL, &env, err, sizeof(err));
	if (!want_ok) {
		CHECK(rc < 0, "%s: should be refused, opened with %zu vars",
		      path, env.n);
		if (rc < 0)
			printf("  ok %-28s refused: %s\n", name, err);
		else
			juice_env_clear(&env);
		free(exp);
		return;
	}
	CHECK(rc == 0, "%s: should open: %s", path, err);
	if (rc < 0) {
		free(exp);
		return;
	}
	/* The expected lines after "ok" ("next_line" skips empty lines,
	 * which cannot be NAME=VALUE anyway). */
	while ((line = next_line(&cur, &lineno))) {
		char *eq = strchr(line, '=');
		if (!eq || i >= env.n) {
			CHECK(0, "%s: expected %s, got %s", name, line,
			      i >= env.n ? "no more variables" : "?");
			i++;
			continue;
		}
		*eq = '\0';
		CHECK(strcmp(env.vars[i].name, line) == 0 &&
		      strcmp(env.vars[i].value, eq + 1) == 0,
		      "%s: variable %zu: want %s=%s, got %s=%s", name, i, line,
		      eq + 1, env.vars[i].name, env.vars[i].value);
		i++;
	}
	CHECK(i == env.n, "%s: want %zu variables, got %zu", name, i, env.n);
	printf("  ok %-28s opened: %zu variables\n", name, env.n);
	juice_env_clear(&env);
	CHECK(env.buf == NULL && env.n == 0, "env clear");
	free(exp);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Copy src to dst with mode 0600 (a checkout does not keep modes); 0 or -1
 * (src missing). */
static int copy_private(const char *src, const char *dst)
{
	size_t len;
	char *data = slurp(src, &len);
	FILE *f;

	if (!data)
		return -1;
	unlink(dst);
	f = fopen(dst, "w");
	if (f) {
		fwrite(data, 1, len, f);
		fclose(f);
	}
	chmod(dst, 0600);
	free(data);
	return f ? 0 : -1;
}

static void test_session_dir(const char *dir)
{
	struct juice_keys keys;
	char path[4096], err[1024], *names[256], tmp[] = "/tmp/juice-keys.XXXXXX";
	char kpath[4200], kprev[4300];
	struct dirent *de;
	size_t n = 0, i;
	int have_prev;
	DIR *d;

	printf("session vectors in %s:\n", dir);
	/* key.hex, and key.hex.previous when the set has one. */
	CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
	snprintf(kpath, sizeof(kpath), "%s/key.hex", tmp);
	snprintf(kprev, sizeof(kprev), "%s%s", kpath, JUICE_KEY_PREVIOUS_SUFFIX);
	snprintf(path, sizeof(path), "%s/key.hex", dir);
	CHECK(copy_private(path, kpath) == 0, "cannot read %s", path);
	snprintf(path, sizeof(path), "%s/key.hex%s", dir,
		 JUICE_KEY_PREVIOUS_SUFFIX);
	have_prev = copy_private(path, kprev) == 0;
	CHECK(juice_keys_load(kpath, &keys, err, sizeof(err)) == 0 &&
	      keys.n == (size_t)(have_prev ? 2 : 1), "keys: %s", err);
	unlink(kpath);
	unlink(kprev);
	rmdir(tmp);
	d = opendir(dir);
	CHECK(d != NULL, "cannot open %s: %s", dir, strerror(errno));
	if (!d)
		return;
	while ((de = readdir(d)) && n < 256) {
		size_t len = strlen(de->d_name);
		if (len > 7 && strcmp(de->d_name + len - 7, ".expect") == 0)
			names[n++] = strndup(de->d_name, len - 7);
	}
	closedir(d);
	qsort(names, n, sizeof(names[0]), cmp_str);
	CHECK(n > 0, "%s holds no .expect files", dir);
	for (i = 0; i < n; i++) {
		test_session_case(dir, names[i], &keys);
		free(names[i]);
	}
	juice_keys_clear(&keys);
}

static void write_file(const char *path, const char *s, mode_t mode)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(s, f);
		fclose(f);
	}
	chmod(path, mode);
}

static void test_key_and_find(void)
{
	char dir[] = "/tmp/juice-spank-test.XXXXXX", path[4200], err[1024];
	unsigned char key[JUICE_KEY_LEN];
	uint32_t run = 99;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	/* Key files. */
	snprintf(path, sizeof(path), "%s/k", dir);
	write_file(path, "000102030405060708090a0b0c0d0e0f"
			 "101112131415161718191a1b1c1d1e1f", 0600);
	CHECK(juice_key_load(path, key, err, sizeof(err)) == 0 &&
	      key[0] == 0 && key[31] == 0x1f, "key without newline: %s", err);
	write_file(path, "000102030405060708090A0B0C0D0E0F"
			 "101112131415161718191a1b1c1d1e1f\n", 0644);
	CHECK(juice_key_load(path, key, err, sizeof(err)) < 0 &&
	      strstr(err, "other users"), "world-readable key refused: %s",
	      err);
	/* F8: any group or other bit refuses a key, everywhere. */
	{
		static const mode_t bits[] = { 0040, 0020, 0010, 0004, 0002,
					       0001 };
		size_t b;
		for (b = 0; b < sizeof(bits) / sizeof(bits[0]); b++) {
			chmod(path, 0600 | bits[b]);
			CHECK(juice_key_load(path, key, err, sizeof(err)) < 0 &&
			      strstr(err, "group or other"),
			      "key with mode %04o refused: %s",
			      (unsigned)(0600 | bits[b]), err);
		}
	}
	chmod(path, 0600);
	CHECK(juice_key_load(path, key, err, sizeof(err)) == 0,
	      "key with newline, upper case: %s", err);
	write_file(path, "0001020304\n", 0600);
	CHECK(juice_key_load(path, key, err, sizeof(err)) < 0,
	      "short key refused");
	write_file(path, "000102030405060708090a0b0c0d0e0f"
			 "101112131415161718191a1b1c1d1e1g\n", 0600);
	CHECK(juice_key_load(path, key, err, sizeof(err)) < 0,
	      "non-hex key refused");
	write_file(path, "000102030405060708090a0b0c0d0e0f"
			 "101112131415161718191a1b1c1d1e1f\n\n", 0600);
	CHECK(juice_key_load(path, key, err, sizeof(err)) < 0,
	      "key with two newlines refused");
	CHECK(juice_key_load("", key, err, sizeof(err)) < 0 &&
	      strstr(err, "key="), "no key configured: %s", err);
	CHECK(juice_key_load("/nonexistent/k", key, err, sizeof(err)) < 0,
	      "missing key file");

	/* The current key and the previous one (rotation). */
	{
		struct juice_keys keys;
		char prev[4300];
		char id[JUICE_KEY_ID_LEN + 1];

		write_file(path, "000102030405060708090a0b0c0d0e0f"
				 "101112131415161718191a1b1c1d1e1f\n", 0600);
		snprintf(prev, sizeof(prev), "%s.previous", path);
		CHECK(juice_keys_load(path, &keys, err, sizeof(err)) == 0 &&
		      keys.n == 1 && keys.key[0][31] == 0x1f,
		      "no previous key: the current one alone: %s", err);
		juice_key_id(keys.key[0], id);
		CHECK(strcmp(id, keys.id[0]) == 0 && strlen(id) == 16 &&
		      strspn(id, "0123456789abcdef") == 16, "key id %s", id);
		write_file(prev, "ffffffffffffffffffffffffffffffff"
				 "ffffffffffffffffffffffffffffffff\n", 0600);
		CHECK(juice_keys_load(path, &keys, err, sizeof(err)) == 0 &&
		      keys.n == 2 && keys.key[1][0] == 0xff &&
		      strcmp(keys.id[0], keys.id[1]) != 0,
		      "the previous key is read: %s", err);
		chmod(prev, 0640);
		CHECK(juice_keys_load(path, &keys, err, sizeof(err)) < 0 &&
		      strstr(err, "group or other") && keys.n == 0,
		      "a group-readable previous key is refused: %s", err);
		unlink(prev);
		CHECK(symlink(path, prev) == 0, "symlink");
		CHECK(juice_keys_load(path, &keys, err, sizeof(err)) < 0,
		      "a symlinked previous key is refused");
		unlink(prev);
		juice_keys_clear(&keys);
	}
	unlink(path);

	/* Finding the session file: the newest at or above the bound. */
	CHECK(juice_session_find(dir, 42, 0, path, sizeof(path), &run, err,
				 sizeof(err)) < 0 && strstr(err, "no session"),
	      "missing session: %s", err);
	CHECK(juice_session_find("/nonexistent", 42, 0, path, sizeof(path),
				 &run, err, sizeof(err)) < 0,
	      "missing state directory");
	snprintf(path, sizeof(path), "%s/42.0.session", dir);
	write_file(path, "x", 0600);
	CHECK(juice_session_find(dir, 42, 0, path, sizeof(path), &run, err,
				 sizeof(err)) == 0 && run == 0 &&
	      strstr(path, "/42.0.session"), "only run 0");
	CHECK(juice_session_find(dir, 42, 2, path, sizeof(path), &run, err,
				 sizeof(err)) < 0 && strstr(err, "older run 0"),
	      "an older run's file is not taken: %s", err);
	snprintf(path, sizeof(path), "%s/42.3.session", dir);
	write_file(path, "x", 0600);
	snprintf(path, sizeof(path), "%s/42.12.session", dir);
	write_file(path, "x", 0600);
	snprintf(path, sizeof(path), "%s/420.99.session", dir);
	write_file(path, "x", 0600);
	snprintf(path, sizeof(path), "%s/4.299.session", dir);
	write_file(path, "x", 0600);
	snprintf(path, sizeof(path), "%s/42.013.session", dir);
	write_file(path, "x", 0600);
	snprintf(path, sizeof(path), "%s/42.77.session.tmp", dir);
	write_file(path, "x", 0600);
	CHECK(juice_session_find(dir, 42, 0, path, sizeof(path), &run, err,
				 sizeof(err)) == 0 && run == 12 &&
	      strstr(path, "/42.12.session"), "newest run from 0: %s %u",
	      path, run);
	CHECK(juice_session_find(dir, 42, 12, path, sizeof(path), &run, err,
				 sizeof(err)) == 0 && run == 12, "exact run 12");
	CHECK(juice_session_find(dir, 42, 13, path, sizeof(path), &run, err,
				 sizeof(err)) < 0 && strstr(err, "older run 12"),
	      "bound above every file: %s", err);
	CHECK(juice_session_find(dir, 7, 0, path, sizeof(path), &run, err,
				 sizeof(err)) < 0, "other job's files ignored");
	{
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		CHECK(system(cmd) == 0, "cleanup");
	}
}


/* Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this process: root then
 * reads files by their modes, as a squashed root does on NFS. */
static int drop_dac_caps(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	unsigned i;

	if (syscall(SYS_capget, &h, d) < 0)
		return -1;
	for (i = 0; i < 2; i++) {
		d[i].effective &= ~(CAP_TO_MASK(CAP_DAC_OVERRIDE) |
				    CAP_TO_MASK(CAP_DAC_READ_SEARCH));
		d[i].permitted &= ~(CAP_TO_MASK(CAP_DAC_OVERRIDE) |
				    CAP_TO_MASK(CAP_DAC_READ_SEARCH));
		d[i].inheritable = 0;
	}
	/* Only word 0 holds these two (capabilities 1 and 2). */
	return (int)syscall(SYS_capset, &h, d);
}

#define SQUASH_UID 65534  /* stands for SlurmUser: not root, not us */
#define SQUASH_GID 65534

/* In a child without the two capabilities: the state directory of another
 * user, mode 0700, and its 0600 session file are out of root's reach, and
 * juice_state_enter makes them readable, then takes root's identity back. */
static int state_identity_as_squashed_root(const char *dir)
{
	char path[4200], other[4200], err[1024];
	struct juice_state_id id;
	struct juice_env env;
	struct juice_keys keys = { .n = 1 };
	uint32_t run = 99;
	int fd;

	if (drop_dac_caps() < 0) {
		CHECK(0, "capset: %s", strerror(errno));
		return failed;
	}
	snprintf(path, sizeof(path), "%s/42.0.session", dir);
	snprintf(other, sizeof(other), "%s/43.0.session", dir);
	fd = open(path, O_RDONLY);
	CHECK(fd < 0 && errno == EACCES, "root without DAC capabilities "
	      "reads another user's 0600 file: the emulation of root_squash "
	      "does not hold (%s)", fd < 0 ? strerror(errno) : "opened");
	if (fd >= 0)
		close(fd);
	CHECK(juice_session_find(dir, 42, 0, path, sizeof(path), &run, err,
				 sizeof(err)) < 0, "the directory is readable "
	      "without the owner's identity");

	CHECK(juice_state_enter(dir, &id, err, sizeof(err)) == 0 &&
	      id.switched && id.owner == SQUASH_UID, "enter: %s", err);
	CHECK(juice_session_find(dir, 42, 0, path, sizeof(path), &run, err,
				 sizeof(err)) == 0 && run == 0,
	      "the owner's identity reads the directory: %s", err);
	/* The file opens and is read: it fails later, on its header. */
	CHECK(juice_session_open_owned(path, &keys, "c1", 42, 0, id.owner, &env,
				       err, sizeof(err)) < 0 &&
	      strstr(err, "header") && !strstr(err, "cannot open"),
	      "the owner's identity reads the file: %s", err);
	CHECK(juice_session_open_owned(other, &keys, "c1", 43, 0, id.owner, &env,
				       err, sizeof(err)) < 0 &&
	      strstr(err, "belongs to uid"), "a file of another owner "
	      "is refused: %s", err);
	CHECK(juice_state_leave(&id, err, sizeof(err)) == 0 && !id.switched,
	      "leave: %s", err);
	fd = open(path, O_RDONLY);
	CHECK(fd < 0 && errno == EACCES, "after leave the file is still "
	      "readable: the owner's identity was kept");
	if (fd >= 0)
		close(fd);
	return failed;
}

static void test_state_identity(void)
{
	char dir[] = "/tmp/juice-spank-state.XXXXXX", path[4200], err[1024];
	struct juice_state_id id;
	pid_t pid;
	int status, before = failed;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	chmod(dir, 0770);
	CHECK(juice_state_enter(dir, &id, err, sizeof(err)) < 0 &&
	      strstr(err, "writable by other users"),
	      "a group-writable state directory is refused: %s", err);
	chmod(dir, 0700);
	if (geteuid() != 0) {
		CHECK(juice_state_enter(dir, &id, err, sizeof(err)) == 0 &&
		      !id.switched && id.owner == getuid(),
		      "not root: no switch: %s", err);
		CHECK(juice_state_leave(&id, err, sizeof(err)) == 0, "leave");
		printf("NOTE: not root: reading as the state directory's owner "
		       "under a squashed root is tested as root only\n");
		rmdir(dir);
		return;
	}
	CHECK(juice_state_enter(dir, &id, err, sizeof(err)) < 0 &&
	      strstr(err, "belongs to root"), "a root-owned state directory "
	      "is refused: %s", err);
	snprintf(path, sizeof(path), "%s/42.0.session", dir);
	write_file(path, "not a session\n", 0600);
	CHECK(chown(path, SQUASH_UID, SQUASH_GID) == 0, "chown");
	/* Another user's, readable by all: read, and refused for its owner. */
	snprintf(path, sizeof(path), "%s/43.0.session", dir);
	write_file(path, "not a session\n", 0644);
	CHECK(chown(path, SQUASH_UID - 1, SQUASH_GID) == 0, "chown");
	CHECK(chown(dir, SQUASH_UID, SQUASH_GID) == 0, "chown");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		failed = 0;
		int rc = state_identity_as_squashed_root(dir) ? 1 : 0;
		fflush(stdout);
		_exit(rc);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0, "reading the state directory as its "
	      "owner under a squashed root (failures above)");
	{
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		CHECK(system(cmd) == 0, "cleanup");
	}
	if (failed == before)
		printf("ok: state directory read as its owner by root without "
		       "CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH\n");
}

static void test_header(void)
{
	char err[256];
	struct juice_header h;
	const char *good1 = "JUICE-SESSION v1 cluster=c1 job=4294967295 run=0";
	const char *good2 = "JUICE-SESSION v2 cluster=c1 job=7 run=3 "
		"reservation=7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f "
		"key=0123456789abcdef";
	const char *bad[] = {
		"JUICE-SESSION v1 cluster=c1 job=4294967296 run=0",
		"JUICE-SESSION v1 cluster=c1 job=1 run=-1",
		"JUICE-SESSION v1 cluster=c1 job=1 run=",
		"JUICE-SESSION v1 cluster= job=1 run=0",
		"JUICE-SESSION v1 cluster=c1  job=1 run=0",
		"JUICE-SESSION v1 job=1 cluster=c1 run=0",
		"JUICE-SESSION v1 cluster=c1 job=1 run=0 ",
		"JUICE-SESSION  v1 cluster=c1 job=1 run=0",
		"juice-session v1 cluster=c1 job=1 run=0",
		"JUICE-SESSION v10 cluster=c1 job=1 run=0",
		"JUICE-SESSION v1 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f key=0123456789abcdef",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7C2B9E4A-1D3F-4B6A-8E5C-0A1B2C3D4E5F key=0123456789abcdef",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a1d3f-4b6a-8e5c-0a1b2c3d4e5f0 key=0123456789abcdef",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5 key=0123456789abcdef",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f key=0123456789abcde",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f key=0123456789abcdef0",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 reservation="
			"7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f key=0123456789ABCDEF",
		"JUICE-SESSION v2 cluster=c1 job=1 run=0 key=0123456789abcdef "
			"reservation=7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f",
		"JUICE-SESSION v3 cluster=c1 job=1 run=0",
		NULL,
	};
	int i;

	CHECK(juice_session_parse_header(good1, strlen(good1), &h, err,
					 sizeof(err)) == 0 && h.version == 1 &&
	      h.job_id == 4294967295U && h.run == 0 &&
	      strcmp(h.cluster, "c1") == 0 && h.reservation[0] == '\0' &&
	      h.key_id[0] == '\0', "good v1 header: %s", err);
	CHECK(juice_session_parse_header(good2, strlen(good2), &h, err,
					 sizeof(err)) == 0 && h.version == 2 &&
	      h.job_id == 7 && h.run == 3 &&
	      strcmp(h.reservation, "7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f") ==
		      0 && strcmp(h.key_id, "0123456789abcdef") == 0,
	      "good v2 header: %s", err);
	for (i = 0; bad[i]; i++)
		CHECK(juice_session_parse_header(bad[i], strlen(bad[i]), &h,
						 err, sizeof(err)) < 0,
		      "bad header accepted: %s", bad[i]);
}

int main(int argc, char **argv)
{
	int i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--tables") == 0) {
			test_vram_table(argv[i + 1]);
			test_sizes_table(argv[i + 1]);
			test_options_table(argv[i + 1]);
			test_requests_table(argv[i + 1]);
		} else if (strcmp(argv[i], "--session") == 0) {
			test_session_dir(argv[i + 1]);
		} else if (strcmp(argv[i], "--missing") == 0) {
			CHECK(0, "session vectors %s/key.hex not found (run "
			      "go run ./test/vectors/gen test/vectors/session)",
			      argv[i + 1]);
		} else {
			fprintf(stderr, "usage: %s [--tables DIR] [--session DIR]"
				"... [--missing DIR]\n", argv[0]);
			return 2;
		}
	}
	test_args();
	test_request_format();
	test_resolve_bounds();
	test_session_request();
	test_quote();
	test_header();
	test_key_and_find();
	test_state_identity();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
