/*
 * scratch.h - the one scratch file of a fuzz target: the parsers under test read files (as the plugin does on
 * the compute node), so each input is written here first.  Created once, mode 0600, removed at exit.
 */
#ifndef JUICE_FUZZ_SCRATCH_H
#define JUICE_FUZZ_SCRATCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char scratch_path[4096];
static int scratch_fd = -1;

static void scratch_cleanup(void)
{
	if (scratch_path[0])
		unlink(scratch_path);
}

/* Create the scratch file; name is the target's, for a readable path. */
static void scratch_init(const char *name)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(scratch_path, sizeof(scratch_path), "%s/%s.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp", name);
	scratch_fd = mkstemp(scratch_path); /* mode 0600 */
	if (scratch_fd < 0)
		abort();
	atexit(scratch_cleanup);
}

/* Replace the scratch file's content; aborts on an I/O error (not a finding). */
static void scratch_write(const void *data, size_t size)
{
	if (ftruncate(scratch_fd, 0) < 0 ||
	    pwrite(scratch_fd, data, size, 0) != (ssize_t)size)
		abort();
}

#endif
