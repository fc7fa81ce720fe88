package fleetops

// What setup makes in a NATS account, for the account's limits (compactor auth).

// operatorConsumers is the room an account keeps for the operator's and the admin's reads
// at once: a console's four (its watches of the workers, the leases and the pause records,
// and the events), status's three, dlq's, and the admin's tools. A store's worker cannot
// take it: the only consumers it may create are its sweep watches, which their bucket
// bounds (SweepWatches).
const operatorConsumers = 24

// AccountStreams is how many streams setup makes in an account: the streams and the
// buckets (each bucket is a stream).
func AccountStreams() int {
	sc := SetupConfig{}.WithDefaults()
	return len(streamConfigs(sc)) + len(bucketConfigs(sc, 0))
}

// AccountStorage is the file storage setup's default limits reserve in an account, with
// replicas replicas of each stream.
func AccountStorage(replicas int) int64 {
	sc := SetupConfig{Replicas: max(replicas, 1)}.WithDefaults()
	var n int64
	for _, c := range append(bucketConfigs(sc, 0), streamConfigs(sc)...) {
		n += c.MaxBytes * int64(c.Replicas)
	}
	return n
}

// AccountConsumers is the most consumers an account of n stores uses: two per store (its
// jobs' and its dead letters' count), the watches of its sweep records (SweepWatches),
// and the operator's and the admin's reads.
func AccountConsumers(stores int) int { return 2*stores + SweepWatches(stores) + operatorConsumers }
