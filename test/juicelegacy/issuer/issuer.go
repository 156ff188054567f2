// Package issuer is a JWT issuer of the test bed's own for the legacy Juice controller: an RSA signing key,
// a self-signed CA with a server certificate for 127.0.0.1 and localhost, the OpenID discovery document and
// the JWKS served over HTTPS, and RS256 tokens minted with the issuer and audience the controller is started
// with. Standard library only.
//
// What the legacy controller checks (pkg/middleware/jwt.go with auth0/go-jwt-middleware v2.0.0 and
// square/go-jose v2.6.0, read in their source):
//
//   - The keys: it fetches https://DOMAIN/.well-known/openid-configuration, takes its jwks_uri and fetches
//     that (cached for 5 minutes per host name). It uses Go's default HTTP client, so SSL_CERT_FILE works.
//   - The header: "alg" must be exactly RS256; "kid" must name a key of the JWKS (without a kid, or with an
//     unknown one, go-jose is handed the whole set and the signature check fails).
//   - The claims: "iss" must equal "https://DOMAIN/" (the trailing slash included) and "aud" must contain the
//     audience (a string or an array). "exp", "nbf" and "iat" are optional; when present they are checked
//     with one minute of leeway ("iat" must not be in the future). "sub" is not checked, but PUT /v1/pool
//     needs it: the pool's permissions are granted to it, and without it the handler dereferences a nil error.
//   - The header form: "Authorization: Bearer TOKEN" ("bearer" in any case). A missing or malformed header
//     and every validation failure get the same answer: 401 application/json {"message":"Failed to validate JWT."}.
package issuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Files of an issuer directory.
const (
	CAFile         = "ca.pem"          // the CA certificate: give it to the controller as SSL_CERT_FILE
	ServerCertFile = "server.pem"      // the HTTPS server certificate, signed by the CA
	ServerKeyFile  = "server-key.pem"  // its key (0600)
	SigningKeyFile = "signing-key.pem" // the RSA key tokens are signed with (0600)
	ConfigFile     = "issuer.json"     // the issuer URL and key id, for minting without the server
)

// Config is what ConfigFile holds.
type Config struct {
	Issuer string `json:"issuer"` // https://HOST:PORT/ exactly as the controller expects it in "iss"
	KeyID  string `json:"kid"`
}

// Issuer is an issuer directory loaded into memory.
type Issuer struct {
	Dir    string
	Config Config
	key    *rsa.PrivateKey
	hits   atomic.Int64
}

// Init creates the issuer directory for the issuer URL https://HOSTPORT/ unless it already exists with the
// same URL: a signing key, a CA (whose key is thrown away once it signed the server certificate), a server
// certificate for 127.0.0.1, ::1 and localhost, and ConfigFile. It returns the loaded issuer.
func Init(dir, hostport string) (*Issuer, error) {
	want := "https://" + hostport + "/"
	if is, err := Load(dir); err == nil && is.Config.Issuer == want {
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)); err == nil {
			return is, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, SigningKeyFile), "PRIVATE KEY", mustPKCS8(key), 0o600); err != nil {
		return nil, err
	}
	if err := writeCerts(dir); err != nil {
		return nil, err
	}
	cfg := Config{Issuer: want, KeyID: KeyID(&key.PublicKey)}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := WriteFileAtomic(filepath.Join(dir, ConfigFile), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	return Load(dir)
}

// Load reads an issuer directory made by Init.
func Load(dir string) (*Issuer, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, SigningKeyFile))
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(kb)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", SigningKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA key", SigningKeyFile)
	}
	if cfg.KeyID != KeyID(&key.PublicKey) {
		return nil, fmt.Errorf("%s: kid %q is not the signing key's", ConfigFile, cfg.KeyID)
	}
	return &Issuer{Dir: dir, Config: cfg, key: key}, nil
}

func mustPKCS8(k any) []byte {
	b, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err)
	}
	return b
}

