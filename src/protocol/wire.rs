//! Wire primitives: a bounds-checked [`Reader`] and a one-pass [`Writer`].
//!
//! Every length or count read from the wire is checked against the bytes that remain
//! before anything is allocated, so a hostile length field can never make us reserve
//! more memory than the frame we already hold.

use std::fmt;

/// Why a frame or a record batch could not be decoded.
///
/// It names what was being read (`context`, innermost last) so that an error in a
/// deeply nested field reads like `FetchResponse.responses: FetchableTopicResponse.partitions: truncated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    context: Vec<&'static str>,
}

/// The kinds of [`DecodeError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// Fewer bytes than the field needs.
    Truncated {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length or count that is negative (and not the null marker) or larger than what remains.
    BadLength(i64),
    /// A varint longer than its type allows.
    VarintTooLong,
    /// A string that is not UTF-8.
    InvalidUtf8,
    /// Bytes left over after a message that should have ended.
    TrailingBytes(usize),
    /// Anything else, with a fixed description.
    Invalid(&'static str),
}

impl DecodeError {
    /// A new error of `kind` with no context yet.
    pub fn new(kind: DecodeErrorKind) -> Self {
        DecodeError {
            kind,
            context: Vec::new(),
        }
    }

    /// An [`DecodeErrorKind::Invalid`] error.
    pub fn invalid(what: &'static str) -> Self {
        Self::new(DecodeErrorKind::Invalid(what))
    }

    /// Adds the name of the enclosing field or structure.
    pub fn context(mut self, what: &'static str) -> Self {
        self.context.push(what);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> &DecodeErrorKind {
        &self.kind
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.context.iter().rev() {
            write!(f, "{c}: ")?;
        }
        match &self.kind {
            DecodeErrorKind::Truncated { needed, remaining } => {
                write!(f, "truncated: needed {needed} bytes, {remaining} left")
            }
            DecodeErrorKind::BadLength(n) => write!(f, "bad length or count {n}"),
            DecodeErrorKind::VarintTooLong => f.write_str("varint too long"),
            DecodeErrorKind::InvalidUtf8 => f.write_str("string is not UTF-8"),
            DecodeErrorKind::TrailingBytes(n) => write!(f, "{n} unexpected trailing bytes"),
            DecodeErrorKind::Invalid(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes an unsigned base-128 varint of at most `max` bytes (5 for 32-bit values, 10
/// for 64-bit) at `buf[*p..]`, advancing `*p`. `None` when it is truncated or overlong
/// ([`varint_error`] says which). Fast paths for one and two bytes: record lengths,
/// deltas and compact lengths are almost always that short.
#[inline(always)]
pub(crate) fn read_uvarint(buf: &[u8], p: &mut usize, max: usize) -> Option<u64> {
    let b0 = *buf.get(*p)?;
    if b0 < 0x80 {
        *p += 1;
        return Some(b0 as u64);
    }
    let b1 = *buf.get(*p + 1)?;
    if b1 < 0x80 {
        *p += 2;
        return Some((b0 & 0x7f) as u64 | (b1 as u64) << 7);
    }
    // The last byte may only carry the bits left in the value: 4 of u32, 1 of u64.
    let last_max = if max == 5 { 0x0f } else { 0x01 };
    let mut value = (b0 & 0x7f) as u64 | ((b1 & 0x7f) as u64) << 7;
    for i in 2..max {
        let b = *buf.get(*p + i)?;
        if i == max - 1 && b > last_max {
            return None;
        }
        value |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            *p += i + 1;
            return Some(value);
        }
    }
    None
}

/// Why [`read_uvarint`] failed at `buf[p..]`: truncated, or longer than `max` bytes.
#[cold]
pub(crate) fn varint_error(buf: &[u8], p: usize, max: usize) -> DecodeError {
    let rest = buf.get(p..).unwrap_or(&[]);
    match rest.iter().take(max).position(|b| b & 0x80 == 0) {
        None if rest.len() < max => DecodeError::new(DecodeErrorKind::Truncated {
            needed: rest.len() + 1,
            remaining: rest.len(),
        }),
        _ => DecodeError::new(DecodeErrorKind::VarintTooLong),
    }
}

/// Zigzag-decodes a 32-bit varint (record fields).
#[inline(always)]
pub(crate) fn zigzag32(u: u64) -> i32 {
    let u = u as u32;
    ((u >> 1) as i32) ^ -((u & 1) as i32)
}

/// Zigzag-decodes a 64-bit varint (record fields).
#[inline(always)]
pub(crate) fn zigzag64(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// A cursor over a borrowed byte slice. Every read is bounds-checked.
///
/// `base` is the absolute position of `buf[0]` inside the enclosing frame, so a field
/// can be handed out as a range of the frame (zero-copy record sets).
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over the whole of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The absolute position of the next byte (relative to the frame the reader was made from).
    pub fn position(&self) -> usize {
        self.base + self.pos
    }

    /// The unread rest, without consuming it.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::new(DecodeErrorKind::TrailingBytes(n))),
        }
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::new(DecodeErrorKind::Truncated {
                needed: n,
                remaining: self.remaining(),
            }));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A reader over the next `n` bytes, which are consumed from this one.
    pub fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        let base = self.position();
        let buf = self.take(n)?;
        Ok(Reader { buf, pos: 0, base })
    }

    /// The next `N` bytes. The integer reads take their width from the type they decode
    /// (`from_be_bytes` of `[u8; N]`), so a read can never take other than its own size.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Reads an `int8`.
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(self.array::<1>()?[0] as i8)
    }
    /// Reads a big-endian `int16`.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian `int32`.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian `uint32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian `int64`.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    /// Reads a boolean (any non-zero byte is true, as in the Java client).
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.array::<1>()?[0] != 0)
    }
    /// Reads a 16-byte UUID.
    pub fn uuid(&mut self) -> Result<[u8; 16], DecodeError> {
        self.array()
    }

    /// Reads an unsigned base-128 varint of at most 5 bytes (flexible-version lengths, tags).
    pub fn uvarint(&mut self) -> Result<u32, DecodeError> {
        read_uvarint(self.buf, &mut self.pos, 5)
            .map(|v| v as u32)
            .ok_or_else(|| varint_error(self.buf, self.pos, 5))
    }

    /// Reads an unsigned base-128 varint of at most 10 bytes.
    pub fn uvarlong(&mut self) -> Result<u64, DecodeError> {
        read_uvarint(self.buf, &mut self.pos, 10)
            .ok_or_else(|| varint_error(self.buf, self.pos, 10))
    }

    /// Reads a zigzag-encoded signed varint (record fields).
    pub fn varint(&mut self) -> Result<i32, DecodeError> {
        self.uvarint().map(|u| zigzag32(u as u64))
    }

    /// Reads a zigzag-encoded signed varlong (record fields).
    pub fn varlong(&mut self) -> Result<i64, DecodeError> {
        self.uvarlong().map(zigzag64)
    }

    /// Reads a length: `int16`/`int32` classic or `uvarint - 1` compact. `None` is null.
    /// A length larger than the bytes left is an error, before anything is allocated.
    fn length(&mut self, flexible: bool, wide: bool) -> Result<Option<usize>, DecodeError> {
        let n: i64 = if flexible {
            self.uvarint()? as i64 - 1
        } else if wide {
            self.i32()? as i64
        } else {
            self.i16()? as i64
        };
        if n == -1 {
            return Ok(None);
        }
        if n < 0 || n as u64 > self.remaining() as u64 {
            return Err(DecodeError::new(DecodeErrorKind::BadLength(n)));
        }
        Ok(Some(n as usize))
    }

    /// Reads a nullable string (`int16` length, or compact when `flexible`).
    pub fn nullable_string(&mut self, flexible: bool) -> Result<Option<&'a str>, DecodeError> {
        match self.length(flexible, false)? {
            None => Ok(None),
            Some(n) => std::str::from_utf8(self.take(n)?)
                .map(Some)
                .map_err(|_| DecodeError::new(DecodeErrorKind::InvalidUtf8)),
        }
    }

    /// Reads a non-null string; null is an error.
    pub fn string(&mut self, flexible: bool) -> Result<&'a str, DecodeError> {
        self.nullable_string(flexible)?
            .ok_or_else(|| DecodeError::invalid("null where a string is required"))
    }

    /// Reads nullable bytes (`int32` length, or compact when `flexible`).
    pub fn nullable_bytes(&mut self, flexible: bool) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.length(flexible, true)? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    /// Reads an array count (`int32`, or compact when `flexible`). Each element takes at
    /// least `min_elem` bytes, so a count that cannot fit in what remains is rejected here.
    pub fn array_len(
        &mut self,
        flexible: bool,
        min_elem: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let n: i64 = if flexible {
            self.uvarint()? as i64 - 1
        } else {
            self.i32()? as i64
        };
        if n == -1 {
            return Ok(None);
        }
        if n < 0 || (n as u64).saturating_mul(min_elem.max(1) as u64) > self.remaining() as u64 {
            return Err(DecodeError::new(DecodeErrorKind::BadLength(n)));
        }
        Ok(Some(n as usize))
    }

    /// Skips a tagged-field section (flexible versions): a count, then (tag, size, bytes).
    pub fn skip_tagged_fields(&mut self) -> Result<(), DecodeError> {
        let count = self.uvarint()?;
        let mut last: Option<u32> = None;
        for _ in 0..count {
            let tag = self.uvarint()?;
            if last.is_some_and(|l| tag <= l) {
                return Err(DecodeError::invalid("tagged fields out of order"));
            }
            last = Some(tag);
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// A one-pass encoder into a growable buffer. Lengths that are only known at the end
/// are back-patched ([`Writer::reserve_i32`] / [`Writer::patch_i32`]).
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    /// An empty writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    /// The bytes written so far.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Writes raw bytes.
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// Writes an `int8`.
    pub fn i8(&mut self, v: i8) {
        self.buf.push(v as u8);
    }
    /// Writes a big-endian `int16`.
    pub fn i16(&mut self, v: i16) {
        self.raw(&v.to_be_bytes());
    }
    /// Writes a big-endian `int32`.
    pub fn i32(&mut self, v: i32) {
        self.raw(&v.to_be_bytes());
    }
    /// Writes a big-endian `uint32`.
    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }
    /// Writes a big-endian `int64`.
    pub fn i64(&mut self, v: i64) {
        self.raw(&v.to_be_bytes());
    }
    /// Writes a boolean.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    /// Writes an unsigned varint.
    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// Writes an unsigned varlong.
    pub fn uvarlong(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// Writes a zigzag varint.
    pub fn varint(&mut self, v: i32) {
        self.uvarint(((v << 1) ^ (v >> 31)) as u32);
    }
    /// Writes a zigzag varlong.
    pub fn varlong(&mut self, v: i64) {
        self.uvarlong(((v << 1) ^ (v >> 63)) as u64);
    }

    fn length(&mut self, len: Option<usize>, flexible: bool, wide: bool) {
        match (len, flexible) {
            (None, true) => self.uvarint(0),
            (Some(n), true) => self.uvarint(n as u32 + 1),
            (None, false) if wide => self.i32(-1),
            (None, false) => self.i16(-1),
            (Some(n), false) if wide => self.i32(n as i32),
            (Some(n), false) => self.i16(n as i16),
        }
    }

    /// Writes a nullable string.
    pub fn nullable_string(&mut self, s: Option<&str>, flexible: bool) {
        self.length(s.map(str::len), flexible, false);
        if let Some(s) = s {
            self.raw(s.as_bytes());
        }
    }
    /// Writes a string.
    pub fn string(&mut self, s: &str, flexible: bool) {
        self.nullable_string(Some(s), flexible);
    }
    /// Writes nullable bytes.
    pub fn nullable_bytes(&mut self, b: Option<&[u8]>, flexible: bool) {
        self.length(b.map(<[u8]>::len), flexible, true);
        if let Some(b) = b {
            self.raw(b);
        }
    }
    /// Writes an array count (`None` = null array).
    pub fn array_len(&mut self, n: Option<usize>, flexible: bool) {
        match (n, flexible) {
            (None, true) => self.uvarint(0),
            (Some(n), true) => self.uvarint(n as u32 + 1),
            (None, false) => self.i32(-1),
            (Some(n), false) => self.i32(n as i32),
        }
    }
    /// Writes an empty tagged-field section.
    pub fn empty_tagged_fields(&mut self) {
        self.uvarint(0);
    }

    /// Reserves four bytes for an `int32` written later with [`Writer::patch_i32`].
    pub fn reserve_i32(&mut self) -> usize {
        let at = self.buf.len();
        self.i32(0);
        at
    }
    /// Writes `v` into the four bytes reserved at `at`.
    pub fn patch_i32(&mut self, at: usize, v: i32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut w = Writer::new();
            w.varlong(v);
            let b = w.into_inner();
            assert_eq!(Reader::new(&b).varlong().unwrap(), v);
        }
        for v in [0i32, -1, 1, i32::MIN, i32::MAX] {
            let mut w = Writer::new();
            w.varint(v);
            let b = w.into_inner();
            let mut r = Reader::new(&b);
            assert_eq!(r.varint().unwrap(), v);
            r.finish().unwrap();
        }
        for v in [0u64, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut w = Writer::new();
            w.uvarlong(v);
            let b = w.into_inner();
            let mut r = Reader::new(&b);
            assert_eq!(r.uvarlong().unwrap(), v);
            r.finish().unwrap();
            // Every strict prefix is truncated, not garbage.
            for cut in 0..b.len() {
                let e = Reader::new(&b[..cut]).uvarlong().unwrap_err();
                assert!(
                    matches!(e.kind(), DecodeErrorKind::Truncated { .. }),
                    "{v} cut at {cut}: {e}"
                );
            }
        }
        // A 64-bit value does not fit a 32-bit varint.
        let mut w = Writer::new();
        w.uvarlong(1 << 35);
        assert!(Reader::new(&w.into_inner()).uvarint().is_err());
        let overlong = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(
            Reader::new(&overlong).uvarint().unwrap_err().kind(),
            &DecodeErrorKind::VarintTooLong
        );
    }

    #[test]
    fn strings_compact_and_classic() {
        for flexible in [false, true] {
            let mut w = Writer::new();
            w.string("héllo", flexible);
            w.nullable_string(None, flexible);
            let b = w.into_inner();
            let mut r = Reader::new(&b);
            assert_eq!(r.string(flexible).unwrap(), "héllo");
            assert_eq!(r.nullable_string(flexible).unwrap(), None);
            r.finish().unwrap();
        }
    }

    #[test]
    fn oversized_lengths_are_rejected_before_allocation() {
        // A string claiming 32767 bytes with 2 present.
        let b = [0x7f, 0xff, b'a', b'b'];
        let e = Reader::new(&b).string(false).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(32767));
        // An array claiming two billion elements.
        let b = [0x7f, 0xff, 0xff, 0xff, 0, 0];
        let e = Reader::new(&b).array_len(false, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // Negative non-null bytes length.
        let b = [0xff, 0xff, 0xff, 0xfe];
        assert!(Reader::new(&b).nullable_bytes(false).is_err());
    }

    #[test]
    fn truncation_names_the_context() {
        let e = Reader::new(&[0, 1])
            .i32()
            .unwrap_err()
            .context("Thing.field")
            .context("Outer");
        assert_eq!(
            e.to_string(),
            "Outer: Thing.field: truncated: needed 4 bytes, 2 left"
        );
    }

    #[test]
    fn tagged_fields_are_skipped_and_checked() {
        let mut w = Writer::new();
        w.uvarint(2);
        w.uvarint(0);
        w.uvarint(3);
        w.raw(b"abc");
        w.uvarint(5);
        w.uvarint(0);
        w.i8(7);
        let b = w.into_inner();
        let mut r = Reader::new(&b);
        r.skip_tagged_fields().unwrap();
        assert_eq!(r.i8().unwrap(), 7);
        // A size larger than what is left.
        let b = [1u8, 0, 9, 1];
        assert!(Reader::new(&b).skip_tagged_fields().is_err());
    }

    #[test]
    fn sub_reader_keeps_absolute_positions() {
        let b = [1u8, 2, 3, 4, 5, 6];
        let mut r = Reader::new(&b);
        r.take(2).unwrap();
        let mut s = r.sub(3).unwrap();
        assert_eq!(s.position(), 2);
        s.take(1).unwrap();
        assert_eq!(s.position(), 3);
        assert_eq!(r.position(), 5);
        assert!(r.sub(2).is_err());
    }
}
