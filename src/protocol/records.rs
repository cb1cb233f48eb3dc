//! Record batches (magic 2): batch framing, decompression, records, headers, control records.
//!
//! A fetched partition's `Records` field is a concatenation of record batches (Kafka's
//! record batch format v2, `DefaultRecordBatch` in the Java client). Decoding happens in
//! three lazy, allocation-free steps:
//!
//! ```text
//!  record set ──BatchIter──▶ RawBatch { header, records } ──decompress (if compressed)──▶ bytes
//!                                                 │                                          │
//!                                                 └──────────────RecordIter◀─────────────────┘
//!                                                                   │
//!                                              RecordRef { offset, timestamp, key/value/header ranges }
//!                                                                   │
//!                                                              HeaderIter (lazy)
//! ```
//!
//! Invariants this module keeps:
//!
//! 1. Nothing read from the wire is trusted: every length, count and varint is checked against
//!    the bytes that remain before it is used, and no input can make these functions panic.
//!    No allocation is sized by a length or count the bytes present cannot back: nothing
//!    reserves memory from `recordCount` (a record takes at least [`MIN_RECORD_SIZE`] bytes,
//!    which bounds any count by the bytes present).
//! 2. A trailing batch cut short by the broker's byte limits (fewer than 12 bytes left, or a
//!    `batchLength` reaching past the end) is not an error: [`BatchIter`] just ends.
//!    Everything else that is malformed is an error, after which [`BatchIter`] and
//!    [`RecordIter`] yield `None` (they are fused).
//! 3. A [`BatchHeader`] that came out of [`BatchIter`] has magic 2, a known compression code,
//!    `batchLength >= 49`, `recordCount >= 0`, `lastOffsetDelta >= 0`, and (when asked for) a
//!    valid CRC-32C.
//! 4. [`RecordIter`] validates each record completely (lengths, null markers, offset order, no
//!    bytes left over) before yielding it, and yields exactly `recordCount` records followed
//!    by nothing, so [`HeaderIter`] over a yielded record can never meet bad input. A
//!    `recordCount` above `section length / MIN_RECORD_SIZE` is rejected before any record.
//!    Header keys are bytes: any bytes are accepted (the broker does not check them, other
//!    clients write non-UTF-8 keys, and the Java consumer delivers them), so a record is
//!    never rejected for its header keys' encoding.
//! 5. Decompression never trusts a size field: output is produced in bounded steps and stops
//!    with [`RecordError::DecompressedTooLarge`] as soon as it would exceed the caller's
//!    limit. [`decompress`] never grows `out`'s capacity past `start_len + limit + 1` (the
//!    extra byte tells "exactly at the limit" from "over it"), whatever the codec, nor holds
//!    more than that while a buffer moves (old and new allocation counted); on error
//!    `out` is left with the length *and capacity* it had on entry. A raw snappy block's
//!    declared length is checked before allocating, both against the limit and against the
//!    most the block can expand to (`64 * (block length - 1) / 3`, see `codec::raw_snappy`).
//! 6. Offsets and timestamps are computed as the broker does (`baseOffset + offsetDelta`;
//!    `baseTimestamp + timestampDelta`, or `maxTimestamp` for LogAppendTime). Records before
//!    the fetch offset are yielded too: a compressed batch comes back whole, and trimming is
//!    the caller's job. Within a batch, record offset deltas are strictly increasing and lie
//!    in `0..=lastOffsetDelta` (compaction removes records but keeps order); anything else is
//!    an error.
//! 7. Errors say where: every error [`BatchIter`] yields (all come after it has read a base
//!    offset) and every error [`RecordIter`] yields carries an offset, see
//!    [`RecordError::offset`]: the batch's base offset for an error in the batch as a whole,
//!    the record's offset for an error in one record (the base offset plus the record's
//!    index when its offset delta could not be read). [`decompress`] and [`control_type`]
//!    do not know the batch; their caller locates their errors with
//!    [`RecordError::in_batch`].

use std::fmt;

use byteorder::{BigEndian, ByteOrder};

use crate::protocol::wire::{
    read_uvarint, varint_error, zigzag32, zigzag64, DecodeError, DecodeErrorKind, Reader,
};

/// Size of the fixed record batch header that precedes the records section.
pub const BATCH_HEADER_SIZE: usize = 61;

/// The fewest bytes a record takes on the wire: one each for its length, attributes,
/// timestamp delta, offset delta, key length, value length and header count. A records
/// section of `n` bytes holds at most `n / MIN_RECORD_SIZE` records; size anything indexed
/// by record with that bound, never with `recordCount` alone.
pub const MIN_RECORD_SIZE: usize = 7;

/// `baseOffset` + `batchLength`: the bytes before what `batchLength` counts.
const LOG_OVERHEAD: usize = 12;
/// The smallest `batchLength` of a magic-2 batch (its header minus [`LOG_OVERHEAD`]).
const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32;
/// The smallest `batchLength`/message size of any magic (legacy v0 message overhead).
const MIN_ANY_MAGIC_LENGTH: i32 = 14;
/// Byte offset of the magic byte within a batch.
const MAGIC_OFFSET: usize = 16;
/// The CRC covers the batch from the attributes to its end.
const CRC_START: usize = 21;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The compression codec of a record batch (attribute bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// Code 0: the records section is stored as is.
    None,
    /// Code 1: an RFC 1952 gzip stream.
    Gzip,
    /// Code 2: snappy (xerial-framed as the Java producer writes it, or a raw block).
    Snappy,
    /// Code 3: the LZ4 frame format.
    Lz4,
    /// Code 4: Zstandard frames.
    Zstd,
}

/// How the timestamps of a batch's records were assigned (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimestampType {
    /// The record has no timestamp. Never produced by a magic-2 batch; kept for records that
    /// come from elsewhere (it mirrors the Java client's `NO_TIMESTAMP_TYPE`).
    NotAvailable,
    /// The producer set the timestamp when it created the record.
    CreateTime,
    /// The broker set the timestamp when it appended the batch; every record of the batch
    /// carries the batch's `maxTimestamp`.
    LogAppendTime,
}

