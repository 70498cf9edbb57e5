"""manifest/: the CAS-advanced manifest, writer epochs, checkpoints, clones, destroy and GC."""

from __future__ import annotations

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
from .destroy import destroy
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
    "destroy",
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
