"""actors/ledger/: the ledger of keys, metadata and index entries.

The Penciller (``penciller``) owns memory tables, L0 and levels, and the ledger half of the
manifest; its clerk (``clerk``) chooses merges and runs them.
"""
