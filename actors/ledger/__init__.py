"""actors/ledger/: the ledger of keys, metadata and index entries.

The Penciller (``penciller``) owns memory tables, L0 and levels, and the ledger half of the
manifest; its clerk (``penciller_clerk``) runs the merges the policy chooses. The pure logic they
share sits in ``manifest/``, beside the manifest it describes: ``manifest/levels`` (the level
structure, numbered so that 0 is L0 everywhere) and ``manifest/merge_policy`` (which merge comes
next, behind the ``MergePolicy`` protocol). ``compactor_levels`` adopts the levels a compactor
process committed.
"""
