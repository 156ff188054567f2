// Package wirecheck compares the hand-written wire types with the OpenAPI documents slurmrestd serves.
//
// Walk follows each wire type's JSON fields through the version's schema (resolving $ref) and reports
// every field the schema lacks (unless tagged `openapi:"optional"`) and every kind that disagrees.
// Trim produces, from a full document, a small dereferenced one holding only the visited properties:
// that is what testdata/openapi keeps, so that the check runs offline.
package wirecheck

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire"
)

// Root pairs a wire type with the schema (name without the version prefix) it mirrors.
type Root struct {
	Schema string
	Type   reflect.Type
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// Roots returns the schemas the client uses for an API version.
func Roots(version string) []Root {
	if strings.HasPrefix(version, "v0.0.3") {
		return []Root{
			{"jobs_response", typeOf[wire.V0038JobsResponse]()},
			{"pings", typeOf[wire.V0038PingResponse]()},
			{"job_submission", typeOf[wire.V0038JobSubmission]()},
			{"job_submission_response", typeOf[wire.V0038JobSubmissionResponse]()},
		}
	}
	roots := []Root{
		{"openapi_job_info_resp", typeOf[wire.V0040JobInfoResponse]()},
		{"openapi_ping_array_resp", typeOf[wire.V0040PingResponse]()},
		{"job_submit_req", typeOf[wire.V0040JobSubmitReq]()},
		{"openapi_job_submit_response", typeOf[wire.V0040JobSubmitResponse]()},
		{"openapi_job_post_response", typeOf[wire.V0040JobPostResponse]()},
	}
	switch version {
	case "v0.0.40", "v0.0.41":
		roots = append(roots, Root{"openapi_resp", typeOf[wire.V0040KillResponse]()})
	default:
		roots = append(roots, Root{"openapi_kill_job_resp", typeOf[wire.V0040KillResponse]()})
	}
	if version >= "v0.0.45" {
		roots = append(roots, Root{"openapi_job_requeue_resp", typeOf[wire.V0045JobRequeueResponse]()})
	}
	return roots
}

// Schema is the part of an OpenAPI schema object the walk needs.
type Schema struct {
	Ref        string             `json:"$ref,omitempty"`
	Type       string             `json:"type,omitempty"`
	Properties map[string]*Schema `json:"properties,omitempty"`
	Items      *Schema            `json:"items,omitempty"`
}

// Doc is an OpenAPI document reduced to its schemas (a trimmed document has the same shape).
type Doc struct {
	Components struct {
		Schemas map[string]*Schema `json:"schemas"`
	} `json:"components"`
}

func (d *Doc) resolve(s *Schema) (*Schema, error) {
	for depth := 0; s != nil && s.Ref != ""; depth++ {
		if depth > 20 {
			return nil, fmt.Errorf("$ref loop at %s", s.Ref)
		}
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		next, ok := d.Components.Schemas[name]
		if !ok {
			return nil, fmt.Errorf("$ref %s not found", s.Ref)
		}
		s = next
	}
	return s, nil
}

// Walk checks the roots of a version against doc and returns the trimmed schemas (keyed by full
// schema name) and the problems found.
func Walk(doc *Doc, version string) (trimmed map[string]*Schema, problems []string) {
	trimmed = map[string]*Schema{}
	for _, r := range Roots(version) {
		name := version + "_" + r.Schema
		s, ok := doc.Components.Schemas[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("schema %s missing", name))
			continue
		}
		out, p := walk(doc, s, r.Type, name)
		problems = append(problems, p...)
		trimmed[name] = out
	}
	sort.Strings(problems)
	return trimmed, problems
}

func walk(doc *Doc, s *Schema, t reflect.Type, where string) (*Schema, []string) {
	s, err := doc.resolve(s)
	if err != nil {
		return nil, []string{where + ": " + err.Error()}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := &Schema{Type: s.Type}
	var problems []string
	bad := func(want string) {
		problems = append(problems, fmt.Sprintf("%s: Go %s but OpenAPI type %q", where, t, s.Type))
		_ = want
	}
	switch {
	case t == reflect.TypeFor[wire.Int]():
		if s.Type != "integer" && s.Type != "number" && s.Type != "string" {
			bad("integer")
		}
	case t.Kind() == reflect.Interface:
		// any: whatever the version declares
	case t.Kind() == reflect.String:
		if s.Type != "string" {
			bad("string")
		}
	case t.Kind() == reflect.Bool:
		if s.Type != "boolean" {
			bad("boolean")
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if s.Type != "integer" {
			bad("integer")
		}
	case t.Kind() == reflect.Slice:
		if s.Type != "array" {
			bad("array")
			break
		}
		if s.Items == nil {
			problems = append(problems, where+": array without items")
			break
		}
		items, p := walk(doc, s.Items, t.Elem(), where+"[]")
		out.Items = items
		problems = append(problems, p...)
	case t.Kind() == reflect.Map:
		if s.Type != "object" {
			bad("object")
		}
	case t.Kind() == reflect.Struct:
		if s.Type != "object" && s.Type != "" {
			bad("object")
			break
		}
		out.Properties = map[string]*Schema{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || name == "" {
				continue
			}
			prop, ok := s.Properties[name]
			if !ok {
				if f.Tag.Get("openapi") != "optional" {
					problems = append(problems, fmt.Sprintf("%s.%s: not in the OpenAPI document", where, name))
				}
				continue
			}
			ps, p := walk(doc, prop, f.Type, where+"."+name)
			problems = append(problems, p...)
			if ps != nil {
				out.Properties[name] = ps
			}
		}
	default:
		problems = append(problems, fmt.Sprintf("%s: unexpected Go kind %s", where, t.Kind()))
	}
	return out, problems
}
