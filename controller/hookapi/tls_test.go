package hookapi

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// The hook API serves TLS 1.3 only, with a key nobody else can read; a client that pins the certificate gets
// through, one that pins another does not.
func TestServerAndClientTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, err := testbed.HookCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := ServerTLS(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	// As the controller serves it (httptest's StartTLS would add its own certificate).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }),
		ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(tls.NewListener(ln, srvTLS))
	defer hs.Close()
	srv := struct{ URL string }{"https://" + ln.Addr().String()}

	cliTLS, err := ClientTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *tls.Config) error {
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: c}}).Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(cliTLS); err != nil {
		t.Fatalf("pinned client: %v", err)
	}
	old := cliTLS.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if err := get(old); err == nil {
		t.Fatal("a TLS 1.2 client was served")
	}
	other, _, err := testbed.HookCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherTLS, err := ClientTLS(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(otherTLS); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that pins another certificate: %v", err)
	}

	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ServerTLS(cert, key); err == nil || !strings.Contains(err.Error(), "group and others must have no access") {
		t.Fatalf("a group-readable key: %v", err)
	}
	if _, err := ClientTLS(""); err == nil {
		t.Fatal("no CA must be an error")
	}
	if _, err := ClientTLS(key); err == nil {
		t.Fatal("a file without a certificate must be an error")
	}
}
