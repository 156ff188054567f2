// Package juiceapi is the Juice Controller client the reconciler uses (Client, HTTPClient), the
// wire types of the controller's public (2023, "legacy") REST model, and the one VRAM size parser
// for all Go code (ParseVRAM, FormatVRAM).
//
// The simulator of the controller is the subpackage juicesim; cmd/juice-sim runs it standalone.
// README.md in this directory describes the wire conventions (Idempotency-Key, error texts).
package juiceapi
