/*
 * session.h - open, verify and decrypt a Juice session file.
 *
 *   JUICE-SESSION v2 cluster=<cluster> job=<job id> run=<restart count>
 *     reservation=<uuid> key=<key id>\n          (one line)
 *   <12-byte nonce><AES-256-GCM ciphertext><16-byte tag>
 *
 * The header line (without its newline) is the associated data.  The key id
 * names the cluster key that sealed it (juice_key_id): the current or the
 * previous one (key rotation).  Version 1 (no reservation, no key id) is
 * still opened, under either key: an older controller's file for a run made
 * ready before an upgrade.  The plaintext is NAME=VALUE\n lines, NAME
 * matching JUICE_[A-Z0-9_]+.
 *
 * Pure C + libcrypto, no Slurm: unit-tested by spank/test.
 */
#ifndef JUICE_SESSION_H
#define JUICE_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "args.h"

#define JUICE_SESSION_MAX_FILE (64 * 1024)  /* bytes of a session file */
#define JUICE_SESSION_MAX_VARS 64           /* variables in one session */
#define JUICE_SESSION_HEADER_MAX 256        /* bytes of the header line */
#define JUICE_KEY_LEN 32
#define JUICE_KEY_ID_LEN 16                 /* hex digits of a key id */
#define JUICE_UUID_LEN 36                   /* a reservation, lower case */
#define JUICE_KEYS_MAX 2                    /* the current and previous key */
#define JUICE_KEY_PREVIOUS_SUFFIX ".previous"

/* The keys a session file may be sealed under: [0] the current one. */
struct juice_keys {
	size_t n;
	unsigned char key[JUICE_KEYS_MAX][JUICE_KEY_LEN];
	char id[JUICE_KEYS_MAX][JUICE_KEY_ID_LEN + 1];
};

/* A session file's clear header. */
struct juice_header {
	int version;                          /* 1 or 2 */
	char cluster[JUICE_CLUSTER_MAX + 1];
	uint32_t job_id;
	uint32_t run;
	char reservation[JUICE_UUID_LEN + 1]; /* "" in version 1 */
	char key_id[JUICE_KEY_ID_LEN + 1];    /* "" in version 1 */
};

struct juice_env_var {
	const char *name;   /* point into juice_env.buf */
	const char *value;
};

struct juice_env {
	char cluster[JUICE_CLUSTER_MAX + 1];  /* from the verified header */
	uint32_t job_id;
	uint32_t run;
	char reservation[JUICE_UUID_LEN + 1]; /* "" for a version 1 file */
	char key_id[JUICE_KEY_ID_LEN + 1];    /* the key that opened it */
	size_t n;
	struct juice_env_var vars[JUICE_SESSION_MAX_VARS];
	char *buf;          /* the plaintext, split in place; wiped on clear */
	size_t buflen;
};

/*
 * Read a key file: 64 hex digits, optionally followed by one newline.  The
 * file must be a regular file (not a symlink) without any group or other
 * permission bit (mode & 077 == 0).  Returns 0, or -1 with err.
 */
int juice_key_load(const char *path, unsigned char key[JUICE_KEY_LEN],
		   char *err, size_t errlen);

/* The key id: the first 8 bytes of SHA-256("juice-slurm session key id\n"
 * || key) in lower-case hex, as reconcile/session.KeyID. */
void juice_key_id(const unsigned char key[JUICE_KEY_LEN],
		  char id[JUICE_KEY_ID_LEN + 1]);

/*
 * Read the current key from path and the previous one from
 * path.previous, which may be absent (any other failure to read it, a bad
 * mode say, is an error).  Returns 0, or -1 with err; wipe with
 * juice_keys_clear.
 */
int juice_keys_load(const char *path, struct juice_keys *keys, char *err,
		    size_t errlen);
void juice_keys_clear(struct juice_keys *keys);

/*
 * Open, check and decrypt a session file.  cluster: NULL or "" = do not
 * check the cluster; run: -1 = any run; reservation: NULL = not known (the
 * compute node's case), else the file must be a version 2 file of that
 * reservation.  A version 2 file opens only under the key its header names;
 * a version 1 file under any of keys.  On success returns 0 and fills *out
 * (free with juice_env_clear); on error returns -1 with a message in err (no
 * "juice: " prefix) and *out is empty.
 */
int juice_session_open(const char *path, const struct juice_keys *keys,
		       const char *cluster, uint32_t job_id, long run,
		       const char *reservation, struct juice_env *out,
		       char *err, size_t errlen);

/*
 * As juice_session_open, and the file must belong to owner and be writable
 * by its owner only (mode & 022 == 0): the state directory's owner, the
 * SlurmUser whose prolog writes the files (juice_state_enter).
 */
int juice_session_open_owned(const char *path, const struct juice_keys *keys,
			     const char *cluster, uint32_t job_id, long run,
			     uid_t owner, struct juice_env *out, char *err,
			     size_t errlen);

/*
 * The state directory is shared between the compute nodes, often over NFS,
 * whose exports squash root by default: root on a compute node may then not
 * read the SlurmUser's 0700 directory and 0600 files.  Their owner may.  So
 * the directory is read with its owner's file-system identity:
 * juice_state_enter checks the directory (a directory, owned by a user other
 * than root, writable by its owner only) and, when the caller runs as root,
 * switches this thread's fsuid and fsgid to the owner's (setfsuid/setfsgid:
 * nothing else of the process changes); juice_state_leave switches back.
 * Both verify the switch.  Returns 0, or -1 with err (then nothing is
 * switched).
 */
struct juice_state_id {
	uid_t owner;     /* the state directory's owner */
	int switched;    /* the fs ids were changed */
	uid_t fsuid;     /* to restore */
	gid_t fsgid;
};
int juice_state_enter(const char *dir, struct juice_state_id *id, char *err,
		      size_t errlen);
int juice_state_leave(struct juice_state_id *id, char *err, size_t errlen);

/*
 * Choose the session file of a job in the state directory: the newest
 * <dir>/<job>.<n>.session with n >= min_run (the run is not known in every
 * step, see remote.c; runs only grow, so the newest file is the current
 * run's, and a file left by an older run is never taken over a newer one).
 * *found_run is n; the caller then checks the header says the same run.
 * Returns 0 with path, or -1 with err.
 */
int juice_session_find(const char *dir, uint32_t job_id, uint32_t min_run,
		       char *path, size_t pathlen, uint32_t *found_run,
		       char *err, size_t errlen);

/* The value of a session variable, or NULL when the session does not set it. */
const char *juice_env_get(const struct juice_env *env, const char *name);

/*
 * The session's own request against the step: its JUICE_REQUEST must be a
 * canonical request (juice_request_parse) and agree with the --juice-*
 * values given to this step (NULL = not given; juice_request_matches).
 * Returns 0 with *req, or -1 with err (no "juice: " prefix; the session's
 * text is not quoted, only the parts of a request that parsed).
 */
int juice_session_check_request(const struct juice_env *env, const char *pool,
				const char *gpus, const char *vram,
				struct juice_request *req, char *err,
				size_t errlen);

/* Wipe and free the plaintext; safe to call twice. */
void juice_env_clear(struct juice_env *env);

/*
 * Parse a header line (no newline), version 2 or 1.  Returns 0, or -1 with
 * err.  Exposed for the tests.
 */
int juice_session_parse_header(const char *line, size_t len,
			       struct juice_header *h, char *err,
			       size_t errlen);

#endif