/// The fixed 61-byte header of a magic-2 record batch (Kafka's `DefaultRecordBatch` layout), field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    /// Offset of the first record (before compaction).
    pub base_offset: i64,
    /// Bytes of the batch after this field; the whole batch is `12 + batch_length` bytes.
    pub batch_length: i32,
    /// Leader epoch of the partition when the batch was written.
    pub partition_leader_epoch: i32,
    /// Format version; always 2 for a header produced by [`BatchIter`].
    pub magic: i8,
    /// CRC-32C of the batch from the attributes to its end.
    pub crc: u32,
    /// Compression, timestamp type, transactional and control flags.
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset` (valid even if compacted away).
    pub last_offset_delta: i32,
    /// Timestamp of the first record (or the delete horizon, KIP-534; record timestamp deltas
    /// are relative to it either way).
    pub base_timestamp: i64,
    /// Largest timestamp of the batch; the timestamp of every record for LogAppendTime.
    pub max_timestamp: i64,
    /// Producer id, −1 if the producer is not idempotent.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Sequence number of the first record, for idempotence.
    pub base_sequence: i32,
    /// Number of records in the batch.
    pub record_count: i32,
}

/// One complete record batch borrowed from a record set, not yet decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBatch<'a> {
    /// The decoded header.
    pub header: BatchHeader,
    /// The records section after the 61-byte header: the records themselves, or one
    /// compressed blob holding them (see [`BatchHeader::compression`]).
    pub records: &'a [u8],
    /// Byte offset of the batch within the record set given to [`BatchIter::new`].
    pub start: usize,
}

/// Iterates over the record batches of a record set (a fetch response's `Records`).
///
/// Yields each complete batch; a partial trailing batch ends the iteration silently. After an
/// error it yields `None`.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    check_crc: bool,
    done: bool,
}

/// One record, validated, with its key, value and headers as byte ranges of the records buffer.
///
/// Ranges are `(start, len)` relative to the slice given to [`RecordIter::new`]; use
/// [`RecordRef::key`], [`RecordRef::value`] and [`RecordRef::headers`] with that same slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordRef {
    /// Absolute offset: `baseOffset + offsetDelta`.
    pub offset: i64,
    /// `baseTimestamp + timestampDelta` for CreateTime, `maxTimestamp` for LogAppendTime.
    pub timestamp: i64,
    /// The key's `(start, len)`, `None` for a null key.
    pub key: Option<(u32, u32)>,
    /// The value's `(start, len)`, `None` for a null value (a tombstone).
    pub value: Option<(u32, u32)>,
    /// `(start, len)` of the header section (the headers after their count).
    pub headers: (u32, u32),
    /// Number of headers in the header section.
    pub header_count: u32,
}

/// Iterates over the records of one batch's (uncompressed) records section.
///
/// Yields exactly `record_count` records, each fully validated (their offset deltas strictly
/// increasing within `0..=last_offset_delta`); then an error if bytes are left over, or if
/// the section holds fewer records than the header says. Every error carries an offset
/// ([`RecordError::offset`]). Never allocates.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    remaining: u32,
    /// `recordCount` (0 if negative): `count - remaining` is the index of the next record.
    count: u32,
    base_offset: i64,
    /// `lastOffsetDelta`: no record's offset delta may exceed it.
    last_offset_delta: i32,
    /// Offset delta of the last record yielded; −1 before the first (deltas start at 0).
    prev_delta: i32,
    base_timestamp: i64,
    /// `Some(maxTimestamp)` for LogAppendTime batches.
    log_append_time: Option<i64>,
    /// An error to report on the first call (a header that cannot describe `buf`).
    pending: Option<&'static str>,
    done: bool,
}

/// Iterates lazily over a record's header section: `(key, value)` pairs in wire order
/// (duplicate keys are legal and kept). Keys are bytes, not necessarily UTF-8 (invariant 4).
/// Stops at the first malformed header, which cannot happen for a section that
/// [`RecordIter`] yielded.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    buf: &'a [u8],
    pos: usize,
    remaining: u32,
}

/// The marker a control record carries (Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ControlType {
    /// Type 0: the producer's transaction was aborted.
    Abort,
    /// Type 1: the producer's transaction was committed.
    Commit,
    /// Any other type (2+ are KRaft-internal and do not appear on user topics).
    Other(i16),
}

/// Why a record batch or a record could not be decoded. It names no topic or partition; the
/// caller adds them.
///
/// Errors from [`BatchIter`] and [`RecordIter`] say where they are: they come wrapped in
/// [`RecordError::InBatch`] or [`RecordError::InRecord`] (or are a
/// [`RecordError::CrcMismatch`], which holds its base offset), and [`RecordError::offset`]
/// reads the offset from any of them. [`RecordError::without_offset`] gives the error
/// inside, to match on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// A field is truncated, a length or count is out of range, a varint is too long, or a
    /// record has bytes left over.
    Decode(DecodeError),
    /// The CRC-32C stored in the batch does not match its contents.
    CrcMismatch {
        /// `baseOffset` of the corrupt batch.
        base_offset: i64,
        /// The CRC stored in the batch.
        expected: u32,
        /// The CRC computed over the bytes received.
        computed: u32,
    },
    /// The batch's magic byte is not 2 (0 and 1 are legacy message sets, not supported).
    UnsupportedMagic(i8),
    /// Compression code (attribute bits 0–2) 5, 6 or 7.
    UnknownCompression(i16),
    /// The batch uses a codec whose cargo feature is disabled (the feature's name).
    CodecDisabled(&'static str),
    /// The codec rejected the compressed data.
    Decompress {
        /// The codec's name (`"gzip"`, `"snappy"`, `"lz4"`, `"zstd"`).
        codec: &'static str,
        /// What the codec said.
        reason: String,
    },
    /// Decompressing would produce more than the caller's limit.
    DecompressedTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A structural rule is broken (the text says which).
    Invalid(&'static str),
    /// The records' offsets contradict the batch: a negative `lastOffsetDelta`, an offset
    /// that repeats or goes back, or one past the batch's last offset (the text says which).
    OffsetOrder(&'static str),
    /// `error` concerns the batch at `base_offset` as a whole: its framing or header, its
    /// record count, the bytes after its last record, or (located by the caller with
    /// [`RecordError::in_batch`]) its decompression. `error` is never itself located.
    InBatch {
        /// `baseOffset` of the batch.
        base_offset: i64,
        /// What is wrong.
        error: Box<RecordError>,
    },
    /// `error` concerns one record: `offset` is its offset (`baseOffset + offsetDelta`,
    /// saturating) when its offset delta could be read, otherwise the batch's base offset
    /// plus the record's index in the batch. `error` is never itself located.
    InRecord {
        /// Offset of the offending record.
        offset: i64,
        /// What is wrong.
        error: Box<RecordError>,
    },
}

impl RecordError {
    /// Where the error is: the batch's base offset for an error in a batch as a whole
    /// (including [`RecordError::CrcMismatch`]), the record's offset for an error in one
    /// record; `None` for an error not (yet) located, such as what [`decompress`] returns
    /// before its caller calls [`RecordError::in_batch`].
    pub fn offset(&self) -> Option<i64> {
        match self {
            RecordError::InBatch { base_offset, .. } => Some(*base_offset),
            RecordError::InRecord { offset, .. } => Some(*offset),
            RecordError::CrcMismatch { base_offset, .. } => Some(*base_offset),
            _ => None,
        }
    }

    /// The error without its location: the wrapped error of [`RecordError::InBatch`] and
    /// [`RecordError::InRecord`], `self` for any other. Match on this to classify an error.
    pub fn without_offset(&self) -> &RecordError {
        match self {
            RecordError::InBatch { error, .. } | RecordError::InRecord { error, .. } => error,
            other => other,
        }
    }

    /// Locates an error in the batch at `base_offset` (for errors of [`decompress`] and
    /// [`control_type`], which do not know their batch). An error that already has an
    /// offset is returned unchanged.
    pub fn in_batch(self, base_offset: i64) -> RecordError {
        if self.offset().is_some() {
            self
        } else {
            RecordError::InBatch {
                base_offset,
                error: Box::new(self),
            }
        }
    }
}

impl Compression {
    /// The codec for a compression code (attribute bits 0–2).
    ///
    /// # Errors
    /// [`RecordError::UnknownCompression`] for codes other than 0–4.
    pub fn from_code(code: i16) -> Result<Compression, RecordError> {
        match code {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            _ => Err(RecordError::UnknownCompression(code)),
        }
    }

    /// The codec's wire code.
    pub fn code(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec's name, which is also the name of its cargo feature (`"none"` for none).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl BatchHeader {
    /// Parses the 61-byte header at the start of `batch` (no validation beyond the length).
    fn parse(batch: &[u8]) -> Result<BatchHeader, DecodeError> {
        let mut r = Reader::new(batch);
        Ok(BatchHeader {
            base_offset: r.i64()?,
            batch_length: r.i32()?,
            partition_leader_epoch: r.i32()?,
            magic: r.i8()?,
            crc: r.u32()?,
            attributes: r.i16()?,
            last_offset_delta: r.i32()?,
            base_timestamp: r.i64()?,
            max_timestamp: r.i64()?,
            producer_id: r.i64()?,
            producer_epoch: r.i16()?,
            base_sequence: r.i32()?,
            record_count: r.i32()?,
        })
    }

    /// The batch's compression codec.
    ///
    /// [`BatchIter`] rejects unknown codes (5–7) with [`RecordError::UnknownCompression`], so
    /// for a header it produced this is exact. On a hand-built header with an unknown code it
    /// returns [`Compression::None`]; use [`Compression::from_code`] to check such a header.
    pub fn compression(&self) -> Compression {
        Compression::from_code(self.attributes & ATTR_COMPRESSION_MASK).unwrap_or(Compression::None)
    }

    /// How the record timestamps were assigned.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch holds a control record (a transaction marker), never to be delivered.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Offset of the batch's last record: `base_offset + last_offset_delta` (saturating).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }

    /// The offset to fetch after this batch: `last_offset() + 1` (saturating). The position
    /// moves here even when the batch is skipped (control, aborted) or its records were
    /// compacted away.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
}

impl<'a> BatchIter<'a> {
    /// Iterates over the batches of `record_set`, checking each batch's CRC-32C when
    /// `check_crc` is true (the consumer's `check.crcs`, on by default in Java).
    pub fn new(record_set: &'a [u8], check_crc: bool) -> Self {
        BatchIter {
            buf: record_set,
            pos: 0,
            check_crc,
            done: false,
        }
    }

    /// Byte offset of the next batch not yet yielded. Once the iteration has ended without an
    /// error, `record_set.len() - position()` is the size of the ignored partial trailing
    /// batch (non-zero with no batch yielded means the partition byte limit is too small).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// After an error: the offset after the batch that failed (`baseOffset +
    /// lastOffsetDelta + 1`, as its header says), where to seek to skip it. `None` when the
    /// batch has no readable magic-2 header (a legacy message set, a garbled length, a
    /// negative `lastOffsetDelta`). For a CRC mismatch the header's fields after the CRC
    /// are unverified: the caller says so.
    pub fn failed_batch_next_offset(&self) -> Option<i64> {
        let rest = &self.buf[self.pos..];
        let mut r = Reader::new(rest);
        r.i64().ok()?;
        let batch_length = r.i32().ok()?;
        if batch_length < MIN_BATCH_LENGTH
            || LOG_OVERHEAD + batch_length as usize > rest.len()
            || rest[MAGIC_OFFSET] as i8 != 2
        {
            return None;
        }
        let header = BatchHeader::parse(rest).ok()?;
        (header.last_offset_delta >= 0).then(|| header.next_offset())
    }

    fn next_batch(&mut self) -> Result<Option<RawBatch<'a>>, RecordError> {
        let rest = &self.buf[self.pos..];
        if rest.len() < LOG_OVERHEAD {
            return Ok(None);
        }
        let base_offset = BigEndian::read_i64(&rest[..8]);
        // Every error from here on names the batch (invariant 7); a CRC mismatch holds its
        // base offset itself.
        let batch = self
            .check_batch(rest)
            .map_err(|e| e.in_batch(base_offset))?;
        let Some((header, total)) = batch else {
            return Ok(None);
        };
        let start = self.pos;
        self.pos += total;
        Ok(Some(RawBatch {
            header,
            records: &rest[BATCH_HEADER_SIZE..total],
            start,
        }))
    }

    /// Checks the batch at the start of `rest` (at least [`LOG_OVERHEAD`] bytes): its header
    /// and its total size, or `None` for a partial trailing batch.
    fn check_batch(&self, rest: &[u8]) -> Result<Option<(BatchHeader, usize)>, RecordError> {
        let mut r = Reader::new(rest);
        let base_offset = r.i64()?;
        let batch_length = r.i32()?;
        if batch_length < MIN_ANY_MAGIC_LENGTH {
            return Err(bad_length(batch_length, "RecordBatch.batchLength"));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > rest.len() {
            // A partial trailing batch, cut by the fetch byte limits: not an error.
            return Ok(None);
        }
        let batch = &rest[..total];
        let magic = batch[MAGIC_OFFSET] as i8;
        if magic != 2 {
            return Err(RecordError::UnsupportedMagic(magic));
        }
        if batch_length < MIN_BATCH_LENGTH {
            return Err(bad_length(batch_length, "RecordBatch.batchLength"));
        }
        let header = BatchHeader::parse(batch).map_err(|e| e.context("RecordBatch"))?;
        if self.check_crc {
            let computed = crc32c::crc32c(&batch[CRC_START..]);
            if computed != header.crc {
                return Err(RecordError::CrcMismatch {
                    base_offset,
                    expected: header.crc,
                    computed,
                });
            }
        }
        Compression::from_code(header.attributes & ATTR_COMPRESSION_MASK)?;
        if header.record_count < 0 {
            return Err(bad_length(header.record_count, "RecordBatch.recordCount"));
        }
        if header.last_offset_delta < 0 {
            return Err(RecordError::OffsetOrder("negative lastOffsetDelta"));
        }
        Ok(Some((header, total)))
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<RawBatch<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_batch() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for BatchIter<'_> {}

/// Appends the decompressed records section `input` (compressed with `c`) to `out`.
///
/// `out` is typically a buffer reused across batches; clearing it is the caller's job. At
/// most `limit` bytes are appended: the output is produced in bounded steps and no size
/// field in the input is trusted. Snappy accepts the xerial framing the Java producer writes,
/// a plain raw block, and the standard snappy framing format; gzip accepts concatenated
/// members; zstd accepts concatenated and skippable frames.
///
/// Memory: whatever the codec and the input, this call never grows `out`'s capacity past
/// `start_len + limit + 1` (`start_len` being `out.len()` on entry), and while the buffer
/// moves to a larger allocation the old and the new one together stay within that too.
/// Below it, capacity grows geometrically (by half, at least 64 KiB at a time) so that
/// appending many batches to one buffer stays linear; an output that growing by moves
/// cannot reach, into an empty `out`, is decoded once more into one allocation of the whole
/// limit, which costs address space but no memory the output does not fill. On error `out`
/// is left as it was, its capacity included: a failed call does not keep a buffer it grew
/// alive. Errors carry no offset; locate them
/// with [`RecordError::in_batch`].
///
/// # Errors
/// [`RecordError::DecompressedTooLarge`] past `limit`; [`RecordError::CodecDisabled`] when the
/// codec's cargo feature is off; [`RecordError::Decompress`] when the codec rejects the input.
pub fn decompress(
    c: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), RecordError> {
    let mut filled = out.len();
    let result = decompress_into(c, input, out, &mut filled, limit);
    out.truncate(filled);
    result
}

/// Like [`decompress`], into a buffer whose content is `out[..*filled]` and whose bytes past
/// that are scratch (already initialized: they are overwritten, not zeroed again). Appending
/// many batches to one buffer this way zero-fills each byte at most once. On success
/// `*filled` is the new end of the content; on error it is unchanged, and `out` has no
/// more capacity than before.
pub fn decompress_into(
    c: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
    filled: &mut usize,
    limit: usize,
) -> Result<(), RecordError> {
    let start = *filled;
    let capacity = out.capacity();
    let mut end = start;
    let result = decode(c, input, out, &mut end, limit);
    let result = match result {
        Err(RecordError::DecompressedTooLarge { .. }) if start == 0 && capacity <= limit => {
            // Growing by moving the buffer holds two allocations at once, which the limit
            // only allows up to about half of it (see `reserve_within`). With no content to
            // keep, decode once more into a single allocation of the whole limit, of which
            // only what the codec writes is ever touched, and give back what it left unused.
            *out = Vec::new();
            end = 0;
            if out.try_reserve_exact(limit.saturating_add(1)).is_err() {
                Err(RecordError::DecompressedTooLarge { limit })
            } else {
                let r = decode(c, input, out, &mut end, limit);
                if r.is_ok() {
                    out.shrink_to(out.len());
                }
                r
            }
        }
        r => r,
    };
    match result {
        Ok(()) => *filled = end,
        Err(_) => {
            if out.capacity() > capacity {
                out.truncate(start);
                out.shrink_to(capacity);
            }
        }
    }
    result
}

/// Appends `input` decoded with `c` to `out[..*end]`, as [`decompress_into`] describes.
fn decode(
    c: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
    end: &mut usize,
    limit: usize,
) -> Result<(), RecordError> {
    match c {
        Compression::None => {
            out.truncate(*end);
            if input.len() > limit || !reserve_within(out, input.len(), end.saturating_add(limit)) {
                return Err(RecordError::DecompressedTooLarge { limit });
            }
            out.extend_from_slice(input);
            *end = out.len();
            Ok(())
        }
        Compression::Gzip => codec::gzip(input, out, end, limit),
        Compression::Snappy => codec::snappy(input, out, end, limit),
        Compression::Lz4 => codec::lz4(input, out, end, limit),
        Compression::Zstd => codec::zstd(input, out, end, limit),
    }
}

/// The smallest step by which decompression grows its output buffer, and the most it
/// zero-fills ahead of a codec's reads.
const GROW_STEP: usize = 64 * 1024;

/// The smallest zero-filled step ahead of a codec's reads.
const MIN_FILL_STEP: usize = 4 * 1024;

/// The largest zero-filled step: more than one lz4 block (64 KiB), so that a codec can
/// write whole blocks straight into the output.
const FILL_STEP_MAX: usize = 256 * 1024;

/// Makes room in `out` for `additional` more bytes without letting its memory pass
/// `ceiling` (which must be at least `out.len() + additional`), and returns whether it could
/// (when not, `out` still grows as far as the ceiling lets it).
/// Below the ceiling capacity grows by half (at least [`GROW_STEP`]), so appending to one
/// buffer copies each byte a bounded number of times; `Vec`'s own doubling would ignore the
/// ceiling. A buffer that moves is allocated twice while its bytes are copied, so the old
/// allocation (beyond its first [`GROW_STEP`]) and the new one together stay within the
/// ceiling: growing by moves cannot reach much past half of it ([`decompress_into`] then
/// decodes once more into one allocation).
#[must_use]
pub(crate) fn reserve_within(out: &mut Vec<u8>, additional: usize, ceiling: usize) -> bool {
    let needed = out.len().saturating_add(additional);
    let cap = out.capacity();
    if needed <= cap {
        return true;
    }
    // The first GROW_STEP of the old allocation is left out: moving a small buffer costs
    // nothing worth counting, and callers allow that much slack anyway.
    let most = ceiling.saturating_sub(cap.saturating_sub(GROW_STEP));
    if needed > most {
        if most > cap {
            out.reserve_exact(most - out.len());
        }
        return false;
    }
    let target = cap
        .saturating_add((cap / 2).max(GROW_STEP))
        .min(most)
        .max(needed);
    out.reserve_exact(target - out.len());
    true
}

/// The codecs, each behind its cargo feature.
pub(crate) mod codec {
    #[cfg(feature = "snappy")]
    use byteorder::{BigEndian, ByteOrder};

    #[cfg(any(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd",
        feature = "zstd-native"
    ))]
    use super::reserve_within;
    use super::RecordError;

    /// Reads `reader` to its end into `out`, failing once more than `limit` bytes came out.
    ///
    /// `out` grows through [`reserve_within`] with a ceiling of `out.len() + limit + 1` (one
    /// byte past the limit tells "exactly at the limit" from "over it"), and at most
    /// [`GROW_STEP`] bytes past what was read are zero-filled for the reader to write into.
    /// On error `out` may hold a partial output; [`super::decompress`] restores it.
    #[cfg(any(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd",
        feature = "zstd-native"
    ))]
    pub(super) fn read_limited<R: std::io::Read>(
        mut reader: R,
        input_len: usize,
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
        codec: &'static str,
    ) -> Result<(), RecordError> {
        let ceiling = end.saturating_add(limit).saturating_add(1);
        // `out[..filled]` is output; `out[filled..]` is initialized room for the next read
        // (scratch left by earlier calls, or zeroed here once).
        let mut filled = *end;
        // Zero-fill ahead in steps that start near the expected output (twice the input)
        // and double up to FILL_STEP_MAX: a small batch costs no large zeroing.
        let mut step = input_len
            .saturating_mul(2)
            .clamp(super::MIN_FILL_STEP, super::FILL_STEP_MAX);
        loop {
            if filled >= out.len() {
                if filled >= ceiling {
                    return Err(RecordError::DecompressedTooLarge { limit });
                }
                let mut room = (ceiling - filled).min(step);
                step = step.saturating_mul(2).min(super::FILL_STEP_MAX);
                out.truncate(filled);
                if !reserve_within(out, room, ceiling) {
                    // The buffer may not move: read into what its allocation holds.
                    room = room.min(out.capacity() - filled);
                    if room == 0 {
                        return Err(RecordError::DecompressedTooLarge { limit });
                    }
                }
                out.resize(filled + room, 0);
            }
            let stop = out.len().min(ceiling);
            match reader.read(&mut out[filled..stop]) {
                Ok(0) => break,
                Ok(n) => filled += n.min(stop - filled),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(failed(codec, e)),
            }
            if filled == ceiling {
                return Err(RecordError::DecompressedTooLarge { limit });
            }
        }
        *end = filled;
        Ok(())
    }

    #[cfg(any(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd",
        feature = "zstd-native"
    ))]
    fn failed(codec: &'static str, e: impl std::fmt::Display) -> RecordError {
        RecordError::Decompress {
            codec,
            reason: e.to_string(),
        }
    }

    #[cfg(feature = "gzip")]
    pub(super) fn gzip(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        let reader = flate2::read::MultiGzDecoder::new(input);
        read_limited(reader, input.len(), out, end, limit, "gzip")
    }

    #[cfg(not(feature = "gzip"))]
    pub(super) fn gzip(
        _: &[u8],
        _: &mut Vec<u8>,
        _: &mut usize,
        _: usize,
    ) -> Result<(), RecordError> {
        Err(RecordError::CodecDisabled("gzip"))
    }

    /// Header of the xerial snappy framing: magic, then int32 version and compatible version.
    #[cfg(feature = "snappy")]
    pub(super) const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
    #[cfg(feature = "snappy")]
    const XERIAL_HEADER_LEN: usize = 16;
    /// The stream identifier chunk that opens the standard snappy framing format.
    #[cfg(feature = "snappy")]
    const SNAPPY_FRAME_MAGIC: [u8; 10] = [0xff, 0x06, 0, 0, b's', b'N', b'a', b'P', b'p', b'Y'];

    /// Neither magic can open a valid raw block (both decode to a copy before any literal),
    /// so telling the three apart by their first bytes is unambiguous.
    #[cfg(feature = "snappy")]
    pub(super) fn snappy(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        if input.starts_with(&SNAPPY_FRAME_MAGIC) {
            let reader = snap::read::FrameDecoder::new(input);
            return read_limited(reader, input.len(), out, end, limit, "snappy");
        }
        // The block formats append to the content.
        out.truncate(*end);
        let r = if input.starts_with(&XERIAL_MAGIC) {
            xerial(input, out, limit)
        } else {
            raw_snappy(input, out, limit, limit).map(|_| ())
        };
        if r.is_ok() {
            *end = out.len();
        }
        r
    }

    #[cfg(not(feature = "snappy"))]
    pub(super) fn snappy(
        _: &[u8],
        _: &mut Vec<u8>,
        _: &mut usize,
        _: usize,
    ) -> Result<(), RecordError> {
        Err(RecordError::CodecDisabled("snappy"))
    }

    /// Xerial framing: header, then `[int32 length][raw block]` chunks. A header may appear
    /// again between chunks (concatenated streams), as xerial's own reader allows.
    #[cfg(feature = "snappy")]
    fn xerial(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), RecordError> {
        let mut rest = input;
        let mut budget = limit;
        while !rest.is_empty() {
            if rest.starts_with(&XERIAL_MAGIC) {
                if rest.len() < XERIAL_HEADER_LEN {
                    return Err(failed("snappy", "truncated xerial header"));
                }
                rest = &rest[XERIAL_HEADER_LEN..];
                continue;
            }
            if rest.len() < 4 {
                return Err(failed("snappy", "truncated xerial chunk length"));
            }
            let (len, tail) = rest.split_at(4);
            let len = BigEndian::read_i32(len);
            if len < 0 || len as usize > tail.len() {
                return Err(failed(
                    "snappy",
                    format_args!("xerial chunk length {len} with {} bytes left", tail.len()),
                ));
            }
            let (block, next) = tail.split_at(len as usize);
            budget -= raw_snappy(block, out, budget, limit)?;
            rest = next;
        }
        Ok(())
    }

    /// The most bytes a raw snappy block of `len` bytes can decompress to.
    ///
    /// After the length preamble (a varint, at least one byte) a block is a sequence of
    /// elements, and none produces more than 64/3 bytes per byte it takes: a literal of `n`
    /// bytes takes at least `n + 1`; a copy with a 1-byte offset takes 2 bytes and produces
    /// at most 11; with a 2-byte offset, 3 bytes and at most 64; with a 4-byte offset, 5 bytes
    /// and at most 64. So `len - 1` bytes of elements produce at most `64 * (len - 1) / 3`
    /// bytes (21.3× the input), and a larger declared length is a lie that no valid block
    /// can back.
    #[cfg(feature = "snappy")]
    pub(super) fn max_raw_snappy_len(len: usize) -> usize {
        len.saturating_sub(1).saturating_mul(64) / 3
    }

    /// Decompresses one raw snappy block, checking its declared length against what the
    /// block can expand to ([`max_raw_snappy_len`]) and against `budget` (what is left of
    /// `limit`) before allocating. `out`'s capacity stays within `out.len() + budget`.
    /// Returns the bytes appended.
    #[cfg(feature = "snappy")]
    fn raw_snappy(
        block: &[u8],
        out: &mut Vec<u8>,
        budget: usize,
        limit: usize,
    ) -> Result<usize, RecordError> {
        let n = snap::raw::decompress_len(block).map_err(|e| failed("snappy", e))?;
        let most = max_raw_snappy_len(block.len());
        if n > most {
            return Err(failed(
                "snappy",
                format_args!(
                    "raw block of {} bytes declares {n} decompressed bytes, more than the \
                     {most} it can hold",
                    block.len()
                ),
            ));
        }
        if n > budget {
            return Err(RecordError::DecompressedTooLarge { limit });
        }
        let start = out.len();
        if !reserve_within(out, n, start.saturating_add(budget)) {
            return Err(RecordError::DecompressedTooLarge { limit });
        }
        out.resize(start + n, 0);
        match snap::raw::Decoder::new().decompress(block, &mut out[start..]) {
            Ok(written) => {
                out.truncate(start + written);
                Ok(written)
            }
            Err(e) => {
                out.truncate(start);
                Err(failed("snappy", e))
            }
        }
    }

    #[cfg(feature = "lz4")]
    pub(super) fn lz4(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        let start = *end;
        match lz4_direct(input, out, end, limit) {
            Direct::Done(r) => r,
            Direct::NotSimple => {
                // Linked blocks, checksums or a frame kind of its own: the general decoder.
                *end = start;
                let reader = lz4_flex::frame::FrameDecoder::new(input);
                read_limited(reader, input.len(), out, end, limit, "lz4")
            }
        }
    }

    /// How [`lz4_direct`] went.
    #[cfg(feature = "lz4")]
    enum Direct {
        /// Decoded, or failed for a reason the general decoder would also fail for.
        Done(Result<(), RecordError>),
        /// The input uses a frame feature the direct path leaves to the general decoder.
        NotSimple,
    }

    /// The LZ4 frame Kafka producers write (independent blocks of at most 64 KiB to 4 MiB,
    /// no checksums, no dictionary), decoded block by block straight into `out`, without
    /// the frame decoder's own buffer and the copy out of it. The batch CRC covers these
    /// bytes; the frame header's checksum byte is not checked. As in the Java client, one
    /// frame is read and anything after its end mark is ignored.
    ///
    /// Output goes to `out[*end..]` as in [`read_limited`]: scratch past `out.len()` is
    /// zero-filled once, and no more than `limit` bytes come out.
    #[cfg(feature = "lz4")]
    fn lz4_direct(input: &[u8], out: &mut Vec<u8>, end: &mut usize, limit: usize) -> Direct {
        const MAGIC: u32 = 0x184D_2204;
        let truncated = || Direct::Done(Err(failed("lz4", "frame cut short")));
        // Frame header: magic, FLG, BD, [content size], header checksum. FLG: version 01,
        // independent blocks, no block or content checksum, no dictionary (the content
        // size, bit 3, may be there); BD: no reserved bits.
        let Some((head, after)) = input.split_first_chunk::<6>() else {
            return if input.is_empty() {
                Direct::NotSimple
            } else {
                truncated()
            };
        };
        let [m0, m1, m2, m3, flg, bd] = *head;
        if u32::from_le_bytes([m0, m1, m2, m3]) != MAGIC
            || flg & 0b1111_0111 != 0b0110_0000
            || bd & 0b1000_1111 != 0
        {
            return Direct::NotSimple;
        }
        let block_max = match bd >> 4 {
            4 => 64 * 1024,
            5 => 256 * 1024,
            6 => 1024 * 1024,
            7 => 4 * 1024 * 1024,
            _ => return Direct::NotSimple,
        };
        let header_rest = if flg & 0b0000_1000 != 0 { 9 } else { 1 };
        let Some(mut blocks) = after.get(header_rest..) else {
            return truncated();
        };
        let ceiling = end.saturating_add(limit);
        let mut filled = *end;
        loop {
            let Some((size, after)) = blocks.split_first_chunk::<4>() else {
                return truncated();
            };
            let size = u32::from_le_bytes(*size);
            if size == 0 {
                *end = filled;
                return Direct::Done(Ok(()));
            }
            let len = (size & 0x7FFF_FFFF) as usize;
            if len > block_max {
                return Direct::Done(Err(failed("lz4", "block larger than the frame allows")));
            }
            let Some(block) = after.get(..len) else {
                return truncated();
            };
            blocks = &after[len..];
            // Room for a whole block, or up to the limit plus one byte that tells "over the
            // limit" from "exactly at it".
            let mut stop = filled
                .saturating_add(block_max)
                .min(ceiling.saturating_add(1));
            if out.len() < stop {
                if !super::reserve_within(out, stop - out.len(), ceiling.saturating_add(1)) {
                    // The buffer may not move: decode into what its allocation holds.
                    stop = out.capacity().max(out.len()).min(stop);
                }
                out.resize(stop, 0);
            }
            // Whether any block the frame allows fits (else "too small" means "too large").
            let whole_block = stop >= filled.saturating_add(block_max);
            let n = if size & 0x8000_0000 != 0 {
                if len > stop - filled {
                    return Direct::Done(Err(RecordError::DecompressedTooLarge { limit }));
                }
                out[filled..filled + len].copy_from_slice(block);
                len
            } else {
                match lz4_flex::block::decompress_into(block, &mut out[filled..stop]) {
                    Ok(n) => n,
                    Err(lz4_flex::block::DecompressError::OutputTooSmall { .. })
                        if whole_block && stop <= ceiling =>
                    {
                        return Direct::Done(Err(failed(
                            "lz4",
                            "block decodes to more than the frame allows",
                        )))
                    }
                    Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                        return Direct::Done(Err(RecordError::DecompressedTooLarge { limit }))
                    }
                    Err(e) => return Direct::Done(Err(failed("lz4", e))),
                }
            };
            filled += n;
            if filled > ceiling {
                return Direct::Done(Err(RecordError::DecompressedTooLarge { limit }));
            }
        }
    }

    #[cfg(not(feature = "lz4"))]
    pub(super) fn lz4(
        _: &[u8],
        _: &mut Vec<u8>,
        _: &mut usize,
        _: usize,
    ) -> Result<(), RecordError> {
        Err(RecordError::CodecDisabled("lz4"))
    }

    /// The zstd frame magic number (RFC 8878, 3.1.1), little-endian on the wire.
    #[cfg(any(feature = "zstd", feature = "zstd-native"))]
    const ZSTD_MAGIC: u32 = 0xFD2F_B528;

    /// The history a decoder keeps for the zstd frame at the start of `input`: its window
    /// size, or its content size when that is smaller or the frame is a single segment (RFC
    /// 8878, 3.1.1.1); `None` when `input` does not start with a whole zstd frame header
    /// (a skippable frame, a truncated header, not zstd: the decoder says what it is).
    ///
    /// A decoder holds up to this much of the frame's output besides what it hands out (the
    /// pure-Rust one hands out nothing until it has that much): a window the header declares
    /// up to 2^41 bytes would let a few bytes of input make it hold gigabytes before any
    /// output limit can act.
    #[cfg(any(feature = "zstd", feature = "zstd-native"))]
    pub(super) fn zstd_frame_history(input: &[u8]) -> Option<u64> {
        let magic = u32::from_le_bytes(input.get(..4)?.try_into().ok()?);
        if magic != ZSTD_MAGIC {
            return None;
        }
        let descriptor = *input.get(4)?;
        let single_segment = descriptor & 0x20 != 0;
        let mut at = 5;
        let window = if single_segment {
            None
        } else {
            let w = *input.get(at)?;
            at += 1;
            let base = 1u64 << (10 + (w >> 3));
            Some(base + (base / 8) * u64::from(w & 7))
        };
        at += [0, 1, 2, 4][usize::from(descriptor & 3)]; // dictionary id
        let content = match (descriptor >> 6, single_segment) {
            (0, false) => None,
            (0, true) => Some(u64::from(*input.get(at)?)),
            (1, _) => {
                let b = input.get(at..at + 2)?;
                Some(u64::from(u16::from_le_bytes([b[0], b[1]])) + 256)
            }
            (2, _) => Some(u64::from(u32::from_le_bytes(
                input.get(at..at + 4)?.try_into().ok()?,
            ))),
            _ => Some(u64::from_le_bytes(input.get(at..at + 8)?.try_into().ok()?)),
        };
        match (window, content) {
            (Some(w), Some(c)) => Some(w.min(c)),
            (w, c) => w.or(c),
        }
    }

    /// The history a zstd frame may ask its decoder to keep even when the output limit is
    /// smaller: 8 MiB, the window of libzstd's levels up to 19 when the size is not known
    /// in advance (the Java producer's frames: 2 MiB at its default level 3), so that a
    /// small `fetch.buffer.bytes` still reads them. A decoder's history is freed when the
    /// batch is decoded.
    #[cfg(any(feature = "zstd", feature = "zstd-native"))]
    const ZSTD_HISTORY_ALLOWANCE: usize = 8 * 1024 * 1024;

    /// Refuses a zstd frame whose decoder would keep more history (see
    /// [`zstd_frame_history`]) than `limit` or [`ZSTD_HISTORY_ALLOWANCE`], whichever is
    /// larger, before any decoder allocates for it: the frame is refused as too large for
    /// the budget, as its output would be.
    #[cfg(any(feature = "zstd", feature = "zstd-native"))]
    fn check_zstd_history(frame: &[u8], limit: usize) -> Result<(), RecordError> {
        match zstd_frame_history(frame) {
            Some(history) if history > limit.max(ZSTD_HISTORY_ALLOWANCE) as u64 => {
                Err(RecordError::DecompressedTooLarge { limit })
            }
            _ => Ok(()),
        }
    }

    /// With the `zstd-native` feature: libzstd (C, built by the `zstd` crate), several
    /// times faster than the pure-Rust decoder on literal-heavy data. It reads
    /// concatenated and skippable frames itself; only the first frame's history is checked
    /// before it starts (libzstd refuses windows over 128 MiB in any frame by itself).
    #[cfg(feature = "zstd-native")]
    pub(super) fn zstd(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        check_zstd_history(input, limit)?;
        let decoder =
            ::zstd::stream::read::Decoder::with_buffer(input).map_err(|e| failed("zstd", e))?;
        read_limited(decoder, input.len(), out, end, limit, "zstd")
    }

    /// The default: the project's own decoder ([`crate::protocol::zstd`]), pure Rust. It
    /// reads concatenated and skippable frames itself, into `out` directly (the output is
    /// its history, so a frame's window costs no memory of its own); the first frame's
    /// declared history is checked as with the other decoders.
    #[cfg(all(
        feature = "zstd",
        not(feature = "zstd-ruzstd"),
        not(feature = "zstd-native")
    ))]
    pub(super) fn zstd(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        check_zstd_history(input, limit)?;
        own_zstd(input, out, end, limit)
    }

    /// The project's own zstd decoder, whichever decoder the build uses for batches (the
    /// fuzz targets compare it with libzstd).
    #[cfg(feature = "zstd")]
    #[cfg_attr(
        any(feature = "zstd-native", feature = "zstd-ruzstd"),
        allow(dead_code)
    )]
    pub(crate) fn own_zstd(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        use crate::protocol::zstd::{decode, Error};
        decode(input, out, end, limit).map_err(|e| match e {
            Error::Corrupt(reason) => failed("zstd", reason),
            Error::TooLarge => RecordError::DecompressedTooLarge { limit },
        })
    }

    /// With the `zstd-ruzstd` feature: the `ruzstd` crate. Its streaming decoder reads one frame; loop over concatenated frames and step
    /// over skippable ones. Each frame's history must fit in what is left of the limit
    /// before its decoder is made.
    #[cfg(all(feature = "zstd-ruzstd", not(feature = "zstd-native")))]
    pub(super) fn zstd(
        input: &[u8],
        out: &mut Vec<u8>,
        end: &mut usize,
        limit: usize,
    ) -> Result<(), RecordError> {
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        use ruzstd::decoding::StreamingDecoder;

        let start = *end;
        let mut filled = *end;
        let mut rest = input;
        while !rest.is_empty() {
            let budget = limit - (filled - start);
            let left = rest.len();
            check_zstd_history(rest, budget)
                .map_err(|_| RecordError::DecompressedTooLarge { limit })?;
            match StreamingDecoder::new(&mut rest) {
                Ok(mut decoder) => {
                    read_limited(&mut decoder, left, out, &mut filled, budget, "zstd")?
                }
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    // The 8-byte skippable-frame header was consumed; skip its payload.
                    let length = length as usize;
                    if length > rest.len() {
                        return Err(failed("zstd", "truncated skippable frame"));
                    }
                    rest = &rest[length..];
                }
                Err(e) => return Err(failed("zstd", e)),
            }
        }
        *end = filled;
        Ok(())
    }

    #[cfg(not(any(feature = "zstd", feature = "zstd-native")))]
    pub(super) fn zstd(
        _: &[u8],
        _: &mut Vec<u8>,
        _: &mut usize,
        _: usize,
    ) -> Result<(), RecordError> {
        Err(RecordError::CodecDisabled("zstd"))
    }
}

