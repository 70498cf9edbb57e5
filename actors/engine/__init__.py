"""actors/engine/: one open writer as a whole.

``startup`` starts its actors in order and stops them in reverse; ``bookie_actor`` is the Bookie
actor (the ledger cache, the release of writers, snapshots); ``keeper`` makes every manifest
commit; ``scheduler`` delivers timed messages; ``gc`` runs the writer's own GC; ``throttle`` is
backpressure; ``registry`` keeps snapshot registrations and delete confirmations for the file
owners; ``snapshot_clones`` are the actors behind a snapshot; ``hot_backup`` copies the journal;
``compute`` and ``compute_worker`` build files in another process; ``context`` is what they share.
"""
