"""actors/kernel/: what every room of one open writer shares; it imports no room above it.

``context`` is the shared state the actors of a Bookie hold (``EngineContext``); ``keeper`` makes
every manifest commit (``ManifestKeeper``, ``commit_or_roll_back``); ``scheduler`` delivers timed
messages; ``throttle`` is backpressure; ``views`` are the immutable states the owners publish and
the read path reads (``ViewBoard``, ``LedgerView``, ``JournalView``, the handle and table types);
``in_flight`` names files written and not yet committed; ``meter`` counts operations and the
owners' work and makes the ``Metrics`` value; ``compute``, ``compute_worker`` and
``heap`` build files in worker processes and keep the process's heap in check.
"""
