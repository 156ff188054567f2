// Command juice-legacy-issuer is the test bed's JWT issuer for the legacy Juice controller (package
// test/juicelegacy/issuer). Standard library only.
//
//	juice-legacy-issuer init  -dir DIR -listen 127.0.0.1:8481      create keys and certificates (kept if they exist)
//	juice-legacy-issuer serve -dir DIR -listen 127.0.0.1:8481      init, then serve the discovery document and JWKS over HTTPS
//	juice-legacy-issuer mint  -dir DIR -aud AUD -sub SUB [-ttl 24h] -out FILE   write a token, mode 0600
//
// Start the controller with -enable-token-validation -auth-domain 127.0.0.1:8481 -auth-audience AUD and
// SSL_CERT_FILE=DIR/ca.pem.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/juice-slurm/juice-slurm/test/juicelegacy/issuer"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "init":
		err = cmdInit(os.Args[2:], false)
	case "serve":
		err = cmdInit(os.Args[2:], true)
	case "mint":
		err = cmdMint(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "juice-legacy-issuer:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: juice-legacy-issuer init|serve|mint [flags] (-h for the flags)")
	os.Exit(2)
}

func cmdInit(args []string, serve bool) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "", "issuer directory (keys, certificates, issuer.json)")
	listen := fs.String("listen", "127.0.0.1:8481", "host:port to serve on; the issuer URL is https://HOST:PORT/")
	_ = fs.Parse(args)
	if *dir == "" {
		return errors.New("-dir is required")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-listen %s: a test issuer listens on loopback only", *listen)
	}
	is, err := issuer.Init(*dir, *listen)
	if err != nil {
		return err
	}
	if !serve {
		fmt.Println(is.Config.Issuer)
		return nil
	}
	tlsCfg, err := is.TLSConfig()
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	srv := &http.Server{
		Addr:              *listen,
		Handler:           is.Handler(logger.Printf),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          logger,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	logger.Printf("issuer %s (kid %s) serving %s.well-known/openid-configuration and jwks.json", is.Config.Issuer, is.Config.KeyID, is.Config.Issuer)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Printf("stopped")
	return nil
}

func cmdMint(args []string) error {
	fs := flag.NewFlagSet("mint", flag.ExitOnError)
	dir := fs.String("dir", "", "issuer directory made by init or serve")
	aud := fs.String("aud", "", "audience (comma-separated for several); the controller's -auth-audience")
	sub := fs.String("sub", "juice-slurm-test", "subject (the user the pools' permissions go to)")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime (exp = now + ttl); 0 leaves exp out (the legacy validator accepts that), < 0 mints an expired token")
	out := fs.String("out", "", "token file, written with mode 0600 (default: stdout)")
	// For tests of rejected tokens:
	iss := fs.String("iss", "", "override the iss claim")
	alg := fs.String("alg", "", "override the header's alg (the signature stays RS256)")
	kid := fs.String("kid", "", "override the header's kid")
	noKID := fs.Bool("no-kid", false, "leave kid out of the header")
	iatOffset := fs.Duration("iat-offset", 0, "iat = now + offset")
	_ = fs.Parse(args)
	if *dir == "" || *aud == "" {
		return errors.New("-dir and -aud are required")
	}
	is, err := issuer.Load(*dir)
	if err != nil {
		return err
	}
	c := issuer.Claims{Subject: *sub, Audience: strings.Split(*aud, ","), Issuer: *iss, IssuedAt: time.Now().Add(*iatOffset)}
	if *ttl != 0 {
		c.Expiry = time.Now().Add(*ttl)
	}
	h := issuer.Header{Alg: *alg, KeyID: *kid, NoKID: *noKID}
	if *out == "" {
		tok, err := is.MintWithHeader(h, c)
		if err != nil {
			return err
		}
		fmt.Println(tok)
		return nil
	}
	tok, err := is.MintWithHeader(h, c)
	if err != nil {
		return err
	}
	return issuer.WriteFileAtomic(*out, []byte(tok+"\n"), 0o600)
}