impl RecordRef {
    /// The key's bytes, `None` for a null key.
    ///
    /// # Panics
    /// If `records` is shorter than the buffer the record was parsed from.
    pub fn key<'a>(&self, records: &'a [u8]) -> Option<&'a [u8]> {
        self.key.map(|r| slice(records, r))
    }

    /// The value's bytes, `None` for a null value.
    ///
    /// # Panics
    /// If `records` is shorter than the buffer the record was parsed from.
    pub fn value<'a>(&self, records: &'a [u8]) -> Option<&'a [u8]> {
        self.value.map(|r| slice(records, r))
    }

    /// The headers, lazily.
    ///
    /// # Panics
    /// If `records` is shorter than the buffer the record was parsed from.
    pub fn headers<'a>(&self, records: &'a [u8]) -> HeaderIter<'a> {
        HeaderIter::new(slice(records, self.headers), self.header_count)
    }
}

fn slice(buf: &[u8], (start, len): (u32, u32)) -> &[u8] {
    &buf[start as usize..start as usize + len as usize]
}

impl<'a> RecordIter<'a> {
    /// Iterates over the records of the batch with `header`, in `records`: the batch's
    /// records section, decompressed if the batch is compressed.
    pub fn new(header: &BatchHeader, records: &'a [u8]) -> Self {
        let pending = if header.record_count < 0 {
            Some("negative record count")
        } else if u32::try_from(records.len()).is_err() {
            Some("records section larger than 4 GiB")
        } else if header.record_count as usize > records.len() / MIN_RECORD_SIZE {
            Some("record count larger than the records section can hold")
        } else {
            None
        };
        let count = if pending.is_some() {
            0
        } else {
            header.record_count as u32
        };
        RecordIter {
            buf: records,
            pos: 0,
            remaining: count,
            count,
            base_offset: header.base_offset,
            last_offset_delta: header.last_offset_delta,
            prev_delta: -1,
            base_timestamp: header.base_timestamp,
            log_append_time: match header.timestamp_type() {
                TimestampType::LogAppendTime => Some(header.max_timestamp),
                _ => None,
            },
            pending,
            done: false,
        }
    }

    /// Records not yet yielded.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Bytes of the records section read so far: the records yielded, each with its length
    /// prefix (so the difference across one `next` is that record's size in the batch, as
    /// Java's `Record.sizeInBytes`).
    pub fn bytes_read(&self) -> usize {
        self.pos
    }

