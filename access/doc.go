// Package access is how a compactor process reaches a fleet's NATS and what it may do
// there: the connection settings (NATSConfig, credentials, TLS, the inbox prefix), the
// local service's data directory and token, the roles and the permissions `compactor auth`
// writes for them, and the server's refusals turned into errors that name the role a
// subject needs.
//
// It is separate because every process needs it before anything else (a worker, a client,
// the operator, the extension's credentials), and it depends on nothing but the names of
// package wire: the permissions are written from the same subjects and keys the messages
// travel on.
package access