func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "juice-legacy-issuer test CA"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srv := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now,
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, ServerKeyFile), "PRIVATE KEY", mustPKCS8(srvKey), 0o600); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, ServerCertFile), "CERTIFICATE", srvDER, 0o644); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", caDER, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// WriteFileAtomic writes data to a temporary file created with mode, then renames it over path: a reader
// never sees a partial file, and a secret is never readable by others, not even for a moment.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// KeyID is the RFC 7638 thumbprint of an RSA public key, base64url.
func KeyID(pub *rsa.PublicKey) string {
	j := fmt.Sprintf(`{"e":"%s","kty":"RSA","n":"%s"}`, b64(big.NewInt(int64(pub.E)).Bytes()), b64(pub.N.Bytes()))
	sum := sha256.Sum256([]byte(j))
	return b64(sum[:])
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// JWK is one key of a JWKS.
type JWK struct {
	Kty string `json:"kty"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// JWKS is the key set document.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWKS returns the issuer's key set: its one signing key.
func (is *Issuer) JWKS() JWKS {
	pub := &is.key.PublicKey
	return JWKS{Keys: []JWK{{Kty: "RSA", Use: "sig", Alg: "RS256", Kid: is.Config.KeyID,
		N: b64(pub.N.Bytes()), E: b64(big.NewInt(int64(pub.E)).Bytes())}}}
}

// Claims are the claims of a minted token. Zero times and empty strings are left out of the token.
type Claims struct {
	Issuer    string    // default: the issuer's URL
	Subject   string    // the user; PUT /v1/pool grants the pool's permissions to it
	Audience  []string  // one element is sent as a string
	IssuedAt  time.Time // default: now
	NotBefore time.Time
	Expiry    time.Time
	ID        string
	Extra     map[string]any // more claims (e.g. "scope")
}

// Header overrides the JOSE header for tests of rejected tokens. Empty fields take the defaults.
type Header struct {
	Alg   string // default RS256; the signature is RS256 whatever this says
	KeyID string // default: the issuer's kid
	NoKID bool   // leave "kid" out
}

// Mint signs claims with the issuer's key (RS256).
func (is *Issuer) Mint(c Claims) (string, error) { return is.MintWithHeader(Header{}, c) }

// MintWithHeader signs claims with a header of the caller's choice.
func (is *Issuer) MintWithHeader(h Header, c Claims) (string, error) {
	hdr := map[string]any{"alg": "RS256", "typ": "JWT", "kid": is.Config.KeyID}
	if h.Alg != "" {
		hdr["alg"] = h.Alg
	}
	if h.KeyID != "" {
		hdr["kid"] = h.KeyID
	}
	if h.NoKID {
		delete(hdr, "kid")
	}
	cl := map[string]any{}
	for k, v := range c.Extra {
		cl[k] = v
	}
	cl["iss"] = is.Config.Issuer
	if c.Issuer != "" {
		cl["iss"] = c.Issuer
	}
	if c.Subject != "" {
		cl["sub"] = c.Subject
	}
	switch len(c.Audience) {
	case 0:
	case 1:
		cl["aud"] = c.Audience[0]
	default:
		cl["aud"] = c.Audience
	}
	iat := c.IssuedAt
	if iat.IsZero() {
		iat = time.Now()
	}
	cl["iat"] = iat.Unix()
	if !c.NotBefore.IsZero() {
		cl["nbf"] = c.NotBefore.Unix()
	}
	if !c.Expiry.IsZero() {
		cl["exp"] = c.Expiry.Unix()
	}
	if c.ID != "" {
		cl["jti"] = c.ID
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return "", err
	}
	cb, err := json.Marshal(cl)
	if err != nil {
		return "", err
	}
	signing := b64(hb) + "." + b64(cb)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, is.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signing + "." + b64(sig), nil
}

// Verify checks a token minted by this issuer (signature, kid, iss, aud, exp): for the issuer's own tests and
// for checking a token file; the legacy controller does its own validation.
func (is *Issuer) Verify(token, audience string, now time.Time) (map[string]any, error) {
	parts := splitJWT(token)
	if parts == nil {
		return nil, errors.New("not a JWS compact token")
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, err
	}
	var hdr map[string]any
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, err
	}
	if hdr["alg"] != "RS256" || hdr["kid"] != is.Config.KeyID {
		return nil, fmt.Errorf("header alg=%v kid=%v", hdr["alg"], hdr["kid"])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&is.key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return nil, err
	}
	cb, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	var cl map[string]any
	if err := json.Unmarshal(cb, &cl); err != nil {
		return nil, err
	}
	if cl["iss"] != is.Config.Issuer {
		return nil, fmt.Errorf("iss %v", cl["iss"])
	}
	okAud := cl["aud"] == audience
	if arr, ok := cl["aud"].([]any); ok {
		for _, a := range arr {
			okAud = okAud || a == audience
		}
	}
	if !okAud {
		return nil, fmt.Errorf("aud %v", cl["aud"])
	}
	if exp, ok := cl["exp"].(float64); ok && now.After(time.Unix(int64(exp), 0)) {
		return nil, errors.New("expired")
	}
	return cl, nil
}

func splitJWT(t string) []string {
	parts := strings.Split(t, ".")
	if len(parts) != 3 {
		return nil
	}
	return parts
}

// Requests counts the requests the handler answered (the controller's key fetches).
func (is *Issuer) Requests() int64 { return is.hits.Load() }

// Handler serves GET /.well-known/openid-configuration, /.well-known/jwks.json and /healthz. logf, if not
// nil, gets a line per request (the controller's fetches are how one sees its key cache at work).
func (is *Issuer) Handler(logf func(format string, args ...any)) http.Handler {
	mux := http.NewServeMux()
	jwksURL := is.Config.Issuer + ".well-known/jwks.json"
	reply := func(w http.ResponseWriter, v any) {
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	}
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{
			"issuer":                                is.Config.Issuer,
			"jwks_uri":                              jwksURL,
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) { reply(w, is.JWKS()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.hits.Add(1)
		if logf != nil {
			logf("%s %s from %s (%s)", r.Method, r.URL.Path, r.RemoteAddr, r.UserAgent())
		}
		mux.ServeHTTP(w, r)
	})
}

// TLSConfig is the HTTPS server's configuration, from the directory's server certificate.
func (is *Issuer) TLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(is.Dir, ServerCertFile), filepath.Join(is.Dir, ServerKeyFile))
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// CertPool is a pool holding the directory's CA, for clients of the issuer.
func (is *Issuer) CertPool() (*x509.CertPool, error) {
	b, err := os.ReadFile(filepath.Join(is.Dir, CAFile))
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no certificate", CAFile)
	}
	return p, nil
}

// WriteToken mints a token and writes it to path with mode 0600 (atomically).
func (is *Issuer) WriteToken(path string, c Claims) error {
	tok, err := is.Mint(c)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, []byte(tok+"\n"), 0o600)
}
