"""actors/journal/: the journal, where values live.

The Inker (in ``actors/write/``) owns SQNs, segments, journal files and the journal half of the
manifest; its clerk (``inker_clerk``) rolls segments into journal files and compacts them by the
rules in ``retention``; the write intake (``intake``) gathers puts into batches; ``changes`` turns
API calls into checked journal entries and the ledger entries they imply; ``replay`` turns the
journal above the ledger's persisted SQN back into ledger entries (start-up, read-only views);
``compactor_files`` adopts the journal files a compactor process committed.
"""
