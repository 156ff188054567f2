/*
 * fuzz_session.c - libFuzzer target: the session file opener
 * (juice_session_open), run as root in slurmstepd on every compute node, and
 * the request check that follows it (juice_session_check_request).
 *
 * The first byte says what the rest is:
 *   even: the file's bytes as they are: the header, the size and truncation
 *         checks, and AES-256-GCM refusing what it did not seal (the shared
 *         vectors, sealed under the same key, open);
 *   odd:  a plaintext, sealed here under the key with the header the opener
 *         expects, so that the fuzzer reaches the plaintext parser and the
 *         request check behind the authentication.
 * The file is a private temporary file (mode 0600), rewritten per input.
 *
 * Oracles (abort = finding): an opened session has the expected job and
 * cluster, was opened by one of the two keys (current, previous), at most 64 variables, each JUICE_[A-Z0-9_]+ once, no newline in
 * a value; a refusal says why; juice_env_clear leaves nothing behind.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "scratch.h"
#include "session.h"

/* test/vectors/session/key.hex and key.hex.previous */
static const unsigned char key[JUICE_KEY_LEN] =
	"juice-slurm test vector key 32B!";
static const unsigned char prev_key[JUICE_KEY_LEN] =
	"juice-slurm previous vector key!";
static struct juice_keys keys;
/* The vectors' run and reservation, and the current key's id (set up). */
static char header[160];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	scratch_init("fuzz_session");
	memcpy(keys.key[0], key, JUICE_KEY_LEN);
	memcpy(keys.key[1], prev_key, JUICE_KEY_LEN);
	juice_key_id(keys.key[0], keys.id[0]);
	juice_key_id(keys.key[1], keys.id[1]);
	keys.n = 2;
	snprintf(header, sizeof(header), "JUICE-SESSION v2 cluster=juicetest "
		 "job=1234 run=0 reservation=7c2b9e4a-1d3f-4b6a-8e5c-"
		 "0a1b2c3d4e5f key=%s", keys.id[0]);
	return 0;
}

/* header\n nonce ciphertext tag, as the reconciler writes it. */
static size_t seal(const uint8_t *pt, size_t ptlen, unsigned char *out)
{
	static const unsigned char nonce[12] = "fuzz nonce!!";
	size_t hlen = strlen(header), o;
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int len = 0;

	memcpy(out, header, hlen);
	out[hlen] = '\n';
	memcpy(out + hlen + 1, nonce, sizeof(nonce));
	o = hlen + 1 + sizeof(nonce);
	if (!ctx ||
	    EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1 ||
	    EVP_EncryptInit_ex(ctx, NULL, NULL, key, nonce) != 1 ||
	    EVP_EncryptUpdate(ctx, NULL, &len, (const unsigned char *)header,
			      (int)hlen) != 1 ||
	    EVP_EncryptUpdate(ctx, out + o, &len, pt, (int)ptlen) != 1)
		abort();
	o += (size_t)len;
	if (EVP_EncryptFinal_ex(ctx, out + o, &len) != 1)
		abort();
	o += (size_t)len;
	if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, out + o) != 1)
		abort();
	EVP_CIPHER_CTX_free(ctx);
	return o + 16;
}

static void check_env(const struct juice_env *env)
{
	size_t i, j;

	if (env->job_id != 1234 || strcmp(env->cluster, "juicetest") != 0 ||
	    env->n > JUICE_SESSION_MAX_VARS || !env->buf ||
	    (strcmp(env->key_id, keys.id[0]) != 0 &&
	     strcmp(env->key_id, keys.id[1]) != 0) ||
	    (env->reservation[0] && strlen(env->reservation) != JUICE_UUID_LEN))
		abort();
	for (i = 0; i < env->n; i++) {
		const char *name = env->vars[i].name;
		size_t n = strlen(name);

		if (n < 7 || n > 128 || strncmp(name, "JUICE_", 6) != 0 ||
		    strspn(name + 6, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
			    n - 6 ||
		    strchr(env->vars[i].value, '\n'))
			abort();
		for (j = 0; j < i; j++)
			if (strcmp(env->vars[j].name, name) == 0)
				abort();
		if (juice_env_get(env, name) == NULL)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char file[JUICE_SESSION_MAX_FILE + 256];
	struct juice_env env;
	struct juice_request req;
	char err[2048];
	size_t len;
	int rc;

	if (size < 1 || size > JUICE_SESSION_MAX_FILE + 64)
		return 0;
	if (data[0] & 1) {
		len = seal(data + 1, size - 1, file);
	} else {
		len = size - 1;
		memcpy(file, data + 1, len);
	}
	scratch_write(file, len);

	err[0] = '\0';
	rc = juice_session_open(scratch_path, &keys, "juicetest", 1234, -1,
				NULL, &env, err, sizeof(err));
	if (rc < 0) {
		if (err[0] == '\0' || env.buf || env.n)
			abort();
		return 0;
	}
	check_env(&env);
	/* What init_post_opt does next: with no option, and with some. */
	rc = juice_session_check_request(&env, NULL, NULL, NULL, &req, err,
					 sizeof(err));
	if (rc < 0 && err[0] == '\0')
		abort();
	if (rc == 0 && juice_session_check_request(&env, req.pool, NULL, NULL,
						   &req, err, sizeof(err)) != 0)
		abort();
	(void)juice_session_check_request(&env, "test", "2", "1.5", &req, err,
					  sizeof(err));
	juice_env_clear(&env);
	if (env.buf || env.n)
		abort();
	return 0;
}
