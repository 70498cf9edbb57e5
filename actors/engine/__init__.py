"""actors/engine/: one open writer as a whole, composed from the rooms below.

``engine`` starts its actors in order, stops them in reverse and is the ``Engine`` the public
handle calls; ``bookie_actor`` is the Bookie actor (the ledger cache, the release of writers,
snapshots); ``collector`` runs the writer's own GC; ``snapshot_clones`` are the actors behind a
snapshot; ``hot_backup`` copies the journal; ``compactor`` is the compactor role (merges and GC in
a process of their own, no actors). What the rooms share is in ``actors/kernel/``.
"""
