// Command aptproxy is the one way out of the bare-machine check's network namespace (test/bare/bare.sh): a plain
// HTTP forward proxy that the isolated root's apt-get uses to reach the Debian mirror the host uses, and nothing else.
// The root gets a network of its own so that the demo it runs can take the test bed's ports while the host's test
// bed keeps them; its apt-get still needs the mirror, which this serves. Requests for any other host are refused,
// and the proxy exits after -limit.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to listen on (the host's end of the namespace's link)")
	allow := flag.String("allow", "", "comma-separated host names that may be reached (the Debian mirror's)")
	limit := flag.Duration("limit", time.Hour, "exit after this long")
	flag.Parse()
	if *listen == "" || *allow == "" {
		fmt.Fprintln(os.Stderr, "usage: aptproxy -listen ADDR -allow HOST[,HOST] [-limit D]")
		os.Exit(2)
	}
	allowed := map[string]bool{}
	for _, h := range strings.Split(*allow, ",") {
		allowed[strings.ToLower(strings.TrimSpace(h))] = true
	}
	forward := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		// A proxy request carries the absolute URL: it is sent on as it came.
		pr.Out.URL = pr.In.URL
		pr.Out.Host = pr.In.URL.Host
	}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.URL.Scheme != "http" || !allowed[strings.ToLower(r.URL.Hostname())] {
			log.Printf("refused %s %s", r.Method, r.URL)
			http.Error(w, "aptproxy: only plain HTTP to "+*allow, http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	})
	time.AfterFunc(*limit, func() { log.Printf("exiting after %s", *limit); os.Exit(0) })
	srv := &http.Server{Addr: *listen, Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	log.Printf("forwarding plain HTTP to %s on %s", *allow, *listen)
	log.Fatal(srv.ListenAndServe())
}
