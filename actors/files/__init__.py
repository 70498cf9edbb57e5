"""actors/files/: stored files and their life.

One clerk actor per SST (``sst_clerk``) or journal file (``journal_clerk``), sharing the end of a
file's life (``clerk``: delete_pending, then deletion); ranged reads of a stored object
(``fetch``); the files this writer stored but has not committed yet (``in_flight``).
"""