    /// The next record if it is well formed, without building an error value; `None` when
    /// the records are exhausted or the next one needs the careful path: call
    /// [`Iterator::next`] then, which says exactly what is wrong.
    #[inline]
    pub fn next_fast(&mut self) -> Option<RecordRef> {
        if self.done || self.pending.is_some() || self.remaining == 0 {
            return None;
        }
        let (r, end, delta) = self.record_fast()?;
        self.advance(end, delta);
        Some(r)
    }

    /// Moves past a record the fast path accepted.
    #[inline]
    fn advance(&mut self, end: usize, delta: i32) {
        self.pos = end;
        self.prev_delta = delta;
        self.remaining -= 1;
    }

    /// The hot path: decodes one well-formed record without building any error value,
    /// returning it with its end and its offset delta. Anything unusual returns `None`, and
    /// [`RecordIter::record`] reads the record again to say exactly what is wrong. It
    /// accepts nothing that `record` rejects.
    #[inline]
    fn record_fast(&self) -> Option<(RecordRef, usize, i32)> {
        let buf = self.buf;
        let mut p = self.pos;
        let len = fast_varint(buf, &mut p)?;
        if len < 0 {
            return None;
        }
        let end = p + len as usize;
        let rec = buf.get(..end)?;
        if p == end {
            return None;
        }
        p += 1; // attributes: unused
        let ts_delta = fast_varlong(rec, &mut p)?;
        let offset_delta = fast_varint(rec, &mut p)?;
        if offset_delta <= self.prev_delta || offset_delta > self.last_offset_delta {
            return None;
        }
        let key = fast_bytes(rec, &mut p)?;
        let value = fast_bytes(rec, &mut p)?;
        let count = fast_varint(rec, &mut p)?;
        if count < 0 {
            return None;
        }
        let headers_start = p;
        for _ in 0..count {
            // Keys are bytes (invariant 4), but never null.
            fast_bytes(rec, &mut p)??;
            fast_bytes(rec, &mut p)?;
        }
        if p != end {
            return None;
        }
        let offset = self.base_offset.checked_add(offset_delta as i64)?;
        let timestamp = match self.log_append_time {
            Some(t) => t,
            None => self.base_timestamp.checked_add(ts_delta)?,
        };
        Some((
            RecordRef {
                offset,
                timestamp,
                key,
                value,
                headers: (headers_start as u32, (end - headers_start) as u32),
                header_count: count as u32,
            },
            end,
            offset_delta,
        ))
    }

    /// The careful path: decodes the next record or says exactly what is wrong, with the
    /// error located (invariant 7). On success moves past the record, except for
    /// `remaining`, which the caller counts down.
    fn record(&mut self) -> Result<RecordRef, RecordError> {
        if self.pos == self.buf.len() {
            return Err(self.batch_error(RecordError::Invalid(
                "the batch holds fewer records than its record count",
            )));
        }
        let mut delta = None;
        match self.parse_record(&mut delta) {
            Ok((r, end, d)) => {
                self.pos = end;
                self.prev_delta = d;
                Ok(r)
            }
            Err(e) => {
                let offset = match delta {
                    Some(d) => self.base_offset.saturating_add(d as i64),
                    None => self
                        .base_offset
                        .saturating_add((self.count - self.remaining) as i64),
                };
                Err(RecordError::InRecord {
                    offset,
                    error: Box::new(e),
                })
            }
        }
    }

    /// An error in the batch as a whole.
    fn batch_error(&self, e: RecordError) -> RecordError {
        RecordError::InBatch {
            base_offset: self.base_offset,
            error: Box::new(e),
        }
    }

    /// Decodes the record at `pos` with unlocated errors, setting `delta` once the record's
    /// offset delta is read. Returns the record, its end and its offset delta.
    fn parse_record(
        &self,
        delta: &mut Option<i32>,
    ) -> Result<(RecordRef, usize, i32), RecordError> {
        let buf = self.buf;
        let mut p = self.pos;
        let len = varint(buf, &mut p).map_err(|e| e.context("Record.length"))?;
        if len < 0 {
            return Err(bad_length(len, "Record.length"));
        }
        let left = buf.len() - p;
        if len as usize > left {
            return Err(RecordError::Decode(
                DecodeError::new(DecodeErrorKind::Truncated {
                    needed: len as usize,
                    remaining: left,
                })
                .context("Record"),
            ));
        }
        let end = p + len as usize;
        // Every read below is bounded by the record's own length.
        let rec = &buf[..end];
        if p == end {
            return Err(truncated(0, "Record.attributes"));
        }
        p += 1; // attributes: unused
        let ts_delta = varlong(rec, &mut p).map_err(|e| e.context("Record.timestampDelta"))?;
        let offset_delta = varint(rec, &mut p).map_err(|e| e.context("Record.offsetDelta"))?;
        *delta = Some(offset_delta);
        let key = bytes_range(rec, &mut p, "Record.key")?;
        let value = bytes_range(rec, &mut p, "Record.value")?;
        let count = varint(rec, &mut p).map_err(|e| e.context("Record.headerCount"))?;
        // Each header takes at least two bytes (key length, value length).
        if count < 0 || count as usize > (end - p) / 2 {
            return Err(bad_length(count, "Record.headerCount"));
        }
        let headers_start = p;
        for _ in 0..count {
            // Keys are bytes (invariant 4), but never null.
            if bytes_range(rec, &mut p, "Header.key")?.is_none() {
                return Err(bad_length(-1, "Header.key"));
            }
            bytes_range(rec, &mut p, "Header.value")?;
        }
        if p != end {
            return Err(RecordError::Decode(
                DecodeError::new(DecodeErrorKind::TrailingBytes(end - p)).context("Record"),
            ));
        }
        let offset = self
            .base_offset
            .checked_add(offset_delta as i64)
            .ok_or(RecordError::Invalid("record offset overflows int64"))?;
        if offset_delta < 0 {
            return Err(RecordError::OffsetOrder("negative record offset delta"));
        }
        if offset_delta == self.prev_delta {
            return Err(RecordError::OffsetOrder(
                "record offset repeats the previous record's",
            ));
        }
        if offset_delta < self.prev_delta {
            return Err(RecordError::OffsetOrder(
                "record offset is below the previous record's",
            ));
        }
        if offset_delta > self.last_offset_delta {
            return Err(RecordError::OffsetOrder(
                "record offset delta exceeds the batch's lastOffsetDelta",
            ));
        }
        let timestamp = match self.log_append_time {
            Some(t) => t,
            None => self
                .base_timestamp
                .checked_add(ts_delta)
                .ok_or(RecordError::Invalid("record timestamp overflows int64"))?,
        };
        // Positions fit in u32: `new` checked the buffer's length.
        Ok((
            RecordRef {
                offset,
                timestamp,
                key,
                value,
                headers: (headers_start as u32, (end - headers_start) as u32),
                header_count: count as u32,
            },
            end,
            offset_delta,
        ))
    }
}

impl Iterator for RecordIter<'_> {
    type Item = Result<RecordRef, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(what) = self.pending {
            self.done = true;
            return Some(Err(self.batch_error(RecordError::Invalid(what))));
        }
        if self.remaining == 0 {
            self.done = true;
            let extra = self.buf.len() - self.pos;
            if extra == 0 {
                return None;
            }
            return Some(Err(self.batch_error(RecordError::Decode(
                DecodeError::new(DecodeErrorKind::TrailingBytes(extra))
                    .context("RecordBatch.records"),
            ))));
        }
        if let Some((r, end, delta)) = self.record_fast() {
            self.advance(end, delta);
            return Some(Ok(r));
        }
        match self.record() {
            Ok(r) => {
                self.remaining -= 1;
                Some(Ok(r))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // One more item for a possible trailing-bytes or pending error; never more
            // records than the bytes left can hold (invariant 1).
            let fit = (self.buf.len() - self.pos) / MIN_RECORD_SIZE;
            (0, Some((self.remaining as usize).min(fit) + 1))
        }
    }
}

impl std::iter::FusedIterator for RecordIter<'_> {}

impl<'a> HeaderIter<'a> {
    /// Iterates over `count` headers in `section` (a record's header section, see
    /// [`RecordRef::headers`]).
    pub fn new(section: &'a [u8], count: u32) -> Self {
        HeaderIter {
            buf: section,
            pos: 0,
            remaining: count,
        }
    }

    fn header(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let buf = self.buf;
        let mut p = self.pos;
        let klen = varint(buf, &mut p).ok()?;
        let key = buf.get(p..p.checked_add(usize::try_from(klen).ok()?)?)?;
        p += key.len();
        let vlen = varint(buf, &mut p).ok()?;
        let value = if vlen == -1 {
            None
        } else {
            let v = buf.get(p..p.checked_add(usize::try_from(vlen).ok()?)?)?;
            p += v.len();
            Some(v)
        };
        self.pos = p;
        Some((key, value))
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    /// `(key, value)`: the key's bytes (any bytes, see invariant 4) and the value, `None`
    /// when null.
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        match self.header() {
            Some(h) => {
                self.remaining -= 1;
                Some(h)
            }
            None => {
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize))
    }
}

impl std::iter::FusedIterator for HeaderIter<'_> {}

/// Reads the marker of a control record from its key (`int16 version, int16 type`).
/// Versions above 0 are read as version 0, as the Java client does.
///
/// # Errors
/// [`RecordError::Decode`] if the key is shorter than 4 bytes;
/// [`RecordError::Invalid`] if the version is negative.
pub fn control_type(key: &[u8]) -> Result<ControlType, RecordError> {
    let mut r = Reader::new(key);
    let version = r.i16().map_err(|e| e.context("ControlRecordKey.version"))?;
    let kind = r.i16().map_err(|e| e.context("ControlRecordKey.type"))?;
    if version < 0 {
        return Err(RecordError::Invalid("negative control record key version"));
    }
    Ok(match kind {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        other => ControlType::Other(other),
    })
}

impl From<DecodeError> for RecordError {
    fn from(e: DecodeError) -> Self {
        RecordError::Decode(e)
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Decode(e) => write!(f, "malformed record batch: {e}"),
            RecordError::CrcMismatch {
                base_offset,
                expected,
                computed,
            } => write!(
                f,
                "record batch at offset {base_offset} is corrupt: stored CRC-32C {expected:#010x}, \
                 computed {computed:#010x}"
            ),
            RecordError::UnsupportedMagic(m) => write!(
                f,
                "record batch magic {m} is not supported: only magic 2 record batches are \
                 (legacy message sets, magic 0 and 1, are not supported)"
            ),
            RecordError::UnknownCompression(c) => {
                write!(f, "record batch uses unknown compression code {c}")
            }
            RecordError::CodecDisabled(name) => write!(
                f,
                "record batch is compressed with {name}, but the `{name}` cargo feature is disabled"
            ),
            RecordError::Decompress { codec, reason } => {
                write!(
                    f,
                    "{codec} decompression of a record batch failed: {reason}"
                )
            }
            RecordError::DecompressedTooLarge { limit } => write!(
                f,
                "record batch decompresses to more than the {limit}-byte limit"
            ),
            RecordError::Invalid(what) => write!(f, "invalid record batch: {what}"),
            RecordError::OffsetOrder(what) => {
                write!(f, "record offsets contradict their batch: {what}")
            }
            RecordError::InBatch { base_offset, error } => {
                write!(f, "{error} (record batch at offset {base_offset})")
            }
            RecordError::InRecord { offset, error } => {
                write!(f, "{error} (record at offset {offset})")
            }
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecordError::Decode(e) => Some(e),
            // The wrapped error's text is part of this one's: its source comes next.
            RecordError::InBatch { error, .. } | RecordError::InRecord { error, .. } => {
                error.source()
            }
            _ => None,
        }
    }
}

fn bad_length(n: i32, what: &'static str) -> RecordError {
    RecordError::Decode(DecodeError::new(DecodeErrorKind::BadLength(n as i64)).context(what))
}

fn truncated(remaining: usize, what: &'static str) -> RecordError {
    RecordError::Decode(
        DecodeError::new(DecodeErrorKind::Truncated {
            needed: 1,
            remaining,
        })
        .context(what),
    )
}

/// [`varint`] without an error value: `None` for truncated or overlong input.
#[inline(always)]
fn fast_varint(buf: &[u8], p: &mut usize) -> Option<i32> {
    read_uvarint(buf, p, 5).map(zigzag32)
}

/// [`varlong`] without an error value.
#[inline(always)]
fn fast_varlong(buf: &[u8], p: &mut usize) -> Option<i64> {
    read_uvarint(buf, p, 10).map(zigzag64)
}

/// [`bytes_range`] without an error value: `Some(None)` is a null field.
#[inline(always)]
fn fast_bytes(buf: &[u8], p: &mut usize) -> Option<Option<(u32, u32)>> {
    let len = fast_varint(buf, p)?;
    if len == -1 {
        return Some(None);
    }
    if len < 0 || len as usize > buf.len() - *p {
        return None;
    }
    let start = *p;
    *p += len as usize;
    Some(Some((start as u32, len as u32)))
}

/// Reads a nullable byte field (zigzag varint length, −1 = null) as a `(start, len)` range.
#[inline]
fn bytes_range(
    buf: &[u8],
    p: &mut usize,
    what: &'static str,
) -> Result<Option<(u32, u32)>, RecordError> {
    let len = varint(buf, p).map_err(|e| e.context(what))?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 || len as usize > buf.len() - *p {
        return Err(bad_length(len, what));
    }
    let start = *p;
    *p += len as usize;
    Ok(Some((start as u32, len as u32)))
}

/// Reads a zigzag varint at `*p` (at most 5 bytes).
#[inline(always)]
fn varint(buf: &[u8], p: &mut usize) -> Result<i32, DecodeError> {
    fast_varint(buf, p).ok_or_else(|| varint_error(buf, *p, 5))
}

/// Reads a zigzag varlong at `*p` (at most 10 bytes).
#[inline(always)]
fn varlong(buf: &[u8], p: &mut usize) -> Result<i64, DecodeError> {
    fast_varlong(buf, p).ok_or_else(|| varint_error(buf, *p, 10))
}

/// Builders of record batches for tests and the fuzz harness; not in normal builds.
#[cfg(any(test, feature = "__testing", feature = "__fuzzing"))]
pub mod testing {
    use super::{ATTR_CONTROL, ATTR_TRANSACTIONAL, BATCH_HEADER_SIZE, CRC_START};
    use crate::protocol::wire::Writer;

