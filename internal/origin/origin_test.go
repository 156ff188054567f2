package origin

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func TestSame(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"http://h:1/x", "http://h:1/y?z", true},
		{"http://H:80/", "http://h/", true},
		{"https://h/", "https://h:443/a", true},
		{"http://h:1/", "http://h:2/", false},
		{"http://h/", "https://h/", false},
		{"http://h/", "http://g/", false},
		{"http://127.0.0.1:6820/", "http://127.0.0.2:6820/", false},
	} {
		a, _ := url.Parse(c.a)
		b, _ := url.Parse(c.b)
		if Same(a, b) != c.same {
			t.Errorf("Same(%s, %s) = %v", c.a, c.b, !c.same)
		}
	}
}

// F14: a redirect to another port of the same host gets neither the custom token header nor Authorization;
// within the origin, redirects are followed.
func TestCheckRedirectKeepsTokensHome(t *testing.T) {
	var leaked atomic.Int32
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-SLURM-USER-TOKEN") != "" || r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
	}))
	defer thief.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, thief.URL+"/steal", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/ok":
			w.Write([]byte("ok"))
		}
	}))
	defer home.Close()
	c := &http.Client{CheckRedirect: CheckRedirect}
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, home.URL+path, nil)
		req.Header.Set("X-SLURM-USER-TOKEN", "secret-jwt")
		req.Header.Set("Authorization", "Bearer secret")
		return c.Do(req)
	}
	_, err := get("/away")
	if err == nil || !strings.Contains(err.Error(), "refusing a redirect") {
		t.Fatalf("redirect to another port: %v", err)
	}
	resp, err := get("/here")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("redirect within the origin: %v", err)
	}
	resp.Body.Close()
	if leaked.Load() != 0 {
		t.Fatalf("a token reached another origin %d times", leaked.Load())
	}
	// Without the check, net/http hands the custom header on: the check is what stops it.
	plain := &http.Client{}
	req, _ := http.NewRequest(http.MethodGet, home.URL+"/away", nil)
	req.Header.Set("X-SLURM-USER-TOKEN", "secret-jwt")
	if resp, err := plain.Do(req); err == nil {
		resp.Body.Close()
	}
	if leaked.Load() == 0 {
		t.Fatal("net/http no longer forwards custom headers on a redirect: this test proves nothing")
	}
}
