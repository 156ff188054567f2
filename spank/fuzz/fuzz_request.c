/*
 * fuzz_request.c - libFuzzer target: the canonical request
 * (juice_request_parse, juice_request_format, juice_request_matches) and the
 * option values' parsers it leans on (juice_parse_vram, juice_quote).
 *
 * Oracles (abort = finding): a text that parses formats back to itself, byte
 * for byte, and agrees with its own parts; a refusal names one of the rules;
 * a request built from the input's bytes either fails to format or formats
 * to a text that parses back to it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

static int rule_known(const char *w)
{
	static const char *const rules[] = { "version", "length", "form",
					     "pool", "gpus", "vram", NULL };
	int i;

	for (i = 0; w && rules[i]; i++)
		if (strcmp(w, rules[i]) == 0)
			return 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char s[JUICE_REQUEST_MAX + 64], out[JUICE_REQUEST_MAX + 1], q[80];
	char num[24], err[512];
	struct juice_request req, back;
	const char *what = NULL;
	uint64_t v;
	size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
	int rc;

	if (size > 4 * JUICE_REQUEST_MAX)
		return 0;
	/* The text as a C string (the length rule needs texts over 1024). */
	{
		char *big = malloc(size + 1);
		if (!big)
			return 0;
		memcpy(big, data, size);
		big[size] = '\0';
		rc = juice_request_parse(big, &req, &what);
		if (rc == 1) {
			if (juice_request_format(&req, out, sizeof(out)) != 0 ||
			    strcmp(out, big) != 0)
				abort();  /* not the one text of its request */
			snprintf(num, sizeof(num), "%u", req.gpus);
			if (juice_request_matches(&req, req.pool, num, NULL, err,
						  sizeof(err)) != 0)
				abort();
			if (req.vram) {
				snprintf(num, sizeof(num), "%lluB",
					 (unsigned long long)req.vram);
				if (juice_request_matches(&req, NULL, NULL, num,
							  err, sizeof(err)) != 0)
					abort();
			}
		} else if (rc == 0) {
			if (what || strncmp(big, "juice:", 6) == 0)
				abort();
		} else if (rc != -1 || !rule_known(what) || req.pool[0] ||
			   req.gpus || req.vram) {
			abort();
		}
		juice_quote(big, q, sizeof(q));
		if (strlen(q) >= sizeof(q))
			abort();
		(void)juice_parse_vram(big, &v);
		free(big);
	}

	/*
	 * The bytes as a request: gpus from 2 bytes, vram from 8 (or none),
	 * the rest the pool.  format() must refuse it or write what parses.
	 */
	if (n >= 10) {
		memset(&req, 0, sizeof(req));
		req.gpus = (unsigned)(data[0] | data[1] << 8) % 2048;
		memcpy(&v, data + 2, 8);
		req.vram = (data[0] & 1) ? 0 : (data[1] & 1) ? v % 4096 : v;
		memcpy(s, data + 10, n - 10);
		s[n - 10] = '\0';
		snprintf(req.pool, sizeof(req.pool), "%s", s);
		if (juice_request_format(&req, out, sizeof(out)) == 0) {
			if (juice_request_parse(out, &back, &what) != 1 ||
			    strcmp(back.pool, req.pool) != 0 ||
			    back.gpus != req.gpus || back.vram != req.vram)
				abort();
		} else if (out[0] != '\0') {
			abort();
		}
	}
	return 0;
}