    /// A record: `(offset_delta, timestamp_delta, key, value, headers)`.
    pub type RecordSpec<'a> = (
        i32,
        i64,
        Option<&'a [u8]>,
        Option<&'a [u8]>,
        &'a [(&'a str, Option<&'a [u8]>)],
    );

    /// What [`encode_batch`] builds. `Default` is an empty, non-transactional batch at 0.
    #[derive(Debug, Clone)]
    pub struct BatchSpec<'a> {
        /// `baseOffset`.
        pub base_offset: i64,
        /// `partitionLeaderEpoch`.
        pub partition_leader_epoch: i32,
        /// `magic` (2 unless testing rejection).
        pub magic: i8,
        /// `attributes` (set the compression bits when `records_section` is compressed).
        pub attributes: i16,
        /// `lastOffsetDelta`; `None` = the largest record offset delta (0 with no records).
        pub last_offset_delta: Option<i32>,
        /// `baseTimestamp`.
        pub base_timestamp: i64,
        /// `maxTimestamp`; `None` = `base_timestamp` + the largest timestamp delta.
        pub max_timestamp: Option<i64>,
        /// `producerId`.
        pub producer_id: i64,
        /// `producerEpoch`.
        pub producer_epoch: i16,
        /// `baseSequence`.
        pub base_sequence: i32,
        /// The records.
        pub records: &'a [RecordSpec<'a>],
        /// Replaces the encoding of `records` (e.g. the compressed section).
        pub records_section: Option<&'a [u8]>,
        /// `recordCount`; `None` = `records.len()`.
        pub record_count: Option<i32>,
    }

    impl Default for BatchSpec<'_> {
        fn default() -> Self {
            BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                magic: 2,
                attributes: 0,
                last_offset_delta: None,
                base_timestamp: 0,
                max_timestamp: None,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
                records: &[],
                records_section: None,
                record_count: None,
            }
        }
    }

    /// A record whose header keys are any bytes (not necessarily UTF-8): as [`RecordSpec`].
    pub type RawRecordSpec<'a> = (
        i32,
        i64,
        Option<&'a [u8]>,
        Option<&'a [u8]>,
        &'a [(&'a [u8], Option<&'a [u8]>)],
    );

    /// Encodes one record (length prefix included).
    pub fn encode_record(w: &mut Writer, r: &RecordSpec<'_>) {
        let (offset_delta, ts_delta, key, value, headers) = *r;
        let headers: Vec<(&[u8], Option<&[u8]>)> =
            headers.iter().map(|(k, v)| (k.as_bytes(), *v)).collect();
        encode_raw_record(w, &(offset_delta, ts_delta, key, value, &headers));
    }

    /// Encodes one record with byte header keys (length prefix included).
    pub fn encode_raw_record(w: &mut Writer, r: &RawRecordSpec<'_>) {
        let (offset_delta, ts_delta, key, value, headers) = *r;
        let mut body = Writer::new();
        body.i8(0);
        body.varlong(ts_delta);
        body.varint(offset_delta);
        nullable(&mut body, key);
        nullable(&mut body, value);
        body.varint(headers.len() as i32);
        for (k, v) in headers {
            body.varint(k.len() as i32);
            body.raw(k);
            nullable(&mut body, *v);
        }
        let body = body.into_inner();
        w.varint(body.len() as i32);
        w.raw(&body);
    }

    fn nullable(w: &mut Writer, b: Option<&[u8]>) {
        match b {
            None => w.varint(-1),
            Some(b) => {
                w.varint(b.len() as i32);
                w.raw(b);
            }
        }
    }

    /// The uncompressed records section holding `records`.
    pub fn encode_records(records: &[RecordSpec<'_>]) -> Vec<u8> {
        let mut w = Writer::new();
        for r in records {
            encode_record(&mut w, r);
        }
        w.into_inner()
    }

    /// A whole record batch with a correct CRC-32C.
    pub fn encode_batch(b: &BatchSpec<'_>) -> Vec<u8> {
        let section = match b.records_section {
            Some(s) => s.to_vec(),
            None => encode_records(b.records),
        };
        let last_offset_delta = b
            .last_offset_delta
            .unwrap_or_else(|| b.records.iter().map(|r| r.0).max().unwrap_or(0));
        let max_timestamp = b
            .max_timestamp
            .unwrap_or_else(|| b.base_timestamp + b.records.iter().map(|r| r.1).max().unwrap_or(0));
        let mut w = Writer::with_capacity(BATCH_HEADER_SIZE + section.len());
        w.i64(b.base_offset);
        let len_at = w.reserve_i32();
        w.i32(b.partition_leader_epoch);
        w.i8(b.magic);
        w.u32(0); // CRC, patched below
        w.i16(b.attributes);
        w.i32(last_offset_delta);
        w.i64(b.base_timestamp);
        w.i64(max_timestamp);
        w.i64(b.producer_id);
        w.i16(b.producer_epoch);
        w.i32(b.base_sequence);
        w.i32(b.record_count.unwrap_or(b.records.len() as i32));
        w.raw(&section);
        let total = w.len();
        w.patch_i32(len_at, (total - 12) as i32);
        let mut out = w.into_inner();
        let crc = crc32c::crc32c(&out[CRC_START..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// A transactional control batch holding one marker of `kind` (0 = ABORT, 1 = COMMIT).
    pub fn control_batch(base_offset: i64, producer_id: i64, kind: i16) -> Vec<u8> {
        let mut key = Writer::new();
        key.i16(0);
        key.i16(kind);
        let key = key.into_inner();
        let mut value = Writer::new();
        value.i16(0);
        value.i32(0); // coordinator epoch
        let value = value.into_inner();
        let records: [RecordSpec<'_>; 1] = [(0, 0, Some(&key), Some(&value), &[])];
        encode_batch(&BatchSpec {
            base_offset,
            attributes: ATTR_TRANSACTIONAL | ATTR_CONTROL,
            producer_id,
            producer_epoch: 0,
            records: &records,
            ..BatchSpec::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{control_batch, encode_batch, encode_records, BatchSpec, RecordSpec};
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn sample_records() -> Vec<RecordSpec<'static>> {
        vec![
            (0, 0, Some(b"k0"), Some(b"v0"), &[]),
            (1, 5, None, Some(b"v1"), &[("h", Some(b"x"))]),
            (2, 9, Some(b"k2"), None, &[]),
        ]
    }

    /// All records of one batch, as owned (offset, timestamp, key, value, headers).
    type Owned = (
        i64,
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
    );

    fn collect(header: &BatchHeader, records: &[u8]) -> Result<Vec<Owned>, RecordError> {
        RecordIter::new(header, records)
            .map(|r| {
                let r = r?;
                Ok((
                    r.offset,
                    r.timestamp,
                    r.key(records).map(<[u8]>::to_vec),
                    r.value(records).map(<[u8]>::to_vec),
                    r.headers(records)
                        .map(|(k, v)| {
                            (
                                String::from_utf8_lossy(k).into_owned(),
                                v.map(<[u8]>::to_vec),
                            )
                        })
                        .collect(),
                ))
            })
            .collect()
    }

    /// Decodes every batch of a record set, decompressing as needed.
    fn decode_all(
        set: &[u8],
        check_crc: bool,
    ) -> Result<Vec<(BatchHeader, Vec<Owned>)>, RecordError> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for b in BatchIter::new(set, check_crc) {
            let b = b?;
            buf.clear();
            decompress(b.header.compression(), b.records, &mut buf, 16 * MIB)?;
            out.push((b.header, collect(&b.header, &buf)?));
        }
        Ok(out)
    }

    fn compressed_batch(
        codec: Compression,
        compressed: &[u8],
        records: &[RecordSpec<'_>],
    ) -> Vec<u8> {
        encode_batch(&BatchSpec {
            base_offset: 40,
            attributes: codec.code(),
            records,
            records_section: Some(compressed),
            ..BatchSpec::default()
        })
    }

    fn assert_sample(set: &[u8], base_offset: i64) {
        let batches = decode_all(set, true).unwrap();
        assert_eq!(batches.len(), 1);
        let recs = &batches[0].1;
        assert_eq!(recs.len(), 3);
        assert_eq!(
            recs[0],
            (
                base_offset,
                0,
                Some(b"k0".to_vec()),
                Some(b"v0".to_vec()),
                vec![]
            )
        );
        assert_eq!(
            recs[1],
            (
                base_offset + 1,
                5,
                None,
                Some(b"v1".to_vec()),
                vec![("h".into(), Some(b"x".to_vec()))]
            )
        );
        assert_eq!(
            recs[2],
            (base_offset + 2, 9, Some(b"k2".to_vec()), None, vec![])
        );
    }

    #[cfg(feature = "snappy")]
    fn xerial(data: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = codec::XERIAL_MAGIC.to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for c in data.chunks(chunk) {
            let block = snap::raw::Encoder::new().compress_vec(c).unwrap();
            out.extend_from_slice(&(block.len() as i32).to_be_bytes());
            out.extend_from_slice(&block);
        }
        out
    }

    #[cfg(feature = "gzip")]
    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[cfg(feature = "lz4")]
    fn lz4(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[cfg(feature = "zstd")]
    fn zstd(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        ruzstd::encoding::compress(data, &mut out, ruzstd::encoding::CompressionLevel::Fastest);
        out
    }

    #[test]
    fn an_uncompressed_batch_yields_its_header_and_records() {
        let recs = sample_records();
        let set = encode_batch(&BatchSpec {
            base_offset: 40,
            partition_leader_epoch: 7,
            producer_id: 99,
            producer_epoch: 3,
            base_sequence: 12,
            records: &recs,
            ..BatchSpec::default()
        });
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let h = b.header;
        assert_eq!(b.start, 0);
        assert_eq!(h.batch_length as usize + 12, set.len());
        assert_eq!(
            (h.magic, h.partition_leader_epoch, h.record_count),
            (2, 7, 3)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (99, 3, 12)
        );
        assert_eq!(h.compression(), Compression::None);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        assert!(!h.is_transactional() && !h.is_control());
        assert_eq!((h.last_offset(), h.next_offset()), (42, 43));
        assert_eq!(h.max_timestamp, 9);
        assert_sample(&set, 40);
    }

    #[test]
    fn concatenated_batches_are_yielded_in_order_with_their_start() {
        let recs = sample_records();
        let a = encode_batch(&BatchSpec {
            base_offset: 0,
            records: &recs,
            ..BatchSpec::default()
        });
        let b = encode_batch(&BatchSpec {
            base_offset: 3,
            records: &recs[..1],
            ..BatchSpec::default()
        });
        let set = [a.clone(), b].concat();
        let batches: Vec<_> = BatchIter::new(&set, true)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!((batches[0].start, batches[1].start), (0, a.len()));
        assert_eq!(batches[1].header.base_offset, 3);
        let all = decode_all(&set, true).unwrap();
        let offsets: Vec<i64> = all
            .iter()
            .flat_map(|(_, r)| r.iter().map(|r| r.0))
            .collect();
        assert_eq!(offsets, [0, 1, 2, 3]);
    }

    #[test]
    fn a_partial_trailing_batch_is_ignored_silently() {
        let recs = sample_records();
        let a = encode_batch(&BatchSpec {
            records: &recs,
            ..BatchSpec::default()
        });
        for cut in [1, 11, 12, 30, a.len() - 1] {
            let set = [&a[..], &a[..cut]].concat();
            let mut it = BatchIter::new(&set, true);
            assert!(it.next().unwrap().is_ok());
            assert!(it.next().is_none(), "cut at {cut}");
            assert_eq!(it.position(), a.len());
            assert_eq!(set.len() - it.position(), cut);
        }
        // Only a partial batch: nothing at all.
        assert!(BatchIter::new(&a[..a.len() - 1], true).next().is_none());
        assert!(BatchIter::new(&[], true).next().is_none());
    }

    #[test]
    fn records_before_the_fetch_offset_are_yielded_with_their_true_offsets() {
        let recs: Vec<RecordSpec<'_>> = (0..5)
            .map(|i| (i, 0, None, Some(&b"v"[..]), &[][..]))
            .collect();
        let set = encode_batch(&BatchSpec {
            base_offset: 100,
            records: &recs,
            ..BatchSpec::default()
        });
        let batches = decode_all(&set, true).unwrap();
        let offsets: Vec<i64> = batches[0].1.iter().map(|r| r.0).collect();
        assert_eq!(offsets, [100, 101, 102, 103, 104]);
        // The caller trims to its fetch offset, e.g. 103.
        assert_eq!(offsets.iter().filter(|&&o| o >= 103).count(), 2);
    }

    #[test]
    fn compacted_batches_keep_their_last_offset_for_the_next_fetch() {
        let recs: Vec<RecordSpec<'_>> = vec![(1, 0, None, Some(b"v"), &[])];
        let set = encode_batch(&BatchSpec {
            base_offset: 10,
            last_offset_delta: Some(4),
            records: &recs,
            ..BatchSpec::default()
        });
        let (h, recs) = decode_all(&set, true).unwrap().remove(0);
        assert_eq!(recs[0].0, 11);
        assert_eq!(h.next_offset(), 15);
    }

    #[test]
    fn log_append_time_gives_every_record_the_max_timestamp() {
        let recs = sample_records();
        let set = encode_batch(&BatchSpec {
            attributes: ATTR_TIMESTAMP_TYPE,
            base_timestamp: 1_000,
            max_timestamp: Some(5_000),
            records: &recs,
            ..BatchSpec::default()
        });
        let (h, recs) = decode_all(&set, true).unwrap().remove(0);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
        assert!(recs.iter().all(|r| r.1 == 5_000));
    }

    #[test]
    fn create_time_adds_the_delta_to_the_base_timestamp() {
        let recs: Vec<RecordSpec<'_>> = vec![(0, -3, None, None, &[]), (1, 300, None, None, &[])];
        let set = encode_batch(&BatchSpec {
            base_timestamp: 1_700_000_000_000,
            records: &recs,
            ..BatchSpec::default()
        });
        let (_, recs) = decode_all(&set, true).unwrap().remove(0);
        assert_eq!(recs[0].1, 1_699_999_999_997);
        assert_eq!(recs[1].1, 1_700_000_000_300);
    }

    #[test]
    fn null_and_empty_keys_and_values_are_distinct() {
        let recs: Vec<RecordSpec<'_>> =
            vec![(0, 0, None, None, &[]), (1, 0, Some(b""), Some(b""), &[])];
        let set = encode_batch(&BatchSpec {
            records: &recs,
            ..BatchSpec::default()
        });
        let (_, recs) = decode_all(&set, true).unwrap().remove(0);
        assert_eq!((recs[0].2.clone(), recs[0].3.clone()), (None, None));
        assert_eq!(
            (recs[1].2.clone(), recs[1].3.clone()),
            (Some(vec![]), Some(vec![]))
        );
    }

    #[test]
    fn headers_keep_duplicate_keys_null_values_and_order() {
        let headers: &[(&str, Option<&[u8]>)] = &[
            ("trace", Some(b"1")),
            ("é", None),
            ("trace", Some(b"2")),
            ("empty", Some(b"")),
        ];
        let recs: Vec<RecordSpec<'_>> = vec![(0, 0, None, Some(b"v"), headers)];
        let set = encode_batch(&BatchSpec {
            records: &recs,
            ..BatchSpec::default()
        });
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let r = RecordIter::new(&b.header, b.records)
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(r.header_count, 4);
        let got: Vec<_> = r.headers(b.records).collect();
        let want: Vec<_> = headers.iter().map(|(k, v)| (k.as_bytes(), *v)).collect();
        assert_eq!(got, want);
        // Lazy iteration can stop early and restart.
        assert_eq!(
            r.headers(b.records).nth(2),
            Some((&b"trace"[..], Some(&b"2"[..])))
        );
    }

    #[test]
    fn record_ranges_are_relative_to_the_records_slice() {
        let recs: Vec<RecordSpec<'_>> = vec![(0, 0, Some(b"key"), Some(b"value"), &[])];
        let section = encode_records(&recs);
        let h = BatchHeader {
            record_count: 1,
            ..header_of(&encode_batch(&BatchSpec::default()))
        };
        let r = RecordIter::new(&h, &section).next().unwrap().unwrap();
        // length(1) attributes(1) tsDelta(1) offsetDelta(1) keyLength(1)
        assert_eq!(r.key, Some((5, 3)));
        assert_eq!(r.value, Some((9, 5)));
        assert_eq!(r.headers, (15, 0));
    }

    fn header_of(batch: &[u8]) -> BatchHeader {
        BatchIter::new(batch, true).next().unwrap().unwrap().header
    }

    #[test]
    fn control_batches_are_detected_and_their_marker_read() {
        for (kind, want) in [
            (0, ControlType::Abort),
            (1, ControlType::Commit),
            (5, ControlType::Other(5)),
        ] {
            let set = control_batch(77, 9, kind);
            let b = BatchIter::new(&set, true).next().unwrap().unwrap();
            assert!(b.header.is_control() && b.header.is_transactional());
            assert_eq!(b.header.producer_id, 9);
            let r = RecordIter::new(&b.header, b.records)
                .next()
                .unwrap()
                .unwrap();
            assert_eq!(r.offset, 77);
            assert_eq!(control_type(r.key(b.records).unwrap()).unwrap(), want);
        }
    }

    #[test]
    fn control_keys_that_are_short_or_negative_versioned_are_errors() {
        assert!(matches!(
            control_type(&[0, 0, 1]),
            Err(RecordError::Decode(_))
        ));
        assert_eq!(
            control_type(&[0xff, 0xff, 0, 1]),
            Err(RecordError::Invalid("negative control record key version"))
        );
        // A future version is read as version 0.
        assert_eq!(
            control_type(&[0, 3, 0, 1, 9, 9]).unwrap(),
            ControlType::Commit
        );
    }

    #[test]
    fn a_bad_crc_is_a_mismatch_and_accepted_when_crc_checks_are_off() {
        let recs = sample_records();
        let mut set = encode_batch(&BatchSpec {
            base_offset: 40,
            records: &recs,
            ..BatchSpec::default()
        });
        let n = set.len();
        set[n - 1] ^= 0x01; // last byte of the last header value... any covered byte
        let stored = BigEndian::read_u32(&set[17..21]);
        let mut it = BatchIter::new(&set, true);
        match it.next() {
            Some(Err(RecordError::CrcMismatch {
                base_offset,
                expected,
                computed,
            })) => {
                assert_eq!((base_offset, expected), (40, stored));
                assert_eq!(computed, crc32c::crc32c(&set[21..]));
            }
            other => panic!("{other:?}"),
        }
        assert!(it.next().is_none(), "fused after an error");
        assert!(BatchIter::new(&set, false).next().unwrap().is_ok());
    }

    #[test]
    fn the_crc_does_not_cover_the_leader_epoch_or_magic() {
        let mut set = encode_batch(&BatchSpec::default());
        set[12..16].copy_from_slice(&5i32.to_be_bytes());
        assert!(BatchIter::new(&set, true).next().unwrap().is_ok());
    }

    #[test]
    fn legacy_magic_is_unsupported() {
        for magic in [0, 1, 3] {
            let set = encode_batch(&BatchSpec {
                magic,
                ..BatchSpec::default()
            });
            let e = BatchIter::new(&set, true).next().unwrap().unwrap_err();
            assert_eq!(e.without_offset(), &RecordError::UnsupportedMagic(magic));
            assert_eq!(e.offset(), Some(0));
        }
        let msg = RecordError::UnsupportedMagic(1).to_string();
        assert!(msg.contains("legacy message sets"), "{msg}");
        // A legacy v0 message is shorter than a batch header: still reported by magic.
        let mut legacy = vec![0u8; 12 + 14];
        legacy[8..12].copy_from_slice(&14i32.to_be_bytes());
        assert_eq!(
            BatchIter::new(&legacy, true)
                .next()
                .unwrap()
                .unwrap_err()
                .without_offset(),
            &RecordError::UnsupportedMagic(0)
        );
    }

    #[test]
    fn a_batch_length_below_the_minimum_is_an_error() {
        for len in [-1i32, 0, 13, 48] {
            let mut set = encode_batch(&BatchSpec::default());
            set[8..12].copy_from_slice(&len.to_be_bytes());
            let e = BatchIter::new(&set, false).next().unwrap().unwrap_err();
            assert_eq!(e.offset(), Some(0));
            match e.without_offset() {
                RecordError::Decode(d) => {
                    assert_eq!(d.kind(), &DecodeErrorKind::BadLength(len as i64))
                }
                other => panic!("{len}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_compression_codes_and_negative_record_counts_are_errors() {
        let set = encode_batch(&BatchSpec {
            base_offset: 8,
            attributes: 5,
            ..BatchSpec::default()
        });
        let e = BatchIter::new(&set, true).next().unwrap().unwrap_err();
        assert_eq!(e.without_offset(), &RecordError::UnknownCompression(5));
        assert_eq!(e.offset(), Some(8));
        let set = encode_batch(&BatchSpec {
            base_offset: 9,
            record_count: Some(-1),
            ..BatchSpec::default()
        });
        let e = BatchIter::new(&set, true).next().unwrap().unwrap_err();
        assert!(
            matches!(e.without_offset(), RecordError::Decode(_)),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(9));
    }

    /// A batch whose records section is `section`, with `count` records declared (at offset
    /// deltas `0..count`).
    fn with_section(section: &[u8], count: i32) -> (BatchHeader, Vec<u8>) {
        let set = encode_batch(&BatchSpec {
            records_section: Some(section),
            record_count: Some(count),
            last_offset_delta: Some(count.saturating_sub(1).max(0)),
            ..BatchSpec::default()
        });
        (header_of(&set), set[BATCH_HEADER_SIZE..].to_vec())
    }

    /// The first error of the records in `section`, with its location checked and removed.
    fn first_error(h: &BatchHeader, section: &[u8]) -> RecordError {
        let (offset, e) = first_located_error(h, section);
        assert!(offset >= h.base_offset, "{e}");
        e
    }

    /// The first error of the records in `section` and the offset it names.
    fn first_located_error(h: &BatchHeader, section: &[u8]) -> (i64, RecordError) {
        let mut it = RecordIter::new(h, section);
        let e = it.by_ref().find_map(Result::err).expect("an error");
        assert!(it.next().is_none(), "fused after an error");
        let offset = e.offset().expect("RecordIter errors carry an offset");
        assert!(
            e.to_string().contains(&format!("at offset {offset})")),
            "{e}"
        );
        (offset, e.without_offset().clone())
    }

    #[test]
    fn more_declared_records_than_present_is_an_error() {
        let section = encode_records(&sample_records());
        let (h, s) = with_section(&section, 4);
        assert_eq!(
            first_error(&h, &s),
            RecordError::Invalid("the batch holds fewer records than its record count")
        );
        // A count the bytes cannot hold (7 bytes a record at least) fails before any record,
        // naming the batch, and nothing is sized by it.
        for count in [i32::MAX, (s.len() / MIN_RECORD_SIZE) as i32 + 1] {
            let (h, s) = with_section(&section, count);
            let mut it = RecordIter::new(&h, &s);
            assert!(it.size_hint().1.unwrap() <= s.len() / MIN_RECORD_SIZE + 1);
            let e = it.next().unwrap().unwrap_err();
            assert!(
                matches!(e, RecordError::InBatch { base_offset: 0, .. }),
                "{e:?}"
            );
            assert_eq!(
                e.without_offset(),
                &RecordError::Invalid("record count larger than the records section can hold")
            );
            assert!(it.next().is_none());
        }
    }

    #[test]
    fn bytes_after_the_last_record_are_an_error() {
        let section = encode_records(&sample_records());
        let (h, s) = with_section(&section, 2);
        match first_error(&h, &s) {
            RecordError::Decode(d) => {
                assert!(matches!(d.kind(), DecodeErrorKind::TrailingBytes(_)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_truncated_record_is_an_error() {
        let section = encode_records(&sample_records());
        let (h, s) = with_section(&section[..section.len() - 1], 3);
        match first_error(&h, &s) {
            RecordError::Decode(d) => {
                assert!(matches!(d.kind(), DecodeErrorKind::Truncated { .. }))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oversized_and_overlong_length_varints_are_errors() {
        // (Each section is at least MIN_RECORD_SIZE bytes, else the record count is rejected
        // before any record is read.)
        // Length claims 1000 bytes, 5 present.
        let mut w = crate::protocol::wire::Writer::new();
        w.varint(1000);
        w.raw(&[0, 0, 0, 0, 0]);
        let (h, s) = with_section(&w.into_inner(), 1);
        assert!(matches!(first_error(&h, &s), RecordError::Decode(_)));
        // A six-byte varint.
        let (h, s) = with_section(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00], 1);
        match first_error(&h, &s) {
            RecordError::Decode(d) => assert_eq!(d.kind(), &DecodeErrorKind::VarintTooLong),
            other => panic!("{other:?}"),
        }
        // A negative record length.
        let (h, s) = with_section(&[0x01, 0, 0, 0, 0, 0, 0], 1);
        assert!(matches!(first_error(&h, &s), RecordError::Decode(_)));
    }

    /// A record body: attributes, tsDelta 0, offsetDelta 0, then `rest`; length-prefixed.
    fn record_with(rest: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8, 0, 0];
        body.extend_from_slice(rest);
        let mut w = crate::protocol::wire::Writer::new();
        w.varint(body.len() as i32);
        w.raw(&body);
        w.into_inner()
    }

    #[test]
    fn malformed_key_value_and_header_fields_are_errors() {
        let cases: [(&str, Vec<u8>); 6] = [
            // key length -2
            ("key length below -1", vec![0x03, 0x01, 0x00]),
            // key length 5 with 2 bytes
            ("key longer than the record", vec![0x0a, b'a', b'b']),
            // null key, null value, header count -1
            ("negative header count", vec![0x01, 0x01, 0x01]),
            // header count 1 with a null key
            ("null header key", vec![0x01, 0x01, 0x02, 0x01, 0x01]),
            // header value length -2
            ("header value below -1", vec![0x01, 0x01, 0x02, 0x00, 0x03]),
            // a byte after the headers
            ("bytes left in the record", vec![0x01, 0x01, 0x00, 0x00]),
        ];
        for (what, rest) in cases {
            let (h, s) = with_section(&record_with(&rest), 1);
            assert!(
                matches!(first_error(&h, &s), RecordError::Decode(_)),
                "{what}"
            );
        }
        // The same shape, well formed, parses.
        let (h, s) = with_section(&record_with(&[0x01, 0x01, 0x02, 0x02, b'k', 0x01]), 1);
        let r = RecordIter::new(&h, &s).next().unwrap().unwrap();
        assert_eq!(r.headers(&s).collect::<Vec<_>>(), [(&b"k"[..], None)]);
    }

    #[test]
    fn header_iter_stops_on_malformed_input_without_panicking() {
        // A key length of -2, then of -1 (null).
        assert_eq!(HeaderIter::new(&[0x03, b'a', 0x01], 5).count(), 0);
        assert_eq!(HeaderIter::new(&[0x01, 0x01], 5).count(), 0);
        // A key that is not UTF-8 is a key like any other, then a truncated header.
        let got: Vec<_> = HeaderIter::new(&[0x02, 0xff, 0x01, 0x7f], 5).collect();
        assert_eq!(got, [(&[0xff][..], None)]);
        assert_eq!(HeaderIter::new(&[0x02, b'a', 0x01, 0x7f], 5).count(), 1);
        assert_eq!(HeaderIter::new(&[], u32::MAX).count(), 0);
    }

    #[test]
    fn a_record_offset_that_overflows_is_an_error() {
        let recs: Vec<RecordSpec<'_>> = vec![(1, 0, None, None, &[])];
        let set = encode_batch(&BatchSpec {
            base_offset: i64::MAX,
            last_offset_delta: Some(0),
            records: &recs,
            ..BatchSpec::default()
        });
        let e = decode_all(&set, true).unwrap_err();
        assert_eq!(
            e.without_offset(),
            &RecordError::Invalid("record offset overflows int64")
        );
        assert_eq!(e.offset(), Some(i64::MAX), "saturating");
    }

    /// Walks the records of `section` the way the consumer does (fast path, then the careful
    /// one), checking what this module promises: the same results as plain `next`, offsets
    /// strictly increasing within `base..=base + lastOffsetDelta`, headers readable, and
    /// every error located.
    fn check_records(h: &BatchHeader, section: &[u8]) {
        let plain: Vec<_> = RecordIter::new(h, section).collect();
        let mut mixed = Vec::new();
        let mut it = RecordIter::new(h, section);
        loop {
            match it.next_fast() {
                Some(r) => mixed.push(Ok(r)),
                None => match it.next() {
                    Some(r) => mixed.push(r),
                    None => break,
                },
            }
        }
        assert_eq!(plain, mixed, "fast and careful paths agree");
        let mut prev = None;
        for r in &plain {
            match r {
                Ok(r) => {
                    assert!(prev < Some(r.offset), "offsets strictly increase");
                    assert!(r.offset >= h.base_offset && r.offset <= h.last_offset());
                    prev = Some(r.offset);
                    let _ = r.headers(section).count();
                }
                Err(e) => assert!(e.offset().is_some(), "record error without offset: {e}"),
            }
        }
    }

    #[test]
    fn every_truncation_and_byte_flip_of_valid_batches_is_handled_without_panic() {
        let recs = sample_records();
        let headers: &[(&str, Option<&[u8]>)] = &[("a", Some(b"1")), ("a", None)];
        let big = vec![7u8; 300]; // two-byte varint lengths
        let more: Vec<RecordSpec<'_>> = vec![(0, 1 << 40, Some(&big), None, headers)];
        let mut set = encode_batch(&BatchSpec {
            records: &recs,
            ..BatchSpec::default()
        });
        set.extend(encode_batch(&BatchSpec {
            base_offset: 3,
            records: &more,
            ..BatchSpec::default()
        }));
        let walk = |set: &[u8], check_crc: bool| {
            let _ = decode_all(set, check_crc);
            for b in BatchIter::new(set, check_crc) {
                match b {
                    Ok(b) => check_records(&b.header, b.records),
                    Err(e) => {
                        assert!(e.offset().is_some(), "batch error without offset: {e}");
                        break;
                    }
                }
            }
            // Also parse each batch's section as if it were cut, whatever the CRC says.
            for b in BatchIter::new(set, false).flatten() {
                for cut in 0..=b.records.len() {
                    check_records(&b.header, &b.records[..cut]);
                }
            }
        };
        for cut in 0..=set.len() {
            walk(&set[..cut], true);
        }
        let mut flipped = set.clone();
        for i in 0..set.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                flipped[i] = v;
                walk(&flipped, false);
            }
            flipped[i] = set[i];
        }
    }

    #[test]
    fn uncompressed_copy_respects_the_limit() {
        let mut out = vec![1, 2];
        decompress(Compression::None, b"abc", &mut out, 3).unwrap();
        assert_eq!(out, [1, 2, b'a', b'b', b'c']);
        assert_eq!(
            decompress(Compression::None, b"abcd", &mut out, 3),
            Err(RecordError::DecompressedTooLarge { limit: 3 })
        );
        assert_eq!(out.len(), 5, "left as it was");
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn gzip_batches_decode() {
        let recs = sample_records();
        let z = gzip(&encode_records(&recs));
        assert_sample(&compressed_batch(Compression::Gzip, &z, &recs), 40);
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        let z = gzip(&vec![0u8; 10 * MIB]);
        assert!(z.len() < 100 * 1024);
        let mut out = Vec::new();
        assert_eq!(
            decompress(Compression::Gzip, &z, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { limit: MIB })
        );
        assert!(out.is_empty());
        // Exactly at the limit is fine.
        decompress(Compression::Gzip, &gzip(&vec![0u8; MIB]), &mut out, MIB).unwrap();
        assert_eq!(out.len(), MIB);
    }

    #[cfg(all(feature = "lz4", feature = "gzip", feature = "snappy"))]
    #[test]
    fn decompress_into_overwrites_scratch_and_keeps_content_and_limits() {
        let a: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..70_000u32).map(|i| (i % 13) as u8).collect();
        // A recycled buffer: 300 KiB of garbage, all of it scratch.
        let mut out = vec![0xAB; 300 * 1024];
        let mut filled = 0;
        decompress_into(Compression::Lz4, &lz4(&a), &mut out, &mut filled, MIB).unwrap();
        assert_eq!(filled, a.len());
        decompress_into(Compression::Gzip, &gzip(&b), &mut out, &mut filled, MIB).unwrap();
        decompress_into(Compression::None, &b[..10], &mut out, &mut filled, MIB).unwrap();
        decompress_into(
            Compression::Snappy,
            &snap::raw::Encoder::new().compress_vec(&a[..5000]).unwrap(),
            &mut out,
            &mut filled,
            MIB,
        )
        .unwrap();
        let mut want = a.clone();
        want.extend_from_slice(&b);
        want.extend_from_slice(&b[..10]);
        want.extend_from_slice(&a[..5000]);
        assert_eq!(&out[..filled], &want[..]);
        // Past the limit: an error, and the content so far is untouched.
        let before = filled;
        let e = decompress_into(Compression::Lz4, &lz4(&a), &mut out, &mut filled, 1000);
        assert_eq!(e, Err(RecordError::DecompressedTooLarge { limit: 1000 }));
        assert_eq!(filled, before);
        assert_eq!(&out[..filled], &want[..]);
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn corrupt_gzip_is_a_decompress_error() {
        let mut z = gzip(b"hello hello hello");
        z.truncate(z.len() - 6);
        let mut out = Vec::new();
        let e = decompress(Compression::Gzip, &z, &mut out, MIB).unwrap_err();
        assert!(
            matches!(e, RecordError::Decompress { codec: "gzip", .. }),
            "{e:?}"
        );
        assert!(out.is_empty());
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_raw_blocks_decode() {
        let recs = sample_records();
        let z = snap::raw::Encoder::new()
            .compress_vec(&encode_records(&recs))
            .unwrap();
        assert_sample(&compressed_batch(Compression::Snappy, &z, &recs), 40);
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_xerial_framing_decodes_across_chunks() {
        let recs = sample_records();
        let section = encode_records(&recs);
        for chunk in [4, 7, section.len()] {
            let z = xerial(&section, chunk);
            assert_sample(&compressed_batch(Compression::Snappy, &z, &recs), 40);
        }
        // Two concatenated xerial streams.
        let z = [xerial(&section[..10], 32), xerial(&section[10..], 32)].concat();
        assert_sample(&compressed_batch(Compression::Snappy, &z, &recs), 40);
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_standard_framing_decodes() {
        use std::io::Write;
        let recs = sample_records();
        let mut e = snap::write::FrameEncoder::new(Vec::new());
        e.write_all(&encode_records(&recs)).unwrap();
        let z = e.into_inner().unwrap();
        assert_sample(&compressed_batch(Compression::Snappy, &z, &recs), 40);
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_sizes_are_checked_before_allocating() {
        let zeros = vec![0u8; 2 * MIB];
        let mut out = Vec::new();
        let raw = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &raw, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { limit: MIB })
        );
        // A raw block declaring 4 GiB in a few bytes: more than 6 bytes can expand to.
        let lie = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            decompress(Compression::Snappy, &lie, &mut out, MIB),
            Err(RecordError::Decompress {
                codec: "snappy",
                ..
            })
        ));
        // Xerial: the budget is shared by all chunks.
        let z = xerial(&zeros, 64 * 1024);
        assert!(matches!(
            decompress(Compression::Snappy, &z, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { .. })
        ));
        assert!(out.is_empty());
        decompress(Compression::Snappy, &z, &mut out, 2 * MIB).unwrap();
        assert_eq!(out, zeros);
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn malformed_xerial_chunks_are_errors() {
        let good = xerial(b"some data here", 64);
        let mut out = Vec::new();
        for bad in [
            good[..12].to_vec(),                                // truncated header
            good[..18].to_vec(),                                // truncated chunk length
            good[..good.len() - 1].to_vec(),                    // chunk longer than what is left
            [&good[..16], &(-1i32).to_be_bytes()[..]].concat(), // negative chunk length
        ] {
            let e = decompress(Compression::Snappy, &bad, &mut out, MIB).unwrap_err();
            assert!(
                matches!(
                    e,
                    RecordError::Decompress {
                        codec: "snappy",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }

    #[cfg(feature = "lz4")]
    #[test]
    fn lz4_frames_decode() {
        let recs = sample_records();
        let z = lz4(&encode_records(&recs));
        assert_sample(&compressed_batch(Compression::Lz4, &z, &recs), 40);
    }

    #[cfg(feature = "lz4")]
    fn lz4_with(data: &[u8], info: lz4_flex::frame::FrameInfo) -> Vec<u8> {
        use std::io::Write;
        let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// Kafka's frames take the direct path, every other kind the general decoder: both
    /// give the same bytes and the same limit errors, and a Kafka-style frame cut short
    /// anywhere is an error (never a panic).
    #[cfg(feature = "lz4")]
    #[test]
    fn lz4_frames_of_every_kind_decode_alike_within_the_limit() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};
        let mut text = Vec::new();
        for i in 0..40_000u32 {
            text.extend_from_slice(format!("record {} value {}; ", i, i % 97).as_bytes());
        }
        // Incompressible bytes become uncompressed blocks.
        let mut x = 0x9E37_79B9u32;
        let noise: Vec<u8> = (0..300_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let infos = [
            FrameInfo::new(),
            FrameInfo::new().block_size(BlockSize::Max256KB),
            FrameInfo::new().block_size(BlockSize::Max4MB),
            FrameInfo::new().content_size(Some(text.len() as u64)),
            FrameInfo::new().block_mode(BlockMode::Linked),
            FrameInfo::new().block_checksums(true),
            FrameInfo::new().content_checksum(true),
        ];
        for (k, info) in infos.iter().enumerate() {
            for data in [&text[..], &noise[..], &text[..10], &[][..]] {
                let content_size = if info.content_size.is_some() {
                    Some(data.len() as u64)
                } else {
                    None
                };
                let z = lz4_with(data, info.clone().content_size(content_size));
                // Room reserved up front: growing would move the buffer, which a limit of
                // exactly the output does not leave room for.
                let mut out = vec![0xEE; 1000];
                out.reserve(data.len());
                let mut filled = 3;
                decompress_into(Compression::Lz4, &z, &mut out, &mut filled, data.len()).unwrap();
                assert_eq!(&out[3..filled], data, "frame kind {k}");
                if !data.is_empty() {
                    let mut out = Vec::new();
                    assert_eq!(
                        decompress(Compression::Lz4, &z, &mut out, data.len() - 1),
                        Err(RecordError::DecompressedTooLarge {
                            limit: data.len() - 1
                        }),
                        "frame kind {k}"
                    );
                    assert!(out.is_empty());
                }
                // As in the Java client, one frame is read and what follows is ignored.
                let two = [z.clone(), z.clone()].concat();
                let mut out = Vec::new();
                decompress(Compression::Lz4, &two, &mut out, data.len()).unwrap();
                assert_eq!(out, data, "frame kind {k}");
                // Cut short anywhere, a Kafka-style frame is an error. (The general
                // decoder, lz4_flex, takes a frame cut at a block boundary for a whole
                // one; the batch's record count then catches it.)
                for cut in (1..z.len()).step_by(z.len() / 200 + 1).chain([z.len() - 1]) {
                    if data.is_empty() || k >= 4 {
                        break;
                    }
                    let mut out = Vec::new();
                    let r = decompress(Compression::Lz4, &z[..cut], &mut out, MIB);
                    assert!(r.is_err(), "frame kind {k} cut at {cut} of {}", z.len());
                }
            }
        }
    }

    #[cfg(feature = "lz4")]
    #[test]
    fn an_lz4_bomb_stops_at_the_limit() {
        let z = lz4(&vec![0u8; 4 * MIB]);
        let mut out = Vec::new();
        assert_eq!(
            decompress(Compression::Lz4, &z, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { limit: MIB })
        );
        let e = decompress(Compression::Lz4, &z[..z.len() / 2], &mut out, 8 * MIB).unwrap_err();
        assert!(
            matches!(e, RecordError::Decompress { codec: "lz4", .. }),
            "{e:?}"
        );
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn zstd_frames_decode() {
        let recs = sample_records();
        let section = encode_records(&recs);
        let z = zstd(&section);
        assert_sample(&compressed_batch(Compression::Zstd, &z, &recs), 40);
        // Concatenated frames around a skippable frame.
        let mut skippable = 0x184D_2A50u32.to_le_bytes().to_vec();
        skippable.extend_from_slice(&3u32.to_le_bytes());
        skippable.extend_from_slice(b"xyz");
        let z = [zstd(&section[..5]), skippable, zstd(&section[5..])].concat();
        assert_sample(&compressed_batch(Compression::Zstd, &z, &recs), 40);
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn a_zstd_frame_header_tells_the_history_its_decoder_keeps() {
        use super::codec::zstd_frame_history as history;
        let magic = 0xFD2F_B528u32.to_le_bytes();
        let frame = |rest: &[u8]| [&magic[..], rest].concat();
        // Window descriptors: exponent 10 (1 MiB), with mantissa 3 (+3/8), exponent 30.
        assert_eq!(history(&frame(&[0x00, 0x50])), Some(1 << 20));
        assert_eq!(
            history(&frame(&[0x00, 0x53])),
            Some((1 << 20) + 3 * (1 << 17))
        );
        assert_eq!(history(&frame(&[0x00, 0xF0])), Some(1 << 40));
        // A content size smaller than the window bounds it: 2 bytes (+256), 4, 8.
        assert_eq!(history(&frame(&[0x40, 0x50, 0x10, 0x00])), Some(256 + 16));
        assert_eq!(history(&frame(&[0x80, 0x50, 5, 0, 0, 0])), Some(5));
        assert_eq!(
            history(&frame(&[0xC0, 0x50, 0, 0, 0, 0, 1, 0, 0, 0])),
            Some(1 << 20)
        );
        // Single segment: the content size is the window (1-byte field), after a
        // 1-byte dictionary id.
        assert_eq!(history(&frame(&[0x21, 7, 200])), Some(200));
        // Not a whole zstd frame header: the decoder's business.
        assert_eq!(history(&frame(&[0x00])), None);
        assert_eq!(history(&frame(&[0x80, 0x50, 5, 0])), None);
        assert_eq!(history(&0x184D_2A50u32.to_le_bytes()), None);
        assert_eq!(history(b"not zstd"), None);
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn a_zstd_frame_whose_window_exceeds_the_limit_and_8_mib_is_too_large_before_decoding() {
        // A 16 MiB window over 3 RLE blocks of 100 zeros: tiny output, but a decoder may
        // keep 16 MiB of history; the limit is 1 MiB.
        let mut z = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x70];
        for last in [0u32, 0, 1] {
            z.extend_from_slice(&(last | 1 << 1 | 100 << 3).to_le_bytes()[..3]);
            z.push(0);
        }
        let mut out = Vec::new();
        assert_eq!(
            decompress(Compression::Zstd, &z, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { limit: MIB })
        );
        assert!(out.capacity() == 0);
        // A 16 MiB limit takes it; so does a 1 MiB limit with an 8 MiB window, as a
        // producer at zstd level 19 would write.
        decompress(Compression::Zstd, &z, &mut out, 16 * MIB).unwrap();
        assert_eq!(out, vec![0u8; 300]);
        out.clear();
        z[5] = 0x68;
        decompress(Compression::Zstd, &z, &mut out, MIB).unwrap();
        assert_eq!(out, vec![0u8; 300]);
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn a_zstd_bomb_stops_at_the_limit() {
        let z = zstd(&vec![0u8; 2 * MIB]);
        let mut out = Vec::new();
        assert_eq!(
            decompress(Compression::Zstd, &z, &mut out, MIB),
            Err(RecordError::DecompressedTooLarge { limit: MIB })
        );
        let e = decompress(Compression::Zstd, b"not zstd", &mut out, MIB).unwrap_err();
        assert!(
            matches!(e, RecordError::Decompress { codec: "zstd", .. }),
            "{e:?}"
        );
    }

    #[test]
    fn compressed_batches_survive_every_truncation_without_panic() {
        let recs = sample_records();
        let section = encode_records(&recs);
        #[cfg_attr(
            not(any(
                feature = "gzip",
                feature = "snappy",
                feature = "lz4",
                feature = "zstd"
            )),
            allow(unused_mut)
        )]
        let mut blobs: Vec<(Compression, Vec<u8>)> = vec![(Compression::None, section.clone())];
        #[cfg(feature = "gzip")]
        blobs.push((Compression::Gzip, gzip(&section)));
        #[cfg(feature = "snappy")]
        blobs.push((Compression::Snappy, xerial(&section, 8)));
        #[cfg(feature = "lz4")]
        blobs.push((Compression::Lz4, lz4(&section)));
        #[cfg(feature = "zstd")]
        blobs.push((Compression::Zstd, zstd(&section)));
        let mut out = Vec::new();
        for (c, blob) in blobs {
            for cut in 0..blob.len() {
                out.clear();
                if decompress(c, &blob[..cut], &mut out, MIB).is_ok() {
                    let h = header_of(&compressed_batch(c, &blob, &recs));
                    let _ = RecordIter::new(&h, &out).count();
                }
            }
        }
    }

    #[cfg(not(feature = "zstd"))]
    #[test]
    fn a_disabled_codec_is_reported_by_name() {
        let e = decompress(Compression::Zstd, b"x", &mut Vec::new(), MIB).unwrap_err();
        assert_eq!(e, RecordError::CodecDisabled("zstd"));
        assert!(e.to_string().contains("`zstd` cargo feature"));
    }

    #[test]
    fn errors_read_precisely() {
        let e = RecordError::CrcMismatch {
            base_offset: 5,
            expected: 1,
            computed: 2,
        };
        assert_eq!(
            e.to_string(),
            "record batch at offset 5 is corrupt: stored CRC-32C 0x00000001, computed 0x00000002"
        );
        let e: RecordError = DecodeError::new(DecodeErrorKind::VarintTooLong)
            .context("Record.length")
            .into();
        assert_eq!(
            e.to_string(),
            "malformed record batch: Record.length: varint too long"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            RecordError::DecompressedTooLarge { limit: 10 }.to_string(),
            "record batch decompresses to more than the 10-byte limit"
        );
    }

    #[test]
    fn compression_codes_round_trip() {
        for code in 0..5 {
            assert_eq!(Compression::from_code(code).unwrap().code(), code);
        }
        assert_eq!(
            Compression::from_code(7),
            Err(RecordError::UnknownCompression(7))
        );
    }

    #[test]
    fn the_fast_record_path_agrees_with_the_careful_one_on_mutated_input() {
        let headers: &[(&str, Option<&[u8]>)] = &[("seq", Some(b"12")), ("dup", None)];
        let recs: Vec<testing::RecordSpec<'_>> = (0..20)
            .map(|i| {
                let v: &[u8] = if i % 3 == 0 { &[0xAB; 200] } else { b"value" };
                (
                    i,
                    i as i64 * 1000,
                    (i % 2 == 0).then_some(&b"k"[..]),
                    Some(v),
                    if i % 4 == 0 { headers } else { &[][..] },
                )
            })
            .collect();
        let clean = testing::encode_records(&recs);
        let header = BatchHeader {
            base_offset: 100,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 19,
            base_timestamp: 5,
            max_timestamp: 5,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: 20,
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut fast_hits = 0;
        for round in 0..3000 {
            let mut buf = clean.clone();
            if round > 0 {
                for _ in 0..(rand() % 4 + 1) {
                    let at = (rand() as usize) % buf.len();
                    buf[at] = rand() as u8;
                }
            }
            let mut careful = RecordIter::new(&header, &buf);
            let fast = RecordIter::new(&header, &buf);
            let mut fast = fast;
            loop {
                let f = fast.record_fast();
                let c = careful.record();
                match (f, c) {
                    (Some((rf, end, delta)), Ok(rc)) => {
                        fast_hits += 1;
                        assert_eq!(rf, rc);
                        assert_eq!((end, delta), (careful.pos, careful.prev_delta));
                        fast.pos = end;
                        fast.prev_delta = delta;
                    }
                    (Some(_), Err(e)) => {
                        panic!("fast path accepted what the careful one rejects: {e}")
                    }
                    (None, _) => break,
                }
                if careful.pos == buf.len() {
                    break;
                }
            }
        }
        assert!(fast_hits > 20, "the fast path was exercised");
    }

    // ---- Decompression memory (invariant 5) ----

    /// Capacity a call may leave in `out` beyond `start_len + limit`.
    const SLACK: usize = 64 * 1024;

    /// Data that compresses well but not to nothing, so codecs emit many blocks.
    fn compressible(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i / 7) % 251) as u8).collect()
    }

    /// Checks, for one codec (`z` compresses), that `decompress` keeps `out`'s capacity
    /// within `start_len + limit + SLACK` on success, and leaves `out` exactly as it was,
    /// capacity included, after a bomb past the limit and after a corrupt input.
    #[cfg_attr(
        not(any(
            feature = "gzip",
            feature = "snappy",
            feature = "lz4",
            feature = "zstd"
        )),
        allow(dead_code)
    )]
    fn check_capacity(c: Compression, z: impl Fn(&[u8]) -> Vec<u8>) {
        let name = c.name();
        // Exactly at the limit, into an empty buffer and into a full one: never doubled
        // past the limit (a non-power-of-two limit shows `Vec`'s doubling).
        let limit = MIB + 12_345;
        let data = compressible(limit);
        let blob = z(&data);
        // A full buffer moves as it grows, holding its old allocation meanwhile: the limit
        // has to leave room for that too.
        let mut full = vec![7u8; 3 * MIB];
        assert_eq!(
            decompress(c, &blob, &mut full, limit),
            Err(RecordError::DecompressedTooLarge { limit }),
            "{name}: moving 3 MiB within a limit of 1 MiB"
        );
        assert_eq!((full.len(), full.capacity()), (3 * MIB, 3 * MIB), "{name}");
        for start_len in [0, 3 * MIB] {
            let mut out = vec![7u8; start_len];
            decompress(c, &blob, &mut out, limit + start_len).unwrap();
            assert_eq!(out.len(), start_len + limit, "{name}");
            assert!(out[start_len..] == data[..], "{name}");
            assert!(
                out.capacity() <= start_len + limit + SLACK + 1,
                "{name}: capacity {} for {start_len} + {limit}",
                out.capacity()
            );
        }
        // A bomb: far more than the limit from a small input.
        let bomb = z(&vec![0u8; 8 * MIB]);
        assert!(bomb.len() < 512 * 1024, "{name}: {}", bomb.len());
        for start_len in [0, 3 * MIB] {
            let mut out = vec![7u8; start_len];
            let before = out.capacity();
            assert_eq!(
                decompress(c, &bomb, &mut out, MIB),
                Err(RecordError::DecompressedTooLarge { limit: MIB }),
                "{name}"
            );
            assert_eq!(out.len(), start_len, "{name}");
            assert_eq!(out.capacity(), before, "{name}: capacity restored");
        }
        // A corrupt input that fails after much output: cut short, or damaged at its end.
        let mut damaged = blob.clone();
        let n = damaged.len();
        damaged[n - 40..].iter_mut().for_each(|b| *b ^= 0x5a);
        for bad in [&blob[..blob.len() * 3 / 4], &damaged[..]] {
            for start_len in [0, 3 * MIB] {
                let mut out = vec![7u8; start_len];
                let before = out.capacity();
                let e = decompress(c, bad, &mut out, 8 * MIB).unwrap_err();
                assert!(matches!(e, RecordError::Decompress { .. }), "{name}: {e:?}");
                assert_eq!(out.len(), start_len, "{name}");
                assert_eq!(out.capacity(), before, "{name}: capacity restored");
                assert!(out.iter().all(|&b| b == 7), "{name}: contents kept");
            }
        }
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn gzip_output_capacity_is_bounded_by_the_limit_and_restored_on_error() {
        check_capacity(Compression::Gzip, gzip);
    }

    #[cfg(feature = "lz4")]
    #[test]
    fn lz4_output_capacity_is_bounded_by_the_limit_and_restored_on_error() {
        check_capacity(Compression::Lz4, lz4);
    }

    #[cfg(any(feature = "zstd", feature = "zstd-native"))]
    #[test]
    fn zstd_output_capacity_is_bounded_by_the_limit_and_restored_on_error() {
        check_capacity(Compression::Zstd, zstd);
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_output_capacity_is_bounded_by_the_limit_and_restored_on_error() {
        // Xerial, as the Java producer writes it; the standard framing; and one raw block.
        check_capacity(Compression::Snappy, |d| xerial(d, 32 * 1024));
        check_capacity(Compression::Snappy, |d| {
            use std::io::Write;
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(d).unwrap();
            e.into_inner().unwrap()
        });
        check_capacity(Compression::Snappy, |d| {
            snap::raw::Encoder::new().compress_vec(d).unwrap()
        });
    }

    #[test]
    fn uncompressed_copy_capacity_is_bounded_by_the_limit() {
        let mut out = vec![7u8; 3 * MIB];
        let input = vec![1u8; MIB + 5];
        // Growing moves the 3 MiB, which the limit must leave room for.
        assert_eq!(
            decompress(Compression::None, &input, &mut out, MIB + 5),
            Err(RecordError::DecompressedTooLarge { limit: MIB + 5 })
        );
        decompress(Compression::None, &input, &mut out, 4 * MIB + 5).unwrap();
        assert_eq!(out.len(), 4 * MIB + 5);
        assert!(out.capacity() <= 4 * MIB + 5 + SLACK, "{}", out.capacity());
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn a_raw_snappy_block_cannot_declare_more_than_it_can_expand_to() {
        // Six bytes declaring 512 MiB, under a 1 GiB limit: rejected before allocating.
        let mut lie = Vec::new();
        let mut n = 512 * MIB;
        while n >= 0x80 {
            lie.push((n as u8) | 0x80);
            n >>= 7;
        }
        lie.push(n as u8);
        lie.push(0x00); // a one-byte literal tag
        assert_eq!(snap::raw::decompress_len(&lie).unwrap(), 512 * MIB);
        let mut out = Vec::new();
        let e = decompress(Compression::Snappy, &lie, &mut out, 1024 * MIB).unwrap_err();
        assert!(
            matches!(e, RecordError::Decompress { codec: "snappy", ref reason }
                if reason.contains("declares 536870912")),
            "{e:?}"
        );
        assert_eq!(out.capacity(), 0, "nothing allocated");
        // The same inside xerial framing.
        let mut x = xerial(b"", 1);
        x.extend_from_slice(&(lie.len() as i32).to_be_bytes());
        x.extend_from_slice(&lie);
        let e = decompress(Compression::Snappy, &x, &mut out, 1024 * MIB).unwrap_err();
        assert!(matches!(e, RecordError::Decompress { .. }), "{e:?}");
        assert_eq!(out.capacity(), 0, "nothing allocated");
        // The bound holds for the densest blocks a compressor writes (long runs of copies
        // of 64 bytes), so it never rejects a valid block.
        for data in [
            vec![0u8; 4 * MIB],
            compressible(MIB),
            b"a".to_vec(),
            Vec::new(),
        ] {
            let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
            assert!(data.len() <= codec::max_raw_snappy_len(raw.len()));
            out.clear();
            decompress(Compression::Snappy, &raw, &mut out, 8 * MIB).unwrap();
            assert_eq!(out, data);
        }
    }

    // ---- Offsets within a batch (invariant 6) ----

    /// A batch at base offset 100 whose records have `deltas`, with `last` as
    /// `lastOffsetDelta`; each record's value is its delta.
    fn batch_with_deltas(deltas: &[i32], last: i32) -> Vec<u8> {
        let values: Vec<String> = deltas.iter().map(i32::to_string).collect();
        let recs: Vec<RecordSpec<'_>> = deltas
            .iter()
            .zip(&values)
            .map(|(&d, v)| (d, 0, None, Some(v.as_bytes()), &[][..]))
            .collect();
        encode_batch(&BatchSpec {
            base_offset: 100,
            last_offset_delta: Some(last),
            records: &recs,
            ..BatchSpec::default()
        })
    }

    /// The offsets the consumer's loop (fast path, then careful path) delivers from the
    /// first batch of `set`, and the error that stops it.
    fn deliver(set: &[u8]) -> (Vec<i64>, Option<RecordError>) {
        let b = BatchIter::new(set, true).next().unwrap().unwrap();
        let mut it = RecordIter::new(&b.header, b.records);
        let mut offsets = Vec::new();
        loop {
            let r = match it.next_fast() {
                Some(r) => r,
                None => match it.next() {
                    None => return (offsets, None),
                    Some(Ok(r)) => r,
                    Some(Err(e)) => return (offsets, Some(e)),
                },
            };
            offsets.push(r.offset);
        }
    }

    #[test]
    fn record_offsets_must_strictly_increase_within_the_last_offset_delta() {
        // Compaction leaves gaps but keeps order: fine.
        let (offsets, e) = deliver(&batch_with_deltas(&[0, 2, 7], 9));
        assert_eq!((offsets, e), (vec![100, 102, 107], None));
        for (deltas, last, delivered, at, what) in [
            (
                &[0, 2, 1][..],
                2,
                vec![100, 102],
                101,
                "record offset is below the previous record's",
            ),
            (
                &[0, 1, 1][..],
                2,
                vec![100, 101],
                101,
                "record offset repeats the previous record's",
            ),
            (
                &[0, 1, 5][..],
                3,
                vec![100, 101],
                105,
                "record offset delta exceeds the batch's lastOffsetDelta",
            ),
            (&[-1, 0][..], 0, vec![], 99, "negative record offset delta"),
        ] {
            let set = batch_with_deltas(deltas, last);
            let (offsets, e) = deliver(&set);
            let e = e.expect("an error");
            assert_eq!(offsets, delivered, "{what}");
            assert_eq!(e.without_offset(), &RecordError::OffsetOrder(what));
            assert_eq!(e.offset(), Some(at), "{what}");
            assert!(
                e.to_string().contains(&format!("record at offset {at}")),
                "{e}"
            );
            // The plain iterator (careful path after a fast-path refusal) says the same.
            let b = BatchIter::new(&set, true).next().unwrap().unwrap();
            assert_eq!(
                RecordIter::new(&b.header, b.records).find_map(Result::err),
                Some(e)
            );
            // And the fast path refuses the record rather than accepting it.
            let mut it = RecordIter::new(&b.header, b.records);
            for _ in 0..offsets.len() {
                assert!(it.next_fast().is_some());
            }
            assert!(it.next_fast().is_none(), "{what}");
        }
    }

    #[test]
    fn a_negative_last_offset_delta_is_an_error_after_the_crc_check() {
        let recs: Vec<RecordSpec<'_>> = vec![(0, 0, None, None, &[])];
        let mut set = encode_batch(&BatchSpec {
            base_offset: 77,
            last_offset_delta: Some(-1),
            records: &recs,
            ..BatchSpec::default()
        });
        let e = BatchIter::new(&set, true).next().unwrap().unwrap_err();
        assert_eq!(e.offset(), Some(77));
        assert_eq!(
            e.without_offset(),
            &RecordError::OffsetOrder("negative lastOffsetDelta")
        );
        assert!(e.to_string().contains("record batch at offset 77"), "{e}");
        // A corrupt batch is reported as corrupt first.
        let n = set.len();
        set[n - 1] ^= 1;
        assert!(matches!(
            BatchIter::new(&set, true).next(),
            Some(Err(RecordError::CrcMismatch {
                base_offset: 77,
                ..
            }))
        ));
        assert!(BatchIter::new(&set, false).next().unwrap().is_err());
    }

    // ---- Header keys are bytes (invariant 4) ----

    #[test]
    fn a_header_key_that_is_not_utf8_is_delivered_with_the_records_after_it() {
        let mut w = crate::protocol::wire::Writer::new();
        testing::encode_record(&mut w, &(0, 0, None, Some(b"a"), &[("k", Some(b"1"))]));
        let odd: &[(&[u8], Option<&[u8]>)] = &[(&[0xff, 0xfe, b'k'], Some(b"2")), (b"", None)];
        testing::encode_raw_record(&mut w, &(1, 0, None, Some(b"b"), odd));
        testing::encode_record(&mut w, &(2, 0, None, Some(b"c"), &[("k", Some(b"3"))]));
        let section = w.into_inner();
        let set = encode_batch(&BatchSpec {
            base_offset: 10,
            records_section: Some(&section),
            record_count: Some(3),
            last_offset_delta: Some(2),
            ..BatchSpec::default()
        });
        let (offsets, e) = deliver(&set);
        assert_eq!((offsets, e), (vec![10, 11, 12], None));
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let recs: Vec<RecordRef> = RecordIter::new(&b.header, b.records)
            .collect::<Result<_, _>>()
            .unwrap();
        let headers: Vec<_> = recs[1].headers(b.records).collect();
        assert_eq!(headers, odd);
        assert_eq!(recs[2].value(b.records), Some(&b"c"[..]));
    }

    // ---- Errors say where (invariant 7) ----

    #[test]
    fn record_errors_name_the_record_offset_or_the_batch_offset_plus_index() {
        // Deltas 0 and 5, then a record cut short before its offset delta: base + index.
        let recs: Vec<RecordSpec<'_>> = vec![
            (0, 0, None, Some(b"value"), &[]),
            (5, 0, None, Some(b"value"), &[]),
        ];
        let mut section = encode_records(&recs);
        section.extend_from_slice(&[0x08, 0x00, 0x00]); // length 4, 2 bytes present
        let set = encode_batch(&BatchSpec {
            base_offset: 1000,
            records_section: Some(&section),
            record_count: Some(3),
            last_offset_delta: Some(9),
            ..BatchSpec::default()
        });
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let (at, e) = first_located_error(&b.header, b.records);
        assert!(matches!(e, RecordError::Decode(_)), "{e:?}");
        assert_eq!(at, 1002, "base offset + index 2");
        // A record whose offset delta was read: its own offset.
        let mut section = encode_records(&recs[..1]);
        section.extend(record_with_delta(7, &[0x0a, b'a', b'b'])); // key longer than it
        let set = encode_batch(&BatchSpec {
            base_offset: 1000,
            records_section: Some(&section),
            record_count: Some(2),
            last_offset_delta: Some(9),
            ..BatchSpec::default()
        });
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let (at, e) = first_located_error(&b.header, b.records);
        assert!(matches!(e, RecordError::Decode(_)), "{e:?}");
        assert_eq!(at, 1007, "base offset + the record's delta");
        // Bytes after the last record: the batch.
        let mut section = encode_records(&recs);
        section.push(0);
        let set = encode_batch(&BatchSpec {
            base_offset: 1000,
            records_section: Some(&section),
            record_count: Some(2),
            last_offset_delta: Some(5),
            ..BatchSpec::default()
        });
        let b = BatchIter::new(&set, true).next().unwrap().unwrap();
        let e = RecordIter::new(&b.header, b.records)
            .find_map(Result::err)
            .unwrap();
        assert!(
            matches!(
                e,
                RecordError::InBatch {
                    base_offset: 1000,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// A record body: attributes, tsDelta 0, offset delta `delta`, then `rest`.
    fn record_with_delta(delta: i32, rest: &[u8]) -> Vec<u8> {
        let mut body = crate::protocol::wire::Writer::new();
        body.i8(0);
        body.varlong(0);
        body.varint(delta);
        body.raw(rest);
        let body = body.into_inner();
        let mut w = crate::protocol::wire::Writer::new();
        w.varint(body.len() as i32);
        w.raw(&body);
        w.into_inner()
    }

    #[test]
    fn every_batch_iter_error_names_the_batch() {
        let set = encode_batch(&BatchSpec {
            base_offset: 42,
            ..BatchSpec::default()
        });
        let mut cases: Vec<Vec<u8>> = Vec::new();
        let mut bad_length = set.clone();
        bad_length[8..12].copy_from_slice(&13i32.to_be_bytes());
        cases.push(bad_length);
        let mut magic = set.clone();
        magic[16] = 1;
        cases.push(magic);
        let mut short_v2 = set.clone();
        short_v2[8..12].copy_from_slice(&48i32.to_be_bytes());
        cases.push(short_v2);
        let mut codec = set.clone();
        codec[22] |= 0x07;
        cases.push(codec);
        let mut count = set.clone();
        count[57..61].copy_from_slice(&(-2i32).to_be_bytes());
        cases.push(count);
        let mut last = set.clone();
        last[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        cases.push(last);
        for case in cases {
            let e = BatchIter::new(&case, false).next().unwrap().unwrap_err();
            assert_eq!(e.offset(), Some(42), "{e:?}");
            assert!(e.to_string().contains("offset 42"), "{e}");
        }
        // Decompression does not know the batch; its caller names it.
        let e = RecordError::DecompressedTooLarge { limit: 1 }.in_batch(42);
        assert_eq!(e.offset(), Some(42));
        assert_eq!(e.clone().in_batch(7), e, "located once");
        assert_eq!(
            e.to_string(),
            "record batch decompresses to more than the 1-byte limit (record batch at offset 42)"
        );
    }
}
