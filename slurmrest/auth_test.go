package slurmrest_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

func fakeJWT(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc([]byte(fmt.Sprintf(`{"exp":%d,"iat":%d,"sun":"juice"}`, exp.Unix(), time.Now().Unix()))) + "." +
		enc([]byte("signature"))
}

func TestFileTokenRotation(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o600))
	ts := slurmrest.FileToken(path)
	tok, err := ts.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "first", tok)

	// Same size, new mtime: re-read.
	require.NoError(t, os.WriteFile(path, []byte("other\n"), 0o600))
	future := time.Now().Add(2 * time.Second)
	require.NoError(t, os.Chtimes(path, future, future))
	tok, err = ts.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "other", tok)

	// scontrol token's own format.
	require.NoError(t, os.WriteFile(path, []byte("SLURM_JWT=eyJ.abc.def\n"), 0o600))
	tok, err = ts.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "eyJ.abc.def", tok)

	require.NoError(t, os.WriteFile(path, []byte("\n"), 0o600))
	_, err = ts.Token(ctx)
	assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)

	// A token others may read is refused, like every secret of juice-slurm.
	require.NoError(t, os.WriteFile(path, []byte("readable\n"), 0o600))
	require.NoError(t, os.Chmod(path, 0o644))
	_, err = ts.Token(ctx)
	assert.ErrorContains(t, err, "chmod 600")
	assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)

	require.NoError(t, os.Remove(path))
	_, err = ts.Token(ctx)
	assert.Error(t, err)
}

func TestEnvToken(t *testing.T) {
	t.Setenv("JUICE_TEST_TOKEN", " abc \n")
	tok, err := slurmrest.EnvToken("JUICE_TEST_TOKEN").Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "abc", tok)
	t.Setenv("JUICE_TEST_TOKEN", "")
	_, err = slurmrest.EnvToken("JUICE_TEST_TOKEN").Token(context.Background())
	assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)
}

// A JWT's exp claim is read without its signature; anything else (a Juice M2M token, a broken JWT) has none.
func TestJWTExpiry(t *testing.T) {
	seg := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	exp, ok := slurmrest.JWTExpiry(seg(`{"alg":"HS256"}`) + "." + seg(`{"exp":1767225600,"sun":"slurm"}`) + ".sig\n")
	require.True(t, ok)
	require.Equal(t, int64(1767225600), exp.Unix())
	for _, bad := range []string{"m2m_demo", "a.b", seg(`{}`) + "." + seg(`{"sun":"slurm"}`) + ".sig", "x.!!!.y",
		seg(`{}`) + "." + seg(`{"exp":0}`) + ".sig"} {
		_, ok := slurmrest.JWTExpiry(bad)
		require.False(t, ok, bad)
	}
}
