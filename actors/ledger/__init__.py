"""actors/ledger/: the ledger of keys, metadata and index entries.

The Penciller (``penciller``) owns memory tables, L0 and levels, and the ledger half of the
manifest; its clerk (``clerk``) runs merges. Two pure modules hold the logic they share:
``levels`` (the level structure, numbered so that 0 is L0 everywhere) and ``merge_policy``
(which merge comes next, behind the ``MergePolicy`` protocol).
"""
