package configs

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEmbeddedCatalogParsesAndIsValid(t *testing.T) {
	t.Parallel()
	if err := Err(); err != nil {
		t.Fatalf("embedded catalog: %v", err)
	}
	var f catalogFile
	if err := json.Unmarshal(modelsJSON, &f); err != nil {
		t.Fatalf("models.json: %v", err)
	}
	if len(f.Models) < 500 || len(f.Patterns) < 10 {
		t.Fatalf("catalog looks truncated: %d models, %d patterns", len(f.Models), len(f.Patterns))
	}
	for _, m := range append(append([]Model{}, f.Models...), f.Patterns...) {
		if m.ContextWindow <= 0 {
			t.Errorf("%s%s: window %d", m.ID, m.Pattern, m.ContextWindow)
		}
		if !KnownEncoding(m.Encoding) {
			t.Errorf("%s%s: encoding %q", m.ID, m.Pattern, m.Encoding)
		}
		if m.Source == "" || m.Provider == "" {
			t.Errorf("%s%s: missing source or provider", m.ID, m.Pattern)
		}
	}
	for _, p := range f.Patterns {
		if !strings.Contains(p.Pattern, "*") {
			t.Errorf("pattern %q has no wildcard", p.Pattern)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id       string
		window   int
		encoding string
		provider string
		pattern  string // "" = exact match expected
	}{
		// Models the corpus sessions name; windows as in pi-ai 0.73.1.
		{"claude-sonnet-4-5", 200000, EncodingO200K, "anthropic", ""},
		{"claude-opus-4-5", 200000, EncodingO200K, "anthropic", ""},
		{"claude-opus-4-5-20251101", 200000, EncodingO200K, "anthropic", ""},
		{"claude-3-opus-20240229", 200000, EncodingO200K, "anthropic", ""},
		{"gemini-2.5-pro", 1048576, EncodingO200K, "google", ""}, // first party beats github-copilot's 128000
		{"gpt-5.1-codex", 400000, EncodingO200K, "openai", ""},
		{"gpt-4o", 128000, EncodingO200K, "openai", ""},
		{"gpt-4.1", 1047576, EncodingO200K, "openai", ""},
		{"gpt-4", 8192, EncodingCL100K, "openai", ""},
		{"gpt-4-turbo", 128000, EncodingCL100K, "openai", ""},
		{"o3", 200000, EncodingO200K, "openai", ""},
		{"o4-mini", 200000, EncodingO200K, "openai", ""},
		// Case-insensitive exact id.
		{"GPT-4o", 128000, EncodingO200K, "openai", ""},
		// Patterns: unknown snapshots and self-hosted open models.
		{"claude-future-9-20300101", 200000, EncodingO200K, "anthropic", "claude-*"},
		{"my-proxy/claude-x", 200000, EncodingO200K, "anthropic", "*claude*"},
		{"gpt-5.9-turbo-preview", 400000, EncodingO200K, "openai", "gpt-5*"},
		{"gpt-3.5-turbo-0125", 16385, EncodingCL100K, "openai", "gpt-3.5-turbo*"},
		{"gemini-9-ultra", 1048576, EncodingO200K, "google", "gemini-*"},
		{"Meta-Llama-3.1-8B-Instruct", 128000, EncodingO200K, "meta", "*llama*"},
		{"qwen2.5-coder-32b-local", 262144, EncodingO200K, "alibaba", "*qwen*"},
		{"grok-99", 131072, EncodingO200K, "xai", "grok-*"},
		// A family pattern for an unlisted snapshot.
		{"codestral-latest-2099", 256000, EncodingO200K, "mistral", "*codestral*"},
		// "gpt-5.1-codex-future" matches gpt-5* (6) and *codex* (7): the longer wins.
		{"gpt-5.1-codex-future", 400000, EncodingO200K, "openai", "*codex*"},
	}
	for _, tc := range tests {
		m, ok := Lookup(tc.id)
		if !ok {
			t.Errorf("Lookup(%q): not found", tc.id)
			continue
		}
		if m.ContextWindow != tc.window || m.Encoding != tc.encoding || m.Provider != tc.provider || m.Pattern != tc.pattern {
			t.Errorf("Lookup(%q) = %+v, want window %d encoding %s provider %s pattern %q",
				tc.id, m, tc.window, tc.encoding, tc.provider, tc.pattern)
		}
		if tc.pattern == "" && !strings.EqualFold(m.ID, tc.id) {
			t.Errorf("Lookup(%q).ID = %q", tc.id, m.ID)
		}
	}
}

func TestLookupUnknownAndDefault(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "totally-unknown-model", "x"} {
		if m, ok := Lookup(id); ok {
			t.Errorf("Lookup(%q) = %+v, want unknown", id, m)
		}
	}
	m, known := LookupOr("totally-unknown-model", DefaultModel)
	if known || m.ContextWindow != 128000 || m.Encoding != EncodingO200K || m.ID != "totally-unknown-model" {
		t.Errorf("LookupOr unknown = %+v, %v", m, known)
	}
	m, known = LookupOr("gpt-4", DefaultModel)
	if !known || m.ContextWindow != 8192 {
		t.Errorf("LookupOr(gpt-4) = %+v, %v", m, known)
	}
	if DefaultModel.ID != "" {
		t.Errorf("LookupOr modified DefaultModel: %+v", DefaultModel)
	}
}

