"""Consumer-group offsets (issue 19): Kafka's ``__consumer_offsets`` records and the state replayed from them."""
