package hookapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/hookapi/hookwire"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

// The hook API proves itself with TLS 1.3 and a certificate the hooks pin (deploy/make-secrets.sh makes hook.crt
// and hook.key): the hook secret is only ever sent to a listener that holds the key, so a local user who takes
// the port while the controller restarts (F5) gets a failed handshake, never the secret.

// ClientTLS is the hooks' TLS configuration: TLS 1.3, trusting only the certificates in caFile (the controller's
// own certificate, or the CA that signed it).
func ClientTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("no --hook-ca: the hooks send their secret only to a controller whose certificate they can check")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("hook CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("hook CA %s holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}, nil
}

// ServerTLS is the hook API's TLS configuration: TLS 1.3 with the certificate and key in certFile and keyFile,
// read again whenever either file changes, so a renewed certificate needs no restart. The key file must be
// readable by its owner only.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	kp := &keyPair{cert: certFile, key: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() }}, nil
}

type keyPair struct {
	cert, key string

	mu                sync.Mutex
	certMod, keyMod   time.Time
	certSize, keySize int64
	loaded            *tls.Certificate
}

func (k *keyPair) get() (*tls.Certificate, error) {
	cs, err := os.Stat(k.cert)
	if err != nil {
		return nil, fmt.Errorf("hook certificate: %w", err)
	}
	ks, err := secretfile.Check(k.key)
	if err != nil {
		return nil, fmt.Errorf("hook key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loaded != nil && cs.ModTime().Equal(k.certMod) && ks.ModTime().Equal(k.keyMod) && cs.Size() == k.certSize && ks.Size() == k.keySize {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil // half-written during a renewal: keep serving the one that worked
		}
		return nil, fmt.Errorf("hook certificate %s and key %s: %w", k.cert, k.key, err)
	}
	k.loaded, k.certMod, k.keyMod, k.certSize, k.keySize = &c, cs.ModTime(), ks.ModTime(), cs.Size(), ks.Size()
	return k.loaded, nil
}

// HookPost is the hooks' transport to https: replicas (hook.TLS): TLS 1.3, trusting only the certificates in
// caFile (ClientTLS).
func HookPost(caFile string) (hookwire.PostFunc, error) {
	conf, err := ClientTLS(caFile)
	if err != nil {
		return nil, err
	}
	return (&Client{TLS: conf}).callOne, nil
}
