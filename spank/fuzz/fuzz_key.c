/*
 * fuzz_key.c - libFuzzer target: the cluster key file parser
 * (juice_key_load), read by root in every slurmstepd of a Juice job.
 *
 * The input is the file's content (written to a private temporary file,
 * mode 0600).  Oracle: a key is accepted only from exactly 64 hexadecimal
 * digits and an optional newline, and is what they say.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scratch.h"
#include "session.h"


int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	scratch_init("fuzz_key");
	return 0;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char key[JUICE_KEY_LEN];
	char err[1024];
	size_t i;
	int want;

	if (size > 1024)
		return 0;
	scratch_write(data, size);
	want = size == 64 || (size == 65 && data[64] == '\n');
	for (i = 0; want && i < 64; i++)
		if (hexval(data[i]) < 0)
			want = 0;
	err[0] = '\0';
	if (juice_key_load(scratch_path, key, err, sizeof(err)) == 0) {
		if (!want)
			abort();
		for (i = 0; i < JUICE_KEY_LEN; i++)
			if (key[i] != (hexval(data[2 * i]) << 4 |
				       hexval(data[2 * i + 1])))
				abort();
	} else if (want || err[0] == '\0') {
		abort();
	}
	return 0;
}
