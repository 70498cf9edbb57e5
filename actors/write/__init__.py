"""actors/write/: the writer's room: the Inker and the checks it runs on what it writes.

The Inker (``inker``) owns SQNs, segments, journal files and the journal half of the manifest;
before it gives a batch SQNs it checks its conditional writes, folds its merges and adds the
index specs deletes and ttl puts imply (``conditions``), reading the published views; the record
of recent commits that transactions validate against (``commits``) is kept by the same check.
The room sits above read/, whose views it reads, and below engine/, which starts the Inker.
"""
