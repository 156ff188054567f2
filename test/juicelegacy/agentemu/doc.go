// Package agentemu emulates GPU hosts for the legacy open-source Juice controller: several agents, each with N
// GPUs of V bytes of VRAM in a pool, that speak the agent protocol of the legacy cmd/agent/app/controller.go:
//
//  1. POST /v1/register/agent with the agent (its GPUs, labels, taints, pool UUID, the address clients would use);
//     the answer is the agent's id, text/plain.
//  2. Every second: GET /v1/agent/{id}; start the sessions listed "assigned", stop those listed "canceling";
//     then PUT /v1/agent/{id} {"id","state":"active","sessions":{ID:{"State":"active"|"closed","connections":{}}},
//     "gpus":[metrics per GPU]} (the PUT is the heartbeat and goes out on every tick, sessions or not).
//  3. On shutdown: PUT /v1/agent/{id} {"id","state":"closed"}.
//
// As in the real agent, requests go to https:// first and fall back to http:// when the server answers in plain
// HTTP, bodies are read with a single Read, and every error the real agent exits on stops the emulated agent
// (state "exited"; the admin API can resume it). Config.ReadWholeBody and Config.KeepGoing turn those two off.
//
// Nothing listens on the addresses the agents report: no client can connect to an emulated session.
//
// The admin API (AdminHandler) stops and resumes agents (agent loss), restarts them, and lists what each holds.
// Standard library only.
package agentemu
