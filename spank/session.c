/*
 * session.c - open, verify and decrypt a Juice session file
 * (test/vectors/README.md section 4).  AES-256-GCM through libcrypto; the
 * key and the plaintext are wiped with explicit_bzero.
 */
#include "session.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits.h>

#include <openssl/evp.h>

#define NONCE_LEN 12
#define TAG_LEN 16
#define NAME_MAX_LEN 128

/*
 * Read a whole small regular file without following a symlink in its last
 * component.  *data is NUL-terminated; free (and wipe) it.  With owner not
 * NULL the file must belong to *owner and be writable by it alone.
 */
static int read_small_file(const char *path, size_t max, int strict,
			   const uid_t *owner, char **data, size_t *len,
			   char *err, size_t errlen)
{
	struct stat st;
	size_t total = 0;
	char *buf = NULL;
	int fd;

	*data = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
			O_NONBLOCK);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path,
			 strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot stat %s: %s", path,
			 strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		goto fail;
	}
	if (owner && st.st_uid != *owner) {
		snprintf(err, errlen, "%s belongs to uid %u, not to the state "
			 "directory's owner (uid %u)", path,
			 (unsigned)st.st_uid, (unsigned)*owner);
		goto fail;
	}
	if (owner && (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(err, errlen, "%s is writable by other users (mode "
			 "%04o)", path, (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	if (strict && (st.st_mode & (S_IRWXG | S_IRWXO))) {
		snprintf(err, errlen,
			 "%s is accessible to the group or other users "
			 "(mode %04o): chmod 0600 it", path,
			 (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	if (st.st_size < 0 || (size_t)st.st_size > max) {
		snprintf(err, errlen, "%s is too large (%lld bytes, at most "
			 "%zu)", path, (long long)st.st_size, max);
		goto fail;
	}
	buf = malloc(max + 2);
	if (!buf) {
		snprintf(err, errlen, "out of memory reading %s", path);
		goto fail;
	}
	for (;;) {
		ssize_t r = read(fd, buf + total, max + 1 - total);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "cannot read %s: %s", path,
				 strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		total += (size_t)r;
		if (total > max) {
			snprintf(err, errlen, "%s is too large (more than %zu "
				 "bytes)", path, max);
			goto fail;
		}
	}
	close(fd);
	buf[total] = '\0';
	*data = buf;
	*len = total;
	return 0;
fail:
	if (buf) {
		explicit_bzero(buf, max + 2);
		free(buf);
	}
	close(fd);
	return -1;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int juice_key_load(const char *path, unsigned char key[JUICE_KEY_LEN],
		   char *err, size_t errlen)
{
	char *data;
	size_t len, i;
	int rc = -1;

	if (!path || !*path) {
		snprintf(err, errlen, "no cluster key configured (plugstack "
			 "argument key=/path/to/cluster.key)");
		return -1;
	}
	/* A key opens every job's session: any group or other bit refuses
	 * it (strict), as internal/secretfile does on the controller. */
	if (read_small_file(path, 256, 1, NULL, &data, &len, err, errlen) < 0)
		return -1;
	if (len == 2 * JUICE_KEY_LEN + 1 && data[len - 1] == '\n')
		len--;
	if (len != 2 * JUICE_KEY_LEN) {
		snprintf(err, errlen, "key file %s must hold 64 hexadecimal "
			 "characters and an optional newline", path);
		goto out;
	}
	for (i = 0; i < JUICE_KEY_LEN; i++) {
		int hi = hexval(data[2 * i]), lo = hexval(data[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			snprintf(err, errlen, "key file %s must hold 64 "
				 "hexadecimal characters and an optional "
				 "newline", path);
			explicit_bzero(key, JUICE_KEY_LEN);
			goto out;
		}
		key[i] = (unsigned char)(hi << 4 | lo);
	}
	rc = 0;
out:
	explicit_bzero(data, 256 + 2);
	free(data);
	return rc;
}

void juice_key_id(const unsigned char key[JUICE_KEY_LEN],
		  char id[JUICE_KEY_ID_LEN + 1])
{
	static const char label[] = "juice-slurm session key id\n";
	static const char hex[] = "0123456789abcdef";
	unsigned char in[sizeof(label) - 1 + JUICE_KEY_LEN];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t i;

	memcpy(in, label, sizeof(label) - 1);
	memcpy(in + sizeof(label) - 1, key, JUICE_KEY_LEN);
	if (EVP_Digest(in, sizeof(in), md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen < JUICE_KEY_ID_LEN / 2) {
		/* No digest: an id no header can match (never a key). */
		memset(id, '-', JUICE_KEY_ID_LEN);
	} else {
		for (i = 0; i < JUICE_KEY_ID_LEN / 2; i++) {
			id[2 * i] = hex[md[i] >> 4];
			id[2 * i + 1] = hex[md[i] & 15];
		}
	}
	id[JUICE_KEY_ID_LEN] = '\0';
	explicit_bzero(in, sizeof(in));
}

void juice_keys_clear(struct juice_keys *keys)
{
	explicit_bzero(keys, sizeof(*keys));
}

int juice_keys_load(const char *path, struct juice_keys *keys, char *err,
		    size_t errlen)
{
	char prev[PATH_MAX];
	struct stat st;
	int w;

	memset(keys, 0, sizeof(*keys));
	if (juice_key_load(path, keys->key[0], err, errlen) < 0)
		return -1;
	juice_key_id(keys->key[0], keys->id[0]);
	keys->n = 1;
	w = snprintf(prev, sizeof(prev), "%s%s", path,
		     JUICE_KEY_PREVIOUS_SUFFIX);
	if (w < 0 || (size_t)w >= sizeof(prev)) {
		juice_keys_clear(keys);
		snprintf(err, errlen, "key file path %s is too long", path);
		return -1;
	}
	/* No previous key: only the current one.  Anything else about it
	 * (a bad mode, a symlink, bad content) is an error, never "none". */
	if (lstat(prev, &st) < 0 && errno == ENOENT)
		return 0;
	if (juice_key_load(prev, keys->key[1], err, errlen) < 0) {
		juice_keys_clear(keys);
		return -1;
	}
	juice_key_id(keys->key[1], keys->id[1]);
	keys->n = 2;
	return 0;
}

void juice_env_clear(struct juice_env *env)
{
	if (env->buf) {
		explicit_bzero(env->buf, env->buflen);
		free(env->buf);
	}
	explicit_bzero(env, sizeof(*env));
}

const char *juice_env_get(const struct juice_env *env, const char *name)
{
	size_t i;

	for (i = 0; i < env->n; i++)
		if (strcmp(env->vars[i].name, name) == 0)
			return env->vars[i].value;
	return NULL;
}

int juice_session_check_request(const struct juice_env *env, const char *pool,
				const char *gpus, const char *vram,
				struct juice_request *req, char *err,
				size_t errlen)
{
	const char *text = juice_env_get(env, "JUICE_REQUEST"), *what = NULL;
	char why[512];
	int rc;

	if (!text) {
		memset(req, 0, sizeof(*req));
		snprintf(err, errlen, "it holds no JUICE_REQUEST");
		return -1;
	}
	rc = juice_request_parse(text, req, &what);
	if (rc == 0) {
		snprintf(err, errlen, "its JUICE_REQUEST is not a Juice "
			 "request");
		return -1;
	}
	if (rc < 0) {
		snprintf(err, errlen, "its JUICE_REQUEST is not a canonical "
			 "Juice request (bad %s)", what);
		return -1;
	}
	if (juice_request_matches(req, pool, gpus, vram, why,
				  sizeof(why)) < 0) {
		snprintf(err, errlen, "%s", why);
		return -1;
	}
	return 0;
}

/* Strict decimal uint32: digits, no sign, no leading zero (but "0"). */
static const char *parse_u32(const char *p, const char *end, uint32_t *out)
{
	uint64_t v = 0;
	const char *s = p;

	while (p < end && *p >= '0' && *p <= '9') {
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > UINT32_MAX)
			return NULL;
		p++;
	}
	if (p == s || (*s == '0' && p - s > 1))
		return NULL;
	*out = (uint32_t)v;
	return p;
}

static int expect(const char **p, const char *end, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
		return -1;
	*p += n;
	return 0;
}

/* Exactly n characters of set (a NUL-terminated list), copied into out. */
static int take_chars(const char **p, const char *end, size_t n,
		      const char *set, char *out)
{
	size_t i;

	if ((size_t)(end - *p) < n)
		return -1;
	for (i = 0; i < n; i++)
		if ((*p)[i] == '\0' || !strchr(set, (*p)[i]))
			return -1;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p += n;
	return 0;
}

/* A lower-case UUID: 8-4-4-4-12 hex digits. */
static int take_uuid(const char **p, const char *end, char *out)
{
	static const size_t parts[] = { 8, 4, 4, 4, 12 };
	const char *hexset = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < 5; i++) {
		if (i > 0) {
			if (expect(p, end, "-") < 0)
				return -1;
			out[o++] = '-';
		}
		if (take_chars(p, end, parts[i], hexset, out + o) < 0)
			return -1;
		o += parts[i];
	}
	return 0;
}

int juice_session_parse_header(const char *line, size_t len,
			       struct juice_header *h, char *err,
			       size_t errlen)
{
	const char *p = line, *end = line + len, *c;
	size_t n;

	memset(h, 0, sizeof(*h));
	if (expect(&p, end, "JUICE-SESSION ") < 0) {
		snprintf(err, errlen, "not a Juice session file (bad header)");
		return -1;
	}
	if (expect(&p, end, "v2 ") == 0) {
		h->version = 2;
	} else if (expect(&p, end, "v1 ") == 0) {
		h->version = 1;
	} else {
		char v[24];
		size_t k = 0;
		while (p + k < end && p[k] != ' ' && k < 16)
			k++;
		memcpy(v, p, k);
		v[k] = '\0';
		{
			char q[80];
			juice_quote(v, q, sizeof(q));
			snprintf(err, errlen, "unsupported session file "
				 "version \"%s\" (this plugin reads v2 and "
				 "v1)", q);
		}
		return -1;
	}
	if (expect(&p, end, "cluster=") < 0)
		goto bad;
	for (c = p; p < end && *p != ' '; p++)
		;
	n = (size_t)(p - c);
	if (n == 0 || n > JUICE_CLUSTER_MAX)
		goto bad;
	memcpy(h->cluster, c, n);
	h->cluster[n] = '\0';
	if (juice_cluster_valid(h->cluster) < 0)
		goto bad;
	if (expect(&p, end, " job=") < 0 ||
	    !(p = parse_u32(p, end, &h->job_id)) ||
	    expect(&p, end, " run=") < 0 ||
	    !(p = parse_u32(p, end, &h->run)))
		goto bad;
	if (h->version == 2 &&
	    (expect(&p, end, " reservation=") < 0 ||
	     take_uuid(&p, end, h->reservation) < 0 ||
	     expect(&p, end, " key=") < 0 ||
	     take_chars(&p, end, JUICE_KEY_ID_LEN, "0123456789abcdef",
			h->key_id) < 0))
		goto bad;
	if (p != end)
		goto bad;
	return 0;
bad:
	memset(h, 0, sizeof(*h));
	snprintf(err, errlen, "malformed session file header (expected "
		 "\"JUICE-SESSION v2 cluster=NAME job=N run=N reservation=UUID "
		 "key=ID\")");
	return -1;
}

/* AES-256-GCM open.  Returns plaintext length, or -1. */
static int gcm_open(const unsigned char key[JUICE_KEY_LEN],
		    const unsigned char *aad, int aadlen,
		    const unsigned char *nonce, const unsigned char *ct,
		    int ctlen, const unsigned char *tag, unsigned char *pt)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int len = 0, total = -1, fin = 0;

	if (!ctx)
		return -1;
	if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN,
				NULL) != 1 ||
	    EVP_DecryptInit_ex(ctx, NULL, NULL, key, nonce) != 1 ||
	    EVP_DecryptUpdate(ctx, NULL, &len, aad, aadlen) != 1 ||
	    EVP_DecryptUpdate(ctx, pt, &len, ct, ctlen) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN,
				(void *)tag) != 1)
		goto out;
	total = len;
	if (EVP_DecryptFinal_ex(ctx, pt + len, &fin) != 1) {
		total = -1;
		goto out;
	}
	total += fin;
out:
	EVP_CIPHER_CTX_free(ctx);  /* wipes its key schedule */
	return total;
}

static int name_ok(const char *s, size_t n)
{
	size_t i;

	if (n <= 6 || n > NAME_MAX_LEN || memcmp(s, "JUICE_", 6) != 0)
		return 0;
	for (i = 6; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

/* Split the plaintext in place into the variables.  0 or -1 with err. */
static int parse_plaintext(struct juice_env *out, size_t ptlen, char *err,
			   size_t errlen)
{
	char *p = out->buf, *end = out->buf + ptlen;
	size_t lineno = 0, i;

	if (ptlen == 0)
		return 0;  /* no variables: allowed (test vector empty-env) */
	if (memchr(out->buf, '\0', ptlen)) {
		snprintf(err, errlen, "session file plaintext holds a NUL byte");
		return -1;
	}
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *eq;

		lineno++;
		if (!nl)
			nl = end;  /* last line without a newline */
		*nl = '\0';
		eq = memchr(p, '=', (size_t)(nl - p));
		if (!eq || !name_ok(p, (size_t)(eq - p))) {
			snprintf(err, errlen, "session file line %zu is not "
				 "JUICE_NAME=VALUE", lineno);
			return -1;
		}
		*eq = '\0';
		for (i = 0; i < out->n; i++)
			if (strcmp(out->vars[i].name, p) == 0) {
				snprintf(err, errlen, "session file sets %s "
					 "twice", p);
				return -1;
			}
		if (out->n == JUICE_SESSION_MAX_VARS) {
			snprintf(err, errlen, "session file sets more than %d "
				 "variables", JUICE_SESSION_MAX_VARS);
			return -1;
		}
		out->vars[out->n].name = p;
		out->vars[out->n].value = eq + 1;
		out->n++;
		p = nl + 1;
	}
	return 0;
}

static int session_open(const char *path, const struct juice_keys *keys,
			const char *cluster, uint32_t job_id, long run,
			const char *reservation, const uid_t *owner,
			struct juice_env *out, char *err, size_t errlen);

int juice_session_open(const char *path, const struct juice_keys *keys,
		       const char *cluster, uint32_t job_id, long run,
		       const char *reservation, struct juice_env *out,
		       char *err, size_t errlen)
{
	return session_open(path, keys, cluster, job_id, run, reservation,
			    NULL, out, err, errlen);
}

int juice_session_open_owned(const char *path, const struct juice_keys *keys,
			     const char *cluster, uint32_t job_id, long run,
			     uid_t owner, struct juice_env *out, char *err,
			     size_t errlen)
{
	/* The compute node does not know the job's reservation (it is in
	 * PostgreSQL, not in anything slurmstepd hands a plugin). */
	return session_open(path, keys, cluster, job_id, run, NULL, &owner,
			    out, err, errlen);
}

static int session_open(const char *path, const struct juice_keys *keys,
			const char *cluster, uint32_t job_id, long run,
			const char *reservation, const uid_t *owner,
			struct juice_env *out, char *err, size_t errlen)
{
	struct juice_header h;
	char *data = NULL, *nl;
	size_t len, hlen, bodylen, ctlen, k, first, last;
	const unsigned char *body;
	int ptlen = -1, rc = -1;

	memset(out, 0, sizeof(*out));
	if (!keys || keys->n == 0 || keys->n > JUICE_KEYS_MAX) {
		snprintf(err, errlen, "no cluster key to open %s with", path);
		return -1;
	}
	if (read_small_file(path, JUICE_SESSION_MAX_FILE, 0, owner, &data, &len,
			    err, errlen) < 0)
		return -1;

	nl = memchr(data, '\n', len < JUICE_SESSION_HEADER_MAX ?
				len : JUICE_SESSION_HEADER_MAX);
	if (!nl) {
		snprintf(err, errlen, "%s: %s", path, len ?
			 "malformed session file header (no header line)" :
			 "empty session file");
		goto out;
	}
	hlen = (size_t)(nl - data);
	if (juice_session_parse_header(data, hlen, &h, err, errlen) < 0) {
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s", err);
		snprintf(err, errlen, "%s: %s", path, tmp);
		goto out;
	}
	if (h.job_id != job_id) {
		snprintf(err, errlen, "%s is for job %u, not for job %u", path,
			 h.job_id, job_id);
		goto out;
	}
	if (cluster && *cluster && strcmp(cluster, h.cluster) != 0) {
		snprintf(err, errlen, "%s is for cluster %s, not for cluster "
			 "%s", path, h.cluster, cluster);
		goto out;
	}
	if (run >= 0 && (long)h.run != run) {
		snprintf(err, errlen, "%s is for run %u of job %u, not for run "
			 "%ld", path, h.run, job_id, run);
		goto out;
	}
	if (reservation && strcmp(reservation, h.reservation) != 0) {
		snprintf(err, errlen, "%s is %s%s, not of reservation %.36s "
			 "(a stale file)", path, h.version == 1 ?
			 "a version 1 file, of no reservation" :
			 "of reservation ", h.reservation, reservation);
		goto out;
	}
	/* Version 2 names its key: that one only.  Version 1 names none. */
	first = 0;
	last = keys->n;
	if (h.version == 2) {
		for (k = 0; k < keys->n; k++)
			if (strcmp(keys->id[k], h.key_id) == 0)
				break;
		if (k == keys->n) {
			snprintf(err, errlen, "%s was sealed under key %s, "
				 "which this node does not have (its keys: "
				 "%s%s%s): rotated out, or another cluster's",
				 path, h.key_id, keys->id[0],
				 keys->n > 1 ? ", " : "",
				 keys->n > 1 ? keys->id[1] : "");
			goto out;
		}
		first = k;
		last = k + 1;
	}

	body = (const unsigned char *)nl + 1;
	bodylen = len - hlen - 1;
	if (bodylen < NONCE_LEN + TAG_LEN) {
		snprintf(err, errlen, "%s is truncated (%zu bytes after the "
			 "header, at least %d needed)", path, bodylen,
			 NONCE_LEN + TAG_LEN);
		goto out;
	}
	ctlen = bodylen - NONCE_LEN - TAG_LEN;
	out->buflen = ctlen + 16;
	out->buf = malloc(out->buflen);
	if (!out->buf) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (k = first; k < last && ptlen < 0; k++)
		ptlen = gcm_open(keys->key[k], (const unsigned char *)data,
				 (int)hlen, body, body + NONCE_LEN, (int)ctlen,
				 body + NONCE_LEN + ctlen,
				 (unsigned char *)out->buf);
	if (ptlen < 0) {
		snprintf(err, errlen, "%s failed verification: it was altered, "
			 "truncated or sealed with another key", path);
		goto out;
	}
	memcpy(out->cluster, h.cluster, sizeof(out->cluster));
	out->job_id = h.job_id;
	out->run = h.run;
	memcpy(out->reservation, h.reservation, sizeof(out->reservation));
	memcpy(out->key_id, keys->id[k - 1], sizeof(out->key_id));
	out->buf[ptlen] = '\0';
	if (parse_plaintext(out, (size_t)ptlen, err, errlen) < 0) {
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s", err);
		snprintf(err, errlen, "%s: %s", path, tmp);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		juice_env_clear(out);
	explicit_bzero(data, JUICE_SESSION_MAX_FILE + 2);
	free(data);
	return rc;
}

/* "<job>.<n>.session" -> n.  0 or -1. */
static int match_name(const char *name, uint32_t job_id, uint32_t *n)
{
	char prefix[16];
	size_t plen, len = strlen(name);
	const char *p, *end;

	plen = (size_t)snprintf(prefix, sizeof(prefix), "%u.", job_id);
	if (len <= plen + 8 || strncmp(name, prefix, plen) != 0 ||
	    strcmp(name + len - 8, ".session") != 0)
		return -1;
	p = name + plen;
	end = name + len - 8;
	p = parse_u32(p, end, n);
	return p == end ? 0 : -1;
}

int juice_session_find(const char *dir, uint32_t job_id, uint32_t min_run,
		       char *path, size_t pathlen, uint32_t *found_run,
		       char *err, size_t errlen)
{
	struct dirent *de;
	DIR *d;
	uint32_t best = 0, older = 0, n;
	int have_best = 0, have_older = 0, w;

	d = opendir(dir);
	if (!d) {
		snprintf(err, errlen, "cannot read the state directory %s: %s",
			 dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		if (match_name(de->d_name, job_id, &n) < 0)
			continue;
		if (n >= min_run && (!have_best || n > best)) {
			best = n;
			have_best = 1;
		} else if (n < min_run && (!have_older || n > older)) {
			older = n;
			have_older = 1;
		}
	}
	closedir(d);
	if (have_best) {
		w = snprintf(path, pathlen, "%s/%u.%u.session", dir, job_id,
			     best);
		if (w < 0 || (size_t)w >= pathlen) {
			snprintf(err, errlen, "state directory path too long");
			return -1;
		}
		*found_run = best;
		return 0;
	}
	if (have_older)
		snprintf(err, errlen, "no session file for job %u run %u in %s "
			 "(only one of the older run %u, whose session is "
			 "gone): the Juice GPUs were not made ready for this "
			 "run", job_id, min_run, dir, older);
	else
		snprintf(err, errlen, "no session file for job %u in %s: the "
			 "Juice GPUs were not made ready for this job (did "
			 "PrologSlurmctld run juice-prolog.sh?)", job_id, dir);
	return -1;
}

int juice_state_enter(const char *dir, struct juice_state_id *id, char *err,
		      size_t errlen)
{
	struct stat st;
	int prev;

	memset(id, 0, sizeof(*id));
	if (stat(dir, &st) < 0) {
		snprintf(err, errlen, "cannot stat the state directory %s: %s",
			 dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "the state directory %s is not a "
			 "directory", dir);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "the state directory %s is writable by "
			 "other users (mode %04o): chmod go-w it", dir,
			 (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (st.st_uid == 0) {
		snprintf(err, errlen, "the state directory %s belongs to root: "
			 "it must belong to SlurmUser, whose prolog writes it",
			 dir);
		return -1;
	}
	id->owner = st.st_uid;
	if (geteuid() != 0)
		return 0;  /* not root: read with our own identity */
	/* setfs*id return the previous id; -1 changes nothing and tells it. */
	id->fsgid = (gid_t)setfsgid((gid_t)-1);
	id->fsuid = (uid_t)setfsuid((uid_t)-1);
	setfsgid(st.st_gid);
	setfsuid(st.st_uid);
	id->switched = 1;
	prev = setfsuid((uid_t)-1);
	if ((uid_t)prev != st.st_uid ||
	    (gid_t)setfsgid((gid_t)-1) != st.st_gid) {
		char ignore[16];
		juice_state_leave(id, ignore, sizeof(ignore));
		snprintf(err, errlen, "cannot take the file-system identity of "
			 "the state directory's owner (uid %u gid %u)",
			 (unsigned)st.st_uid, (unsigned)st.st_gid);
		return -1;
	}
	return 0;
}

int juice_state_leave(struct juice_state_id *id, char *err, size_t errlen)
{
	if (!id->switched)
		return 0;
	/* Back to root's fsuid, which gives back root's file capabilities (the
	 * switch to another fsuid cleared them from the effective set). */
	setfsuid(id->fsuid);
	setfsgid(id->fsgid);
	id->switched = 0;
	if ((uid_t)setfsuid((uid_t)-1) != id->fsuid ||
	    (gid_t)setfsgid((gid_t)-1) != id->fsgid) {
		snprintf(err, errlen, "cannot take back the file-system "
			 "identity uid %u gid %u", (unsigned)id->fsuid,
			 (unsigned)id->fsgid);
		return -1;
	}
	return 0;
}
