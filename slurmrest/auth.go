package slurmrest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

// TokenSource gives the JWT sent as X-SLURM-USER-TOKEN. It is asked before every request, so an
// implementation can pick up a rotated token without a restart.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// TokenSourceFunc adapts a function to TokenSource.
type TokenSourceFunc func(ctx context.Context) (string, error)

// Token implements TokenSource.
func (f TokenSourceFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// StaticToken always returns tok.
func StaticToken(tok string) TokenSource {
	tok = cleanToken(tok)
	return TokenSourceFunc(func(context.Context) (string, error) { return tok, nil })
}

// EnvToken reads the token from the environment variable name at every request.
// Do not use SLURM_JWT for it in a shell that also runs srun/sbatch (they would switch to auth/jwt).
func EnvToken(name string) TokenSource {
	return TokenSourceFunc(func(context.Context) (string, error) {
		tok := cleanToken(os.Getenv(name))
		if tok == "" {
			return "", fmt.Errorf("slurmrest: environment variable %s is empty: %w", name, ErrUnauthorized)
		}
		return tok, nil
	})
}

// FileToken reads the token from a secret file (mode 0600: neither group nor others may read it) and reads it
// again whenever the file changes, so the token can be rotated by replacing the file (a renewal job, say). The
// file holds the bare JWT or `SLURM_JWT=<jwt>` as printed by `scontrol token`.
func FileToken(path string) *FileTokenSource {
	return &FileTokenSource{f: secretfile.New(path, nil)}
}

// FileTokenSource is the TokenSource returned by FileToken.
type FileTokenSource struct {
	f *secretfile.File
}

// Token implements TokenSource.
func (f *FileTokenSource) Token(context.Context) (string, error) {
	v, err := f.f.Value()
	if err != nil {
		return "", fmt.Errorf("slurmrest: token: %w (%w)", err, ErrUnauthorized)
	}
	tok := cleanToken(v)
	if tok == "" {
		return "", fmt.Errorf("slurmrest: token file %s holds no token: %w", f.f.Path(), ErrUnauthorized)
	}
	return tok, nil
}

// Invalidate makes the next Token call read the file again.
func (f *FileTokenSource) Invalidate() { f.f.Invalidate() }

func cleanToken(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "SLURM_JWT="); i >= 0 {
		s = s[i+len("SLURM_JWT="):]
		if j := strings.IndexAny(s, " \t\r\n"); j >= 0 {
			s = s[:j]
		}
	}
	return strings.TrimSpace(s)
}

// JWTExpiry reads the "exp" claim of a JWT without verifying it: slurmctld checks tokens, the client only avoids
// sending one it knows has expired, and the controller reports when its tokens expire. ok is false for anything
// that is not a JWT with a positive expiry (a Juice M2M token, say).
func JWTExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(strings.TrimSpace(tok), ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	f, err := claims.Exp.Float64()
	if err != nil || f <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
