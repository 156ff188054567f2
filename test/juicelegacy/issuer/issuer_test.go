package issuer

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestInitMintVerify(t *testing.T) {
	dir := t.TempDir()
	is, err := Init(dir, "127.0.0.1:8481")
	if err != nil {
		t.Fatal(err)
	}
	if is.Config.Issuer != "https://127.0.0.1:8481/" {
		t.Fatalf("issuer %q", is.Config.Issuer)
	}
	for _, f := range []string{SigningKeyFile, ServerKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	again, err := Init(dir, "127.0.0.1:8481")
	if err != nil {
		t.Fatal(err)
	}
	if again.Config.KeyID != is.Config.KeyID {
		t.Errorf("Init with the same URL made a new key")
	}

	tokPath := filepath.Join(dir, "token")
	if err := is.WriteToken(tokPath, Claims{Subject: "u1", Audience: []string{"aud1"}, Expiry: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(tokPath)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(tokPath)
	tok := string(b[:len(b)-1])
	cl, err := is.Verify(tok, "aud1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cl["sub"] != "u1" || cl["iss"] != "https://127.0.0.1:8481/" {
		t.Errorf("claims %v", cl)
	}
	if _, err := is.Verify(tok, "other", time.Now()); err == nil {
		t.Errorf("wrong audience verified")
	}
	if _, err := is.Verify(tok, "aud1", time.Now().Add(2*time.Hour)); err == nil {
		t.Errorf("expired token verified")
	}
	bad := tok[:len(tok)-4] + "AAAA"
	if _, err := is.Verify(bad, "aud1", time.Now()); err == nil {
		t.Errorf("bad signature verified")
	}
}

func TestServeOverTLS(t *testing.T) {
	is, err := Init(t.TempDir(), "127.0.0.1:8481")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(is.Handler(nil))
	cfg, err := is.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	pool, err := is.CertPool()
	if err != nil {
		t.Fatal(err)
	}
	// The certificate must verify for 127.0.0.1 against our CA alone (what SSL_CERT_FILE gives the controller).
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(srv.URL + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&disc)
	resp.Body.Close()
	if disc.JWKSURI != "https://127.0.0.1:8481/.well-known/jwks.json" || disc.Issuer != is.Config.Issuer {
		t.Errorf("discovery %+v", disc)
	}
	resp, err = c.Get(srv.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	var set JWKS
	_ = json.NewDecoder(resp.Body).Decode(&set)
	resp.Body.Close()
	if len(set.Keys) != 1 || set.Keys[0].Kid != is.Config.KeyID || set.Keys[0].Alg != "RS256" || set.Keys[0].E != "AQAB" {
		t.Errorf("jwks %+v", set)
	}
	if is.Requests() != 2 {
		t.Errorf("requests %d", is.Requests())
	}
}
