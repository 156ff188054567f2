package slurmrest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// supportedVersions, newest first. Slurm 22.05 serves v0.0.36..38, 24.11 v0.0.40..42, 26.05 v0.0.42..45.
var supportedVersions = []string{
	"v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40",
	"v0.0.38", "v0.0.37", "v0.0.36",
}

// adapter translates the version-neutral operations into one API version's requests and replies.
type adapter interface {
	version() string
	ping(ctx context.Context, c *Client) error
	listJobs(ctx context.Context, c *Client, since time.Time) (JobList, error)
	getJob(ctx context.Context, c *Client, id uint32) (*Job, error)
	updateJob(ctx context.Context, c *Client, id uint32, u JobUpdate) error
	cancelJob(ctx context.Context, c *Client, id uint32) error
	submitJob(ctx context.Context, c *Client, s JobSubmission) (uint32, error)
	requeueJob(ctx context.Context, c *Client, id uint32) error
	canRequeue() bool
	jobStates(ctx context.Context, c *Client, ids []uint32) ([]JobStatus, error)
	canTrackStates() bool
}

func adapterFor(v string) (adapter, error) {
	switch v {
	case "v0.0.36", "v0.0.37", "v0.0.38":
		return &v0038Adapter{ver: v}, nil
	case "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45":
		var minor int
		fmt.Sscanf(v, "v0.0.%d", &minor)
		return &v0040Adapter{ver: v, minor: minor}, nil
	}
	return nil, fmt.Errorf("slurmrest: API version %q is not supported (supported: %v)", v, supportedVersions)
}

func (c *Client) adapter(ctx context.Context) (adapter, error) {
	c.mu.Lock()
	ad := c.ad
	c.mu.Unlock()
	if ad != nil {
		return ad, nil
	}
	if _, err := c.Negotiate(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ad, nil
}

// Negotiate picks the API version (the forced one, or the newest supported one the server offers)
// and returns it. Calls negotiate by themselves when needed; call it to fail early.
func (c *Client) Negotiate(ctx context.Context) (string, error) {
	c.mu.Lock()
	if c.ad != nil {
		v := c.ver
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()

	offered, err := c.offeredVersions(ctx)
	if err != nil {
		return "", err
	}
	for _, v := range supportedVersions {
		if offered[v] {
			ad, _ := adapterFor(v)
			c.mu.Lock()
			if c.ad == nil {
				c.ad, c.ver = ad, v
			}
			v = c.ver
			c.mu.Unlock()
			c.log.V(1).Info("slurmrestd API version negotiated", "version", v)
			return v, nil
		}
	}
	return "", fmt.Errorf("%w (offered: %v)", ErrNoVersion, keys(offered))
}

var slurmPathRE = regexp.MustCompile(`^/slurm/(v\d+\.\d+\.\d+)/`)

// offeredVersions reads the server's OpenAPI document; when that fails it pings each version.
func (c *Client) offeredVersions(ctx context.Context) (map[string]bool, error) {
	offered := map[string]bool{}
	r := request{method: http.MethodGet, path: "/openapi/v3", idempotent: true}
	resp, err := c.do(ctx, r)
	if err == nil && resp.status == http.StatusOK {
		var doc struct {
			Paths map[string]json.RawMessage `json:"paths"`
		}
		if json.Unmarshal(resp.body, &doc) == nil {
			for p := range doc.Paths {
				if m := slurmPathRE.FindStringSubmatch(p); m != nil {
					offered[m[1]] = true
				}
			}
			if len(offered) > 0 {
				return offered, nil
			}
		}
	}
	if err != nil {
		if errors.Is(err, ErrUnauthorized) || ctx.Err() != nil {
			return nil, fmt.Errorf("slurmrest: reading the OpenAPI document: %w", err)
		}
		c.log.V(1).Info("OpenAPI document unavailable, probing versions", "error", err.Error())
	}
	// Ping each version, newest first: 404 means not served.
	for _, v := range supportedVersions {
		ad, _ := adapterFor(v)
		path := "/slurm/" + v + "/ping"
		if _, new := ad.(*v0040Adapter); new {
			path += "/"
		}
		_, err := c.do(ctx, request{method: http.MethodGet, path: path, idempotent: true, version: v})
		var apiErr *APIError
		switch {
		case err == nil:
			offered[v] = true
			return offered, nil
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound:
			continue
		case errors.As(err, &apiErr):
			offered[v] = true // served, but unhappy (e.g. a bad token): the call will say why
			return offered, nil
		default:
			return nil, err
		}
	}
	return offered, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
