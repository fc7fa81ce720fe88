package fleetops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Creating or updating one stream or consumer: create-only first, then an update from what
// the server holds where this setup's settings differ.

// StoreConsumerConfig is the durable pull consumer of a store. Its deliveries are not bounded
// here (MaxDeliver -1): a worker bounds them with the message in hand (admit), so that no
// worker needs the right to read or delete a message of the stream by its sequence.
func StoreConsumerConfig(cfg SetupConfig, store string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(store),
		Description:   "compactor workers of store " + store,
		FilterSubject: wire.JobsPrefix + store + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 10000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// DLQConsumerConfig is the consumer that counts a store's dead letters.
func DLQConsumerConfig(store string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       DLQConsumerName(store),
		Description:   "counts the dead letters of store " + store + " (nothing fetches from it)",
		FilterSubject: wire.DLQPrefix + store + ".>",
		AckPolicy:     jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// maxCreateRounds bounds create, read, update rounds on a stream that keeps being deleted
// and created by someone else meanwhile.
const maxCreateRounds = 5

// ensureStream creates the stream with a create-only request, or, when it exists,
// updates it from what the server holds where want differs (see reconcile).
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	for round := 1; ; round++ {
		// Created, or found with exactly this configuration (the server answers a create of
		// an identical stream with the stream).
		str, err := js.CreateStream(ctx, want)
		if err == nil {
			return str, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, explainReplicas(err, want.Replicas))
		}
		str, err = js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
			continue // deleted since: create it again
		}
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", want.Name, err)
		}
		next, ok, err := Reconcile("stream", want.Name, str.CachedInfo().Config, want, log)
		if err != nil || ok {
			return str, err
		}
		str, err = js.UpdateStream(ctx, next)
		if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update stream %s: %w", want.Name, explainReplicas(err, next.Replicas))
		}
		return str, nil
	}
}

// ensureConsumer creates a durable consumer with a create-only request, or updates the
// one the server holds where want differs.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, log *slog.Logger) (jetstream.Consumer, error) {
	for round := 1; ; round++ {
		c, err := js.CreateConsumer(ctx, stream, want)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return nil, fmt.Errorf("create consumer %s: %w", want.Durable, err)
		}
		c, err = js.Consumer(ctx, stream, want.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read consumer %s: %w", want.Durable, err)
		}
		have := c.CachedInfo().Config
		next := have
		var changes []change
		differ(&changes, "description", &next.Description, want.Description)
		differ(&changes, "filter_subject", &next.FilterSubject, want.FilterSubject)
		differ(&changes, "ack_wait", &next.AckWait, want.AckWait)
		differ(&changes, "max_deliver", &next.MaxDeliver, want.MaxDeliver)
		differ(&changes, "max_ack_pending", &next.MaxAckPending, want.MaxAckPending)
		if len(changes) == 0 {
			return c, nil
		}
		logChanges(log, "consumer", want.Durable, changes)
		c, err = js.UpdateConsumer(ctx, stream, next)
		if errors.Is(err, jetstream.ErrConsumerNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update consumer %s: %w", want.Durable, err)
		}
		return c, nil
	}
}

// change is one setting an update changes.
type change struct {
	setting  string
	old, new any
}

// differ notes a change and applies it to *have when want is set (not the zero value: a
// zero setting is the server's default, which the server writes back filled in) and
// differs from it.
func differ[T comparable](changes *[]change, setting string, have *T, want T) {
	var zero T
	if want != zero && *have != want {
		*changes = append(*changes, change{setting, *have, want})
		*have = want
	}
}

func logChanges(log *slog.Logger, kind, name string, changes []change) {
	for _, c := range changes {
		log.Info("updating a setting on the server: this process's configuration differs", kind, name,
			"setting", c.setting, "old", fmt.Sprint(c.old), "new", fmt.Sprint(c.new))
	}
}

