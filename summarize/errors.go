package summarize

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrorKind classifies a failed model call so the pipeline can choose between retrying
// later, shrinking the input, and giving up.
type ErrorKind int

const (
	// KindPermanent: retrying the same request will not help (bad key, bad model, bad
	// request, empty completion).
	KindPermanent ErrorKind = iota
	// KindTransient: a server or network failure (5xx, 408, 409, connection reset,
	// malformed body) that a later attempt may not see.
	KindTransient
	// KindRateLimited: the endpoint asked us to slow down (429); RetryAfter says when.
	KindRateLimited
	// KindTimeout: the per-call timeout expired.
	KindTimeout
	// KindContextLength: the prompt does not fit the model; send less, not again.
	KindContextLength
	// KindCanceled: the caller's context ended.
	KindCanceled
)

func (k ErrorKind) String() string {
	switch k {
	case KindPermanent:
		return "permanent"
	case KindTransient:
		return "transient"
	case KindRateLimited:
		return "rate-limited"
	case KindTimeout:
		return "timeout"
	case KindContextLength:
		return "context-length"
	case KindCanceled:
		return "canceled"
	}
	return fmt.Sprintf("error-kind(%d)", int(k))
}

// Sentinel errors, matched with errors.Is on an *Error.
var (
	// ErrContextLength: the endpoint rejected the prompt as longer than the model's
	// context window. The caller must shrink the input (the chunked summary does).
	ErrContextLength = errors.New("prompt exceeds the model's context window")
	// ErrEmptyCompletion: the endpoint answered without any summary text.
	ErrEmptyCompletion = errors.New("empty completion")
	// ErrMalformedResponse: the endpoint's answer was not the JSON of a chat completion.
	ErrMalformedResponse = errors.New("malformed response")
	// ErrTruncatedSummary: the summary stopped at its output limit (finish_reason "length"),
	// which Pi refuses from 0.84.4 (pi.TruncatedSummaryRefused).
	ErrTruncatedSummary = errors.New("summary stopped at its output limit")
)

// Error is a failed model call. Its message never contains the API key: every text that
// came from the endpoint or the transport is redacted before it is stored, and the
// original error values are not kept (only the sentinels above and context errors).
type Error struct {
	Kind ErrorKind
	// Status is the HTTP status (0 when no response was received).
	Status int
	// Code and Type are the provider's error code and type, when it sent them.
	Code, Type string
	// Message is the redacted description.
	Message string
	// RetryAfter is the delay the endpoint asked for (Retry-After), or 0.
	RetryAfter time.Duration
	// Attempts is the number of HTTP attempts made.
	Attempts int
	cause    error // a sentinel or a context error
}

func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("llm ")
	sb.WriteString(e.Kind.String())
	if e.Status != 0 {
		fmt.Fprintf(&sb, " (HTTP %d", e.Status)
		if e.Code != "" {
			sb.WriteString(", code ")
			sb.WriteString(e.Code)
		}
		sb.WriteString(")")
	}
	if e.Message != "" {
		sb.WriteString(": ")
		sb.WriteString(e.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&sb, " (after %d attempts)", e.Attempts)
	}
	return sb.String()
}

// Unwrap exposes the sentinel (ErrContextLength, ErrEmptyCompletion,
// ErrMalformedResponse) or the context error behind e.
func (e *Error) Unwrap() error { return e.cause }

// Retryable reports whether a later attempt of the same request may succeed.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindTransient, KindRateLimited, KindTimeout:
		return true
	}
	return false
}

// IsRetryable reports whether err (anywhere in its chain) is a model-call failure worth
// retrying later, and the delay the endpoint asked for (0 if none).
func IsRetryable(err error) (retryAfter time.Duration, ok bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.RetryAfter, e.Retryable()
}

// KindOf returns the ErrorKind of err, and false when err carries no *Error.
func KindOf(err error) (ErrorKind, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.Kind, true
}

// classifyStatus maps an HTTP status to a kind (context length is detected separately).
func classifyStatus(status int) ErrorKind {
	switch {
	case status == 429:
		return KindRateLimited
	case status == 408:
		return KindTimeout
	case status == 409, status >= 500:
		return KindTransient
	}
	return KindPermanent
}

// contextLengthPhrases are fragments of the messages providers send when a prompt is
// longer than the model accepts (OpenAI, Azure, Anthropic-compatible proxies, vLLM,
// llama.cpp, Ollama, OpenRouter, Mistral, Groq, DeepSeek, Gemini's OpenAI layer). They are
// matched case-insensitively on 400/413/422 answers.
var contextLengthPhrases = []string{
	"context_length_exceeded",
	"maximum context length",
	"context length",
	"context window",
	"prompt is too long",
	"input is too long",
	"too many tokens",
	"tokens exceeds",
	"exceeds the limit of",
	"reduce the length",
	"request too large",
	"string_above_max_length",
	"input length",
	"exceed_context_size",
	"maximum prompt length",
}

// isContextLength reports whether an error answer means "prompt too long".
func isContextLength(status int, code, typ, msg string) bool {
	if code == "context_length_exceeded" || typ == "context_length_exceeded" {
		return true
	}
	if status != 400 && status != 413 && status != 422 && status != 0 {
		return false
	}
	low := strings.ToLower(msg + " " + code + " " + typ)
	for _, p := range contextLengthPhrases {
		if strings.Contains(low, p) {
			return true
		}
	}
	return false
}

// ctxError turns a context error into an *Error.
func ctxError(err error, attempts int) *Error {
	kind := KindCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		kind = KindTimeout
	}
	return &Error{Kind: kind, Message: err.Error(), Attempts: attempts, cause: err}
}
