package main

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/wire"
)

// The contract the extension's TypeScript is generated from. Everything here is read from
// the Go side; only the names of the TypeScript builders and their parameters are chosen here.

// A message that crosses NATS between compactor and the extension.
type message struct {
	Name string
	Type reflect.Type
}

var messages = []message{
	{"Job", reflect.TypeFor[wire.Job]()},
	{"Event", reflect.TypeFor[wire.Event]()},
	{"BridgeRequest", reflect.TypeFor[wire.BridgeRequest]()},
	{"BridgeReply", reflect.TypeFor[wire.BridgeReply]()},
	{"HookReport", reflect.TypeFor[wire.HookReport]()},
	// The prepared value in COMPACTOR_PREPARED (and a bridge reply's prepared).
	{"Prepared", reflect.TypeFor[engine.Prepared]()},
}

// A constant of the contract; a list may name the union type of its words.
type constant struct {
	Name  string
	Value any
	Union string
}

var constants = []constant{
	{Name: "JobsPrefix", Value: wire.JobsPrefix},
	{Name: "EventsPrefix", Value: wire.EventsPrefix},
	{Name: "DLQPrefix", Value: wire.DLQPrefix},
	{Name: "HooksPrefix", Value: wire.HooksPrefix},
	{Name: "BridgePrefix", Value: wire.BridgePrefix},
	{Name: "StreamJobs", Value: wire.StreamJobs},
	{Name: "StreamEvents", Value: wire.StreamEvents},
	{Name: "BucketPrepared", Value: wire.BucketPrepared},
	{Name: "KVSubjectRoot", Value: wire.KVSubjectRoot},
	{Name: "JobVersion", Value: wire.JobVersion},
	{Name: "EventVersion", Value: wire.EventVersion},
	{Name: "BridgeVersion", Value: wire.BridgeVersion},
	{Name: "HookVersion", Value: wire.HookVersion},
	{Name: "KindPrepare", Value: wire.KindPrepare},
	{Name: "HookOutcomes", Value: []string{wire.HookHit, wire.HookMiss, wire.HookStale, wire.HookError}, Union: "HookOutcome"},
	{Name: "HookResults", Value: []string{wire.HookResultPrepared, wire.HookResultExtract, wire.HookResultPi}, Union: "HookResult"},
	{Name: "HookReasons", Value: wire.HookReasons, Union: "HookReason"},
}

// A subject or key builder: the TypeScript function takes the session's token (the extension
// computes it: sessionToken), Go's takes the session id; Template says how the parts join,
// {Name} being a constant or a parameter. Go is Go's builder, checked against the template.
type builder struct {
	Name     string
	Doc      string
	Params   []string
	Template string
	Go       func(store, sessionID, arg string) string
}

var builders = []builder{
	{Name: "jobSubject", Doc: "compactor.jobs.<store>.<session token>.<kind> (wire.JobSubject)", Params: []string{"store", "token", "kind"},
		Template: "{JobsPrefix}{store}.{token}.{kind}", Go: wire.JobSubject},
	{Name: "eventSubject", Doc: "compactor.events.<store>.<session token>: the session's events are on <it>.<job seq> (wire.EventSubject)", Params: []string{"store", "token"},
		Template: "{EventsPrefix}{store}.{token}", Go: func(store, id, _ string) string { return wire.EventSubject(store, id) }},
	{Name: "jobEventSubject", Doc: "compactor.events.<store>.<session token>.<job seq> (wire.JobEventSubject)", Params: []string{"store", "token", "seq"},
		Template: "{EventsPrefix}{store}.{token}.{seq}", Go: func(store, id, seq string) string {
			n, _ := strconv.ParseUint(seq, 10, 64)
			return wire.JobEventSubject(store, id, n)
		}},
	{Name: "bridgeSubject", Doc: "compactor.bridge.<store>.<session token> (wire.BridgeSubject)", Params: []string{"store", "token"},
		Template: "{BridgePrefix}{store}.{token}", Go: func(store, id, _ string) string { return wire.BridgeSubject(store, id) }},
	{Name: "hookSubject", Doc: "compactor.hooks.<store>.<session token> (wire.HookSubject)", Params: []string{"store", "token"},
		Template: "{HooksPrefix}{store}.{token}", Go: func(store, id, _ string) string { return wire.HookSubject(store, id) }},
	{Name: "preparedKey", Doc: "<store>.<session token>: the session's key in COMPACTOR_PREPARED (wire.PreparedKey)", Params: []string{"store", "token"},
		Template: "{store}.{token}", Go: func(store, id, _ string) string { return wire.PreparedKey(store, id) }},
	{Name: "preparedSubject", Doc: "$KV.COMPACTOR_PREPARED.<store>.<session token>: the subject of that key (wire.PreparedSubject)", Params: []string{"store", "token"},
		Template: "{KVSubjectRoot}{BucketPrepared}.{store}.{token}", Go: func(store, id, _ string) string { return wire.PreparedSubject(store, id) }},
}

var placeholder = regexp.MustCompile(`\{(\w+)\}`)

// tsTemplate is the template as a TypeScript template literal's body.
func (b builder) tsTemplate() string {
	return placeholder.ReplaceAllString(b.Template, "$${$1}")
}

// render is what the TypeScript builder returns for the given parameter values.
func (b builder) render(args map[string]string) string {
	return placeholder.ReplaceAllStringFunc(b.Template, func(m string) string {
		name := strings.Trim(m, "{}")
		if v, ok := args[name]; ok {
			return v
		}
		for _, c := range constants {
			if c.Name == name {
				if s, ok := c.Value.(string); ok {
					return s
				}
			}
		}
		panic("wirets: " + b.Name + ": {" + name + "} is neither a parameter nor a string constant")
	})
}