// Reconcile returns the configuration to update a stream to: what the server holds (have)
// with want's settings where they differ, and the replicas raised to want's but never
// lowered. ok means there is nothing to update. Settings a stream cannot change
// (retention, storage) are an error that names them.
func Reconcile(kind, name string, have, want jetstream.StreamConfig, log *slog.Logger) (next jetstream.StreamConfig, ok bool, err error) {
	if want.Retention != have.Retention && want.Retention != 0 {
		return have, false, fmt.Errorf("%s %s: its retention on the server is %s, compactor needs %s; the setting cannot be changed (delete the %s to let `compactor run` create it again)", kind, name, have.Retention, want.Retention, kind)
	}
	next = have
	var changes []change
	differ(&changes, "description", &next.Description, want.Description)
	if len(want.Subjects) > 0 && !slices.Equal(have.Subjects, want.Subjects) {
		changes = append(changes, change{"subjects", have.Subjects, want.Subjects})
		next.Subjects = want.Subjects
	}
	differ(&changes, "max_msgs_per_subject", &next.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	differ(&changes, "discard", &next.Discard, want.Discard)
	differ(&changes, "discard_new_per_subject", &next.DiscardNewPerSubject, want.DiscardNewPerSubject)
	differ(&changes, "max_age", &next.MaxAge, want.MaxAge)
	differ(&changes, "max_bytes", &next.MaxBytes, want.MaxBytes)
	differ(&changes, "duplicate_window", &next.Duplicates, want.Duplicates)
	differ(&changes, "max_msgs", &next.MaxMsgs, want.MaxMsgs)
	differ(&changes, "max_consumers", &next.MaxConsumers, want.MaxConsumers)
	differ(&changes, "allow_direct", &next.AllowDirect, want.AllowDirect)
	differ(&changes, "allow_msg_ttl", &next.AllowMsgTTL, want.AllowMsgTTL) // never turned off: the server refuses it
	// What a message's headers may do, set as this version wants it whatever the server
	// holds (a bucket made by the client library allows rollups); a deny once set stays
	// (the server refuses to lift it).
	if have.AllowRollup != want.AllowRollup {
		changes = append(changes, change{"allow_rollup_hdrs", have.AllowRollup, want.AllowRollup})
		next.AllowRollup = want.AllowRollup
	}
	differ(&changes, "deny_delete", &next.DenyDelete, want.DenyDelete)
	differ(&changes, "deny_purge", &next.DenyPurge, want.DenyPurge)
	switch {
	case want.Replicas > have.Replicas:
		changes = append(changes, change{"replicas", have.Replicas, want.Replicas})
		next.Replicas = want.Replicas
	case want.Replicas < have.Replicas:
		log.Info("keeping the replicas set on the server (higher than --replicas)", kind, name, "replicas", have.Replicas, "configured", want.Replicas)
	}
	if len(changes) == 0 {
		return have, true, nil
	}
	logChanges(log, kind, name, changes)
	return next, false, nil
}

// explainReplicas adds what an operator can do to the errors a replica count causes.
func explainReplicas(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Errorf("%w (--replicas %d needs a clustered NATS; this server is not clustered: use --replicas 1)", err, replicas)
	case errCodeInsufficientResources, errCodeClusterNoPeers:
		return fmt.Errorf("%w (%d replicas need %d JetStream servers up in the cluster)", err, replicas, replicas)
	case errCodeStorageExceeded:
		return fmt.Errorf("%w (the server reserves every stream's byte limit: the limits of compactor's streams and buckets do not fit the JetStream storage left to this account or server; lower --jobs-max-bytes, --events-max-bytes, --dlq-max-bytes or --records-max-bytes, or raise the account's storage (compactor auth --max-storage) or the server's max_file_store)", err)
	}
	return err
}

// JetStream API error codes the pipeline tells apart (nats-server's errors.json).
const (
	errCodeClusterNoPeers        jetstream.ErrorCode = 10005 // "no suitable peers for placement": too few servers up (yet)
	errCodeClusterNotAvail       jetstream.ErrorCode = 10008 // "JetStream system temporarily unavailable"
	errCodeClusterNotLeader      jetstream.ErrorCode = 10009
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeStorageExceeded       jetstream.ErrorCode = 10047 // "insufficient storage resources available"
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // replicas > 1 on a server that is not clustered
	errCodeStreamOffline         jetstream.ErrorCode = 10118
	errCodeStreamOfflineReason   jetstream.ErrorCode = 10194
)

// transient reports whether a JetStream error may go away by itself: a timeout, no
// responders, a cluster electing a leader or missing a peer for a while.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeDiscardNewPerSubject:
			return false // "already queued" is a 503 too, and an answer
		case errCodeClusterNoPeers, errCodeClusterNotAvail, errCodeClusterNotLeader, errCodeInsufficientResources, errCodeStreamOffline, errCodeStreamOfflineReason:
			return true
		}
		return apiErr.Code == 503
	}
	return false
}

// Transient reports whether a JetStream error may go away by itself (a timeout, a cluster
// electing a leader): worth trying again within a startup timeout.
func Transient(err error) bool { return transient(err) }
