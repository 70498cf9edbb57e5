"""actors/files/: stored files and their life.

One clerk actor per SST (``sst_clerk``) or journal file (``journal_clerk``), sharing the end of
a file's life (``file_clerk``: delete_pending, then deletion), each started by ``start`` (the one
place a clerk actor is started, for an existing file or a new one); ``registry`` is what the
owners of files (the Inker and the Penciller) share: snapshot registrations and the answers to
their clerks' delete confirmations.
"""
