"""Journal files: immutable files of journal entries in SQN order, found by SQN with ranged reads.

A journal file holds the entries of one group commit (a segment) or of a compaction run, in
strictly increasing SQN order. Every entry carries what is needed to rebuild its ledger entry and
its index entries, so the ledger can always be rebuilt from the journal alone.

Layout (all integers big-endian; offsets are from the start of the object)::

    header, 60 bytes at offset 0
      0   6  magic b"INKJNL"
      6   2  format version (u16): 3 (1 and 2 are still read)
      8   8  writer epoch (u64) of the writer that built the file
      16  8  entry count (u64)
      24  8  lowest SQN (u64; 0 when empty)
      32  8  highest SQN (u64; 0 when empty)
      40  8  index region offset (u64) = end of the records region
      48  8  index region length (u64; 0 when empty)
      56  4  CRC-32 of header bytes [0, 56)

    records, from offset 60 to the index region, in SQN order; one record is
      0       4  key length K (u32)
      4       4  value length V (u32)
      8       K  key: SQN (u64), kind (u8), encoded ledger key
      8+K     V  value: flags (u8), last-modified ms (u64), expiry ms (u64), index-spec length
                 S (u32), S bytes of msgpack [[op, field, term], ...], then the object body
      8+K+V   4  checksum of record bytes [0, 8+K+V): CRC-32C from version 3, CRC-32 in 1 and 2

    index region, versions 2 and 3 (absent when the file has no entries): the SQN block index
      0     16*B  B blocks: first SQN (u64), offset of the block's first record (u64)
      16*B  4     CRC-32 of region bytes [0, 16*B)

    index region, version 1: the CDB hash region
      0          2048  256 table descriptors: first slot (u32), slot count (u32)
      2048       16*N  N = 2 * entry count slots: hash (u32), record offset (u64), record length
                       (u32); a record length of 0 marks an empty slot
      2048+16*N  4     CRC-32 of region bytes [0, 2048+16*N)

Record kinds: 1 OBJECT (a put, with its body), 2 TOMBSTONE (a delete), 3 KEY_CHANGES (a put's
index changes, its value dropped by compaction), 4 VALUE_IN_LEDGER (version 3: a put whose body
its ledger entry holds; no body). Only OBJECT records carry a body.

Value flags: bit 0 the entry has an object body, bit 1 the body is snappy-compressed, bit 2 the
expiry field is set. A body of 256 bytes or more is stored compressed when that saves at least an
eighth of it; from 256 KiB, only when its start, middle and end (16 KiB each) compressed together
save an eighth, so that an incompressible large value costs no compression pass.

Version 3 is version 2 with two changes, which arrived together: record checksums are CRC-32C
(Castagnoli), which the CPU computes at about six times zlib's CRC-32 (:mod:`inkpen.formats.crc`:
on a large value's get the checksum pass was a third of the time), and a record may be of kind
4, VALUE_IN_LEDGER. The header's and the index region's checksums stay CRC-32. An inkpen that
knows neither refuses a version 3 file by its version ("upgrade inkpen").

Version 2 and 3 lookup: a block is a run of consecutive records of about :data:`INDEX_BLOCK`
bytes (a record that large or larger is a block alone); block ``k`` spans
``[offset_k, offset_k+1)`` (the last one ends where the index region starts). A lookup of
``(sqn, kind, ledger_key)`` takes the last block whose first SQN is at most ``sqn``, reads that
block in one ranged read and walks its records to the one with that key: one read, of about
4 KiB (a large record: exactly the record).
The index is 16 bytes per block (about 0.4% of the records); a reader reads it whole at open and
checks its CRC, then holds it or keeps it in a byte-weighted cache (re-read when evicted).
Below, "version 2" names the block-index layout, which versions 2 and 3 share.

Version 1 lookup is CDB's: the hash ``h`` is the CRC-32 of the record key; table ``h & 255`` is
probed linearly from slot ``(h >> 8) % slot_count`` until the key is found or an empty slot is
met. Each table has twice as many slots as entries, so probes stay short. A slot names a record's
offset and length, so one ranged read fetches it whole. Writers write version 3 only.

Every byte is covered by a checksum: the header's, each record's, and the index region's (checked
when a reader opens the file). A large record read in parts (:data:`PARTS_FROM`) is checksummed
over its parts as they were read, never joined. A version 1 reader either holds the hash region
or pages it: at open it computes a CRC-32 of every 1 KiB page of slots and later checks each page
it reads against it. A damaged file raises :class:`CorruptionError` naming the object and the
offset of the damaged part; damaged bytes are never returned as data.

A file with no entries is only a header (:data:`EMPTY_JOURNAL_SIZE` bytes): a writer writes one
into the next segment slot to fence older writers, and a listing can recognise it by its size.

The package's modules, one concern each: ``_format`` (the layout, the entry and header types,
the header check), ``_writer`` (building files), ``_records`` (checking and decoding records),
``_block_index`` (the version 2 index, held or cached), ``_hash_index`` and ``_hash_pages`` (the
version 1 hash region, held or paged through a cache) and ``_reader`` (:class:`JournalReader`
and the whole-file decoders). Callers import from this package only.
"""

from __future__ import annotations

from ._format import (
    EMPTY_JOURNAL_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    INDEX_BLOCK,
    MAGIC,
    JournalEntry,
    JournalHeader,
    Kind,
    read_header,
)
from ._hash_index import PAGE_BYTES
from ._hash_pages import PAGE_GAP, PAGE_RUN, PAGE_WEIGHT
from ._reader import DEFAULT_CHUNK_SIZE, PARTS_FROM, JournalReader, decode_journal, iter_journal
from ._writer import (
    PREPARE_FROM,
    PreparedRecord,
    build_journal,
    build_journal_parts,
    prepare_record,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EMPTY_JOURNAL_SIZE",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "INDEX_BLOCK",
    "MAGIC",
    "PAGE_BYTES",
    "PAGE_GAP",
    "PAGE_RUN",
    "PAGE_WEIGHT",
    "PARTS_FROM",
    "PREPARE_FROM",
    "JournalEntry",
    "JournalHeader",
    "JournalReader",
    "Kind",
    "PreparedRecord",
    "build_journal",
    "build_journal_parts",
    "decode_journal",
    "iter_journal",
    "prepare_record",
    "read_header",
]
