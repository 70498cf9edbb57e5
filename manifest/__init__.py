"""manifest/: the CAS-advanced manifest, writer epochs, checkpoints, clones, destroy and GC.

The names below are imported from their modules on first use (:mod:`inkpen._lazy`), so a module
that needs the model alone does not load the copies, GC and fencing. ``destroy`` lives in
:mod:`.destroy` (a name the package does not export, as it is also the module's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inkpen._lazy import lazy_exports

if TYPE_CHECKING:
    from .checkpoints import (
        CheckpointLease,
        create_checkpoint,
        delete_checkpoint,
        drop_expired,
        ensure_checkpoint,
        list_checkpoints,
        refresh_checkpoint,
    )
    from .clones import StoreResolver, create_clone
    from .copies import CopyReport, copy_database
    from .fencing import (
        SegmentRef,
        WriterClaim,
        accepted_segments,
        claim_writer,
        list_segments,
        segment_epoch,
        with_epochs,
        write_segment,
    )
    from .gc import GcOptions, GcPlan, GcReport, detach_clone, plan_gc, run_gc
    from .model import (
        Checkpoint,
        CloneParent,
        JournalFileDescriptor,
        JournalState,
        LedgerState,
        Manifest,
        SstDescriptor,
        VersionedManifest,
        decode,
        encode,
    )
    from .store import ManifestStore, RootState, require_live

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CheckpointLease": ".checkpoints",
        "create_checkpoint": ".checkpoints",
        "delete_checkpoint": ".checkpoints",
        "drop_expired": ".checkpoints",
        "ensure_checkpoint": ".checkpoints",
        "list_checkpoints": ".checkpoints",
        "refresh_checkpoint": ".checkpoints",
        "StoreResolver": ".clones",
        "create_clone": ".clones",
        "CopyReport": ".copies",
        "copy_database": ".copies",
        "SegmentRef": ".fencing",
        "WriterClaim": ".fencing",
        "accepted_segments": ".fencing",
        "claim_writer": ".fencing",
        "list_segments": ".fencing",
        "segment_epoch": ".fencing",
        "with_epochs": ".fencing",
        "write_segment": ".fencing",
        "GcOptions": ".gc",
        "GcPlan": ".gc",
        "GcReport": ".gc",
        "detach_clone": ".gc",
        "plan_gc": ".gc",
        "run_gc": ".gc",
        "Checkpoint": ".model",
        "CloneParent": ".model",
        "JournalFileDescriptor": ".model",
        "JournalState": ".model",
        "LedgerState": ".model",
        "Manifest": ".model",
        "SstDescriptor": ".model",
        "VersionedManifest": ".model",
        "decode": ".model",
        "encode": ".model",
        "ManifestStore": ".store",
        "RootState": ".store",
        "require_live": ".store",
    },
)

__all__ = [
    "Checkpoint",
    "CheckpointLease",
    "CloneParent",
    "CopyReport",
    "GcOptions",
    "GcPlan",
    "GcReport",
    "JournalFileDescriptor",
    "JournalState",
    "LedgerState",
    "Manifest",
    "ManifestStore",
    "RootState",
    "SegmentRef",
    "SstDescriptor",
    "StoreResolver",
    "VersionedManifest",
    "WriterClaim",
    "accepted_segments",
    "claim_writer",
    "copy_database",
    "create_checkpoint",
    "create_clone",
    "decode",
    "delete_checkpoint",
    "detach_clone",
    "drop_expired",
    "encode",
    "ensure_checkpoint",
    "list_checkpoints",
    "list_segments",
    "plan_gc",
    "refresh_checkpoint",
    "require_live",
    "run_gc",
    "segment_epoch",
    "with_epochs",
    "write_segment",
]