func TestLookupProvider(t *testing.T) {
	t.Parallel()
	// Same id, different windows per provider in Pi's list.
	if m, ok := LookupProvider("github-copilot", "gemini-2.5-pro"); !ok || m.ContextWindow != 128000 {
		t.Errorf("github-copilot/gemini-2.5-pro = %+v %v, want 128000", m, ok)
	}
	if m, ok := LookupProvider("google", "gemini-2.5-pro"); !ok || m.ContextWindow != 1048576 {
		t.Errorf("google/gemini-2.5-pro = %+v %v", m, ok)
	}
	// Unknown provider falls back to the id.
	if m, ok := LookupProvider("my-gateway", "gpt-4"); !ok || m.ContextWindow != 8192 {
		t.Errorf("my-gateway/gpt-4 = %+v %v", m, ok)
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p, s string
		want bool
	}{
		{"claude-*", "claude-", true},
		{"claude-*", "claude", false},
		{"*claude*", "claude", true},
		{"*llama*", "accounts/x/llama-3", true},
		{"a*b", "ab", true},
		{"a*b", "a", false},
		{"a*b*c", "abxbc", true},
		{"a*bc*c", "abcc", true},
		{"a*bc*c", "abc", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tc := range tests {
		if got := globMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
}

func TestParseRejectsBadCatalog(t *testing.T) {
	t.Parallel()
	bad := []string{
		`{`,
		`{"models":[{"id":"m","provider":"p","contextWindow":0,"encoding":"o200k_base","source":"s"}]}`,
		`{"models":[{"id":"m","provider":"p","contextWindow":5,"encoding":"p50k_base","source":"s"}]}`,
		`{"models":[{"id":"m","provider":"p","contextWindow":5,"encoding":"o200k_base"}]}`,
		`{"patterns":[{"id":"m","provider":"p","contextWindow":5,"encoding":"o200k_base","source":"s"}]}`,
	}
	for _, b := range bad {
		if _, err := parse([]byte(b)); err == nil {
			t.Errorf("parse(%s) accepted", b)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, id string
		override     int
		window       int
		known        bool
		name         string
	}{
		{"anthropic", "claude-sonnet-4-5", 0, 200000, true, "anthropic/claude-sonnet-4-5"},
		// The provider's own figure wins over the id's preferred one.
		{"github-copilot", "gemini-2.5-pro", 0, 128000, true, "github-copilot/gemini-2.5-pro"},
		// An unknown provider falls back to the id alone.
		{"my-gateway", "gpt-4", 0, 8192, true, "my-gateway/gpt-4"},
		{"", "mystery-model-9000", 0, DefaultModel.ContextWindow, false, "mystery-model-9000"},
		{"", "", 0, DefaultModel.ContextWindow, false, ""},
		{"anthropic", "claude-sonnet-4-5", 40000, 40000, true, "anthropic/claude-sonnet-4-5"},
	}
	for _, tc := range tests {
		r := Resolve(tc.provider, tc.id, tc.override)
		if r.ContextWindow != tc.window || r.Known != tc.known || r.Name() != tc.name || r.WindowOverridden != (tc.override > 0) {
			t.Errorf("Resolve(%q, %q, %d) = window %d known %v name %q overridden %v; want %d %v %q",
				tc.provider, tc.id, tc.override, r.ContextWindow, r.Known, r.Name(), r.WindowOverridden, tc.window, tc.known, tc.name)
		}
		if r.Encoding() == "" || (!r.Known && r.Model.ID != tc.id) {
			t.Errorf("Resolve(%q, %q): encoding %q, model id %q", tc.provider, tc.id, r.Encoding(), r.Model.ID)
		}
	}
	if DefaultModel.ID != "" {
		t.Errorf("Resolve modified DefaultModel: %+v", DefaultModel)
	}
}
