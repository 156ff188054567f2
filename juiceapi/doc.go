// Package juiceapi is the Juice Controller client the reconciler uses (Client, HTTPClient), the
// wire types of the controller's public (2023, "legacy") REST model, and the walks of a pool that
// find sessions without a session listing (PoolView, WalkPool), with what is known of the legacy
// controller's paging. It imports nothing of the domain: sizes come from internal/vram.
//
// The simulator of the controller is the subpackage juicesim; cmd/juice-sim runs it standalone.
// README.md in this directory describes the wire conventions (Idempotency-Key, error texts).
package juiceapi
