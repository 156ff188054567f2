// Package slurmrest is a typed client for slurmrestd, the same for Slurm 22.05 (API v0.0.36..38),
// 24.11 (v0.0.40..42) and 26.05 (v0.0.42..45).
//
// The reconciler sees one version-neutral model (Job, JobState, ExitStatus, JobList) and one set of
// operations (Ping, ListJobs, GetJob, UpdateJob, CancelJob, SubmitJob, RequeueJob); per-version
// adapters translate them into each API version's requests and replies. The wire shapes live in
// internal/wire (written from the OpenAPI documents of the real servers and checked against them by
// internal/wire/wirecheck).
//
// # Version
//
// With Config.Version empty the client reads the server's OpenAPI document (GET /openapi/v3) on the
// first call and picks the newest version it supports; if the document is unavailable it pings each
// version, newest first. Config.Version forces one. Version() tells which is in use.
//
// # Behaviour that differs between releases, handled here
//
//   - job_state: a string on v0.0.3x (a flag such as COMPLETING or CONFIGURING replaces the base
//     state), a list (base state first, then flags) from v0.0.40. Both become the same JobState:
//     the base state, except that COMPLETING gives StateCompleting and CONFIGURING StateConfiguring.
//   - Times and priority: integers on v0.0.3x, {set, infinite, number} from v0.0.40.
//   - Exit code: a raw wait status on v0.0.3x, {status, return_code, signal} from v0.0.40; both give
//     ExitStatus, filled once the job has ended.
//   - ListJobs(since) uses update_time. 22.05: a 304 with an empty body when nothing changed (v0.0.36
//     has no update_time: always a full listing). 24.11+: a 200 with jobs [] and last_update 0.
//     v0.0.40/41 refuse a bare epoch number, so "uts<epoch>" is sent. Either way JobList.Unchanged is
//     set and the caller keeps its last snapshot. JobList.LastUpdate is the server's last_update
//     (v0.0.40+) or the client's clock minus Config.ClockMargin (v0.0.3x, whose replies carry no time).
//   - Unknown job: 500 (22.05) or 404 (24.11+) with error 2017, or v0.0.36's text "unknown job": all
//     match ErrNotFound.
//   - Refused token: 511 with error 1007 on 24.11+; on 22.05 a 500 with error -1 from slurm_load_*
//     (v0.0.38) or an empty errors[] (v0.0.36). All match ErrUnauthorized. Ping on 24.11 only says
//     the controller is DOWN (ErrControllerDown); 26.05's v0.0.45 says why.
//   - Submitting a held job: v0.0.3x put "Job is in held state" (2042) or "node not available"
//     (2068) into errors[] of a successful submission; with a job id these are notices, not errors.
//   - admin_comment cannot be set through v0.0.3x (unknown key): ErrUnsupported.
//   - Requeue: only v0.0.45 has an endpoint; elsewhere ErrUnsupported (use scontrol requeue).
//   - Cancelling a job that has already ended is not an error (2021/2084 are ignored).
//
// Every reply's errors[] is checked, also on HTTP 200. Connection errors, 502/503/504 and 5xx replies
// whose errors say slurmctld is unreachable are retried with exponential backoff and jitter, bounded
// by RetryConfig and the context; a submission is only retried when the connection was refused.
//
// # Tests
//
// Unit tests replay replies recorded from the real daemons (testdata/replies, made by
// testdata/record.sh). The integration suite (integration_test.go, build tag "integration") runs the
// same tests against a real slurmrestd selected by JUICE_SLURMREST_ENV (a test bed env file) and
// JUICE_SLURMREST_VERSION; test/chroot/test-compat.sh runs it for every release.
package slurmrest
