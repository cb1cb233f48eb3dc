//! zstd decoding (RFC 8878), decode only, in safe Rust: the default build's zstd codec.
//!
//! Kafka compresses each record batch's records section as one or more zstd frames. This
//! module turns them into the records section, into the caller's buffer, within its limit.
//!
//! - [`bits`]: the backward bitstreams entropy-coded data is read from, and the forward
//!   one of table descriptions.
//! - [`fse`]: finite state entropy tables (RFC 8878, 4.1).
//! - [`huffman`]: Huffman-coded literals, one stream or four in lockstep (4.2).
//! - [`sequences`]: the sequences section, decoded and executed in one pass (3.1.1.3.2).
//! - [`xxhash`]: the optional content checksum.
//!
//! What makes it fast is what libzstd does: a table lookup per Huffman symbol with four
//! streams interleaved, 64-bit bit containers refilled a few times per sequence, and match
//! copies 16 bytes at a time into room past the end. What keeps it safe is that every
//! length and offset is checked against what the block, the frame and the caller's limit
//! allow before it is used, and the output is the history: a frame's window costs no
//! memory of its own, so a frame declaring a huge window holds nothing more than its output.
//!
//! Invariants:
//! 1. Nothing is written at or past `start + limit` of the caller's buffer, and the buffer
//!    grows only through `records::reserve_within` (see [`Output::make_room`]).
//! 2. A match copies only bytes of its own frame, at most the frame's window back.
//! 3. A block produces at most its maximum size (`min(window, 128 KiB)`); literals, Huffman
//!    streams and the sequences' bitstream are each consumed exactly, or the input is
//!    corrupt.
//! 4. The tables a block may repeat (Huffman, sequence codes) and the repeated offsets
//!    belong to one frame: each frame starts without them.

mod bits;
mod fse;
mod huffman;
mod sequences;
mod xxhash;

#[cfg(all(feature = "zstd-native", any(test, feature = "__fuzzing")))]
pub(crate) use huffman::FOUR_STREAMS_NOT_AT_END;

use std::cell::RefCell;

use huffman::HufTable;
use sequences::{SeqTables, Target};

/// Why a zstd input did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Error {
    /// The input is not valid zstd; the reason names what was wrong.
    Corrupt(&'static str),
    /// The output would pass the caller's limit.
    TooLarge,
}

const MAGIC: u32 = 0xFD2F_B528;
/// Skippable frames: magic `0x184D2A5?`, a 4-byte size, that many bytes.
const SKIPPABLE: u32 = 0x184D_2A50;
const BLOCK_MAX: usize = 128 * 1024;
/// How far past the end of what they copy the fast copies may write (and the literal
/// buffer may be read).
const WILD: usize = 32;

/// What decoding keeps between blocks and batches: the literal buffer and the tables.
/// One per thread (the I/O thread decodes every batch), about 170 KiB once used.
struct Scratch {
    literals: Vec<u8>,
    huffman: HufTable,
    /// Whether `huffman` holds the current frame's table.
    huffman_valid: bool,
    tables: SeqTables,
}

impl Scratch {
    fn new() -> Self {
        Self {
            literals: Vec::new(),
            huffman: HufTable::new(),
            huffman_valid: false,
            tables: SeqTables::new(),
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Option<Box<Scratch>>> = const { RefCell::new(None) };
}

/// Appends the zstd frames (and skippable frames) of `input` to `out[..*end]`, producing at
/// most `limit` bytes. `out[*end..]` is scratch the decoder may overwrite. On success `*end`
/// is the new end; on error it is unchanged and `out` may hold garbage past it.
pub(crate) fn decode(
    input: &[u8],
    out: &mut Vec<u8>,
    end: &mut usize,
    limit: usize,
) -> Result<(), Error> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let scratch = slot.get_or_insert_with(|| Box::new(Scratch::new()));
            decode_with(scratch, input, out, end, limit)
        }
        // Not reentrant in practice; if it ever were, decode with fresh tables.
        Err(_) => decode_with(&mut Scratch::new(), input, out, end, limit),
    })
}

fn decode_with(
    scratch: &mut Scratch,
    input: &[u8],
    out: &mut Vec<u8>,
    end: &mut usize,
    limit: usize,
) -> Result<(), Error> {
    let max_end = end.saturating_add(limit);
    let mut o = Output {
        buf: out,
        pos: *end,
        max_end,
        ceiling: max_end.saturating_add(1),
    };
    let mut rest = input;
    while !rest.is_empty() {
        let magic = read_u32(rest, 0).ok_or(Error::Corrupt("truncated frame"))?;
        if magic & 0xFFFF_FFF0 == SKIPPABLE {
            let size = read_u32(rest, 4).ok_or(Error::Corrupt("truncated skippable frame"))?;
            let skip = 8usize.saturating_add(size as usize);
            rest = rest
                .get(skip..)
                .ok_or(Error::Corrupt("truncated skippable frame"))?;
        } else if magic == MAGIC {
            rest = frame(scratch, rest, &mut o)?;
        } else {
            return Err(Error::Corrupt("not a zstd frame"));
        }
    }
    *end = o.pos;
    Ok(())
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The caller's buffer as decoding fills it.
struct Output<'a> {
    buf: &'a mut Vec<u8>,
    /// `buf[..pos]` is output; `buf[pos..]` is initialized scratch.
    pos: usize,
    /// No output at or past this: the caller's start plus limit.
    max_end: usize,
    /// The buffer's capacity stays within this (one byte past `max_end`, as
    /// `records::reserve_within` is used everywhere).
    ceiling: usize,
}

impl Output<'_> {
    /// Makes `buf.len() >= pos + want` where the ceiling lets it (zero-filling only bytes
    /// never filled before).
    fn make_room(&mut self, want: usize) {
        let target = self.pos.saturating_add(want).min(self.ceiling);
        if target <= self.buf.len() {
            return;
        }
        if target > self.buf.capacity() {
            let len = self.buf.len();
            // When it cannot grow that far, it grows as far as it may; writers check.
            let _ = super::records::reserve_within(self.buf, target - len, self.ceiling);
        }
        let len = target.min(self.buf.capacity());
        self.buf.resize(len, 0);
    }

    /// Appends `n` bytes produced by `fill`, checking the block's and the caller's limits.
    fn append(
        &mut self,
        n: usize,
        block_max: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Error> {
        if n > block_max {
            return Err(Error::Corrupt("block larger than its maximum size"));
        }
        let end = self.pos + n;
        if end > self.max_end {
            return Err(Error::TooLarge);
        }
        self.make_room(n);
        if end > self.buf.len() {
            return Err(Error::TooLarge);
        }
        fill(&mut self.buf[self.pos..end]);
        self.pos = end;
        Ok(())
    }
}

/// A frame header's fields (RFC 8878, 3.1.1.1).
struct FrameHeader {
    /// How far back matches may reach.
    window: u64,
    content_size: Option<u64>,
    checksum: bool,
    /// Header bytes, magic included.
    size: usize,
}

fn frame_header(src: &[u8]) -> Result<FrameHeader, Error> {
    let truncated = Error::Corrupt("truncated frame header");
    let descriptor = *src.get(4).ok_or(truncated)?;
    if descriptor & 0x08 != 0 {
        return Err(Error::Corrupt("reserved bit set in the frame header"));
    }
    let single_segment = descriptor & 0x20 != 0;
    let mut at = 5;
    let mut window = 0;
    if !single_segment {
        let w = *src.get(at).ok_or(truncated)?;
        at += 1;
        let base = 1u64 << (10 + (w >> 3));
        window = base + (base / 8) * u64::from(w & 7);
    }
    let dictionary_bytes = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let dictionary = src.get(at..at + dictionary_bytes).ok_or(truncated)?;
    if dictionary.iter().any(|&b| b != 0) {
        return Err(Error::Corrupt("frame needs a dictionary"));
    }
    at += dictionary_bytes;
    let content_bytes = match (descriptor >> 6, single_segment) {
        (0, false) => 0,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let c = src.get(at..at + content_bytes).ok_or(truncated)?;
    let content_size = match content_bytes {
        0 => None,
        1 => Some(u64::from(c[0])),
        2 => Some(u64::from(u16::from_le_bytes([c[0], c[1]])) + 256),
        4 => Some(u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        _ => {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            Some(u64::from_le_bytes(b))
        }
    };
    at += content_bytes;
    if single_segment {
        window = content_size.unwrap_or(0);
    }
    Ok(FrameHeader {
        window,
        content_size,
        checksum: descriptor & 0x04 != 0,
        size: at,
    })
}

/// Decodes the frame at the start of `src` into `o`; returns what follows it.
fn frame<'a>(scratch: &mut Scratch, src: &'a [u8], o: &mut Output) -> Result<&'a [u8], Error> {
    let header = frame_header(src)?;
    let mut rest = &src[header.size..];
    let block_max = header.window.min(BLOCK_MAX as u64) as usize;
    let frame_start = o.pos;
    let mut reps = [1u32, 4, 8];
    scratch.huffman_valid = false;
    scratch.tables.reset();
    loop {
        let h = rest
            .get(..3)
            .ok_or(Error::Corrupt("truncated block header"))?;
        let h = u32::from(h[0]) | u32::from(h[1]) << 8 | u32::from(h[2]) << 16;
        rest = &rest[3..];
        let last = h & 1 == 1;
        let size = (h >> 3) as usize;
        match (h >> 1) & 3 {
            0 => {
                let body = rest.get(..size).ok_or(Error::Corrupt("truncated block"))?;
                o.append(size, block_max, |d| d.copy_from_slice(body))?;
                rest = &rest[size..];
            }
            1 => {
                let &byte = rest.first().ok_or(Error::Corrupt("truncated block"))?;
                o.append(size, block_max, |d| d.fill(byte))?;
                rest = &rest[1..];
            }
            2 => {
                if size > block_max {
                    return Err(Error::Corrupt("block larger than its maximum size"));
                }
                let body = rest.get(..size).ok_or(Error::Corrupt("truncated block"))?;
                compressed_block(scratch, body, o, frame_start, &header, block_max, &mut reps)?;
                rest = &rest[size..];
            }
            _ => return Err(Error::Corrupt("reserved block type")),
        }
        if let Some(content) = header.content_size {
            if (o.pos - frame_start) as u64 > content {
                return Err(Error::Corrupt(
                    "frame larger than its declared content size",
                ));
            }
        }
        if last {
            break;
        }
    }
    if let Some(content) = header.content_size {
        if (o.pos - frame_start) as u64 != content {
            return Err(Error::Corrupt(
                "frame smaller than its declared content size",
            ));
        }
    }
    if header.checksum {
        let expected = read_u32(rest, 0).ok_or(Error::Corrupt("truncated frame checksum"))?;
        if xxhash::xxh64(&o.buf[frame_start..o.pos]) as u32 != expected {
            return Err(Error::Corrupt("frame checksum does not match its content"));
        }
        rest = &rest[4..];
    }
    Ok(rest)
}

/// Decodes one compressed block (RFC 8878, 3.1.1.3): literals, then sequences.
fn compressed_block(
    scratch: &mut Scratch,
    src: &[u8],
    o: &mut Output,
    frame_start: usize,
    header: &FrameHeader,
    block_max: usize,
    reps: &mut [u32; 3],
) -> Result<(), Error> {
    let truncated = Error::Corrupt("truncated literals section");
    let b0 = *src.first().ok_or(truncated)?;
    let byte = |i: usize| src.get(i).map(|&b| usize::from(b)).ok_or(truncated);
    let kind = b0 & 3;
    let format = (b0 >> 2) & 3;
    let b0 = usize::from(b0);
    // The literals, and where the sequences section starts.
    let (literals, literal_count, at): (&[u8], usize, usize) = if kind < 2 {
        let (count, header) = match format {
            0 | 2 => (b0 >> 3, 1),
            1 => ((b0 >> 4) + (byte(1)? << 4), 2),
            _ => ((b0 >> 4) + (byte(1)? << 4) + (byte(2)? << 12), 3),
        };
        if count > block_max {
            return Err(Error::Corrupt("literals larger than the block's maximum"));
        }
        if kind == 0 {
            let raw = src.get(header..header + count).ok_or(truncated)?;
            (raw, count, header + count)
        } else {
            let &value = src.get(header).ok_or(truncated)?;
            let buf = literal_buffer(&mut scratch.literals, count);
            buf[..count].fill(value);
            (&scratch.literals[..], count, header + 1)
        }
    } else {
        let (count, compressed, header, four) = match format {
            0 | 1 => {
                let v = b0 | byte(1)? << 8 | byte(2)? << 16;
                ((v >> 4) & 0x3FF, v >> 14, 3, format == 1)
            }
            2 => {
                let v = b0 | byte(1)? << 8 | byte(2)? << 16 | byte(3)? << 24;
                ((v >> 4) & 0x3FFF, v >> 18, 4, true)
            }
            _ => {
                let v = b0 | byte(1)? << 8 | byte(2)? << 16 | byte(3)? << 24 | byte(4)? << 32;
                ((v >> 4) & 0x3FFFF, (v >> 22) & 0x3FFFF, 5, true)
            }
        };
        if count > block_max {
            return Err(Error::Corrupt("literals larger than the block's maximum"));
        }
        let mut body = src.get(header..header + compressed).ok_or(truncated)?;
        if kind == 2 {
            let used = scratch.huffman.read(body)?;
            scratch.huffman_valid = true;
            body = &body[used..];
        } else if !scratch.huffman_valid {
            return Err(Error::Corrupt("literals repeat a Huffman tree before any"));
        }
        let buf = literal_buffer(&mut scratch.literals, count);
        if four {
            scratch.huffman.decode_4(body, &mut buf[..count])?;
        } else {
            scratch.huffman.decode_1(body, &mut buf[..count])?;
        }
        (&scratch.literals[..], count, header + compressed)
    };

    let sequences = &src[at..];
    let (count, used) = scratch.tables.read_header(sequences)?;
    o.make_room(block_max + WILD);
    let corrupt_past = o.pos + block_max;
    let cap = corrupt_past.min(o.max_end).min(o.buf.len());
    let mut t = Target {
        pos: o.pos,
        out: &mut o.buf[..],
        frame_start,
        window: header.window,
        cap,
        corrupt_past,
    };
    if count == 0 {
        if t.pos + literal_count > t.cap {
            return Err(t.past_cap());
        }
        t.out[t.pos..t.pos + literal_count].copy_from_slice(&literals[..literal_count]);
        t.pos += literal_count;
    } else {
        sequences::execute(
            &scratch.tables,
            &sequences[used..],
            count,
            literals,
            literal_count,
            &mut t,
            reps,
        )?;
    }
    o.pos = t.pos;
    Ok(())
}

/// The literal buffer with room for `count` literals and [`WILD`] bytes past them.
fn literal_buffer(buf: &mut Vec<u8>, count: usize) -> &mut [u8] {
    if buf.len() < count + WILD {
        buf.resize(count + WILD, 0);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs of the shapes Kafka batches have, and some that exercise the odd corners.
    pub(super) fn samples() -> Vec<(String, Vec<u8>)> {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let letters: Vec<u8> = (0..200_000).map(|_| b'a' + (next() % 26) as u8).collect();
        let mut json = Vec::new();
        for i in 0..3000u64 {
            let r = next();
            json.extend_from_slice(
                format!(
                    "{{\"ts\":{},\"level\":\"{}\",\"user\":\"u{}\",\"msg\":\"request {} took {} ms\"}}\n",
                    1_700_000_000_000u64 + i * 17,
                    ["INFO", "WARN", "DEBUG"][(r % 3) as usize],
                    r % 1000,
                    r % 100_000,
                    r % 900
                )
                .as_bytes(),
            );
        }
        let random: Vec<u8> = (0..70_000).map(|_| next() as u8).collect();
        let text = b"the quick brown fox jumps over the lazy dog; ".repeat(5000);
        let mut mixed = Vec::new();
        for i in 0..400 {
            mixed.extend_from_slice(&letters[i * 37..i * 37 + 300]);
            mixed.extend_from_slice(&vec![i as u8; i % 50]);
            mixed.extend_from_slice(&random[i * 11..i * 11 + (i % 70)]);
        }
        vec![
            ("empty".into(), vec![]),
            ("one byte".into(), vec![7]),
            ("zeros".into(), vec![0; 300_000]),
            ("letters".into(), letters),
            ("json".into(), json),
            ("random".into(), random),
            ("text".into(), text),
            ("mixed".into(), mixed),
        ]
    }

    pub(super) fn decode_all(input: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let mut end = 0;
        decode(input, &mut out, &mut end, limit)?;
        out.truncate(end);
        Ok(out)
    }

    #[test]
    fn frames_from_the_pure_rust_encoder_decode() {
        for (name, data) in samples() {
            let mut z = Vec::new();
            ruzstd::encoding::compress(
                &data[..],
                &mut z,
                ruzstd::encoding::CompressionLevel::Fastest,
            );
            assert_eq!(decode_all(&z, 1 << 30).as_deref(), Ok(&data[..]), "{name}");
        }
    }

    #[test]
    fn concatenated_and_skippable_frames_decode_in_order() {
        let mut z = Vec::new();
        ruzstd::encoding::compress(
            &b"hello "[..],
            &mut z,
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        z.extend_from_slice(&[0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        ruzstd::encoding::compress(
            &b"world"[..],
            &mut z,
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(decode_all(&z, 100).as_deref(), Ok(&b"hello world"[..]));
        // Limit: exactly the output fits, one byte less does not.
        assert_eq!(decode_all(&z, 11).map(|v| v.len()), Ok(11));
        assert_eq!(decode_all(&z, 10), Err(Error::TooLarge));
        // Truncated skippable frame, garbage after a frame.
        assert!(decode_all(&z[..z.len() - 3], 100).is_err());
        let mut tail = z.clone();
        tail.extend_from_slice(b"junk");
        assert!(decode_all(&tail, 100).is_err());
    }

    #[test]
    fn a_raw_and_an_rle_block_with_checksum_and_content_size() {
        // Single segment, content size 1 byte (8), checksum: descriptor 0x24.
        let content = b"abcdeXXX";
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x24, 8];
        // Raw block of 5 (not last): header = 5 << 3 | 0 << 1 | 0.
        f.extend_from_slice(&[(5 << 3) as u8, 0, 0]);
        f.extend_from_slice(b"abcde");
        // RLE block of 3 'X', last: 3 << 3 | 1 << 1 | 1.
        f.extend_from_slice(&[(3 << 3 | 2 | 1) as u8, 0, 0, b'X']);
        f.extend_from_slice(&(xxhash::xxh64(content) as u32).to_le_bytes());
        assert_eq!(decode_all(&f, 100).as_deref(), Ok(&content[..]));
        // Wrong checksum, wrong content size, a block over the single segment's size.
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(decode_all(&bad, 100).is_err());
        let mut bad = f.clone();
        bad[5] = 9;
        assert!(decode_all(&bad, 100).is_err());
        let mut bad = f.clone();
        bad[5] = 4;
        assert!(decode_all(&bad, 100).is_err());
    }

    #[test]
    fn a_frame_declaring_a_huge_window_holds_only_its_output() {
        // Window descriptor 0xF8: 2^41 bytes. Raw last block of 3 bytes.
        let f = [
            0x28,
            0xB5,
            0x2F,
            0xFD,
            0x00,
            0xF8,
            (3 << 3 | 1) as u8,
            0,
            0,
            1,
            2,
            3,
        ];
        let mut out = Vec::new();
        let mut end = 0;
        decode(&f, &mut out, &mut end, 1000).unwrap();
        assert_eq!(&out[..end], &[1, 2, 3]);
        assert!(out.capacity() <= 1001);
    }

    #[test]
    fn the_buffer_never_grows_past_the_limit_and_output_starts_at_end() {
        let data = b"0123456789".repeat(10_000);
        let mut z = Vec::new();
        ruzstd::encoding::compress(
            &data[..],
            &mut z,
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        for limit in [0, 1, 1000, 65_536, 99_999, 100_000, 100_001] {
            let mut out = b"prefix".to_vec();
            let mut end = out.len();
            let r = decode(&z, &mut out, &mut end, limit);
            assert!(out.capacity() <= 6 + limit + 1 + 64 * 1024, "limit {limit}");
            if limit >= data.len() {
                assert_eq!(r, Ok(()));
                assert_eq!(&out[..6], b"prefix");
                assert_eq!(&out[6..end], &data[..]);
            } else {
                assert_eq!(r, Err(Error::TooLarge), "limit {limit}");
            }
        }
    }
}

/// Frames from libzstd, at every level and frame shape a Kafka producer may use, decode to
/// what was compressed. Runs with `--features zstd-native` (CI's codec build).
#[cfg(all(test, feature = "zstd-native"))]
mod against_libzstd {
    use super::tests::{decode_all, samples};
    use ::zstd::stream::raw::CParameter;

    fn compress(data: &[u8], level: i32, params: &[CParameter], stream: bool) -> Vec<u8> {
        let mut c = ::zstd::bulk::Compressor::new(level).unwrap();
        for &p in params {
            c.set_parameter(p).unwrap();
        }
        if stream {
            // As the Java producer writes: streamed, no content size in the header.
            let mut e = ::zstd::stream::Encoder::new(Vec::new(), level).unwrap();
            for &p in params {
                e.set_parameter(p).unwrap();
            }
            std::io::Write::write_all(&mut e, data).unwrap();
            e.finish().unwrap()
        } else {
            c.compress(data).unwrap()
        }
    }

    #[test]
    fn every_level_and_frame_shape_decodes_to_its_input() {
        let shapes: Vec<(&str, Vec<CParameter>)> = vec![
            ("plain", vec![]),
            ("checksum", vec![CParameter::ChecksumFlag(true)]),
            ("small window", vec![CParameter::WindowLog(10)]),
            (
                "long distance",
                vec![
                    CParameter::EnableLongDistanceMatching(true),
                    CParameter::WindowLog(20),
                ],
            ),
        ];
        for (name, data) in samples() {
            for level in [-5, -1, 1, 2, 3, 4, 5, 6, 7, 9, 12, 15, 16, 19, 22] {
                for (shape, params) in &shapes {
                    for stream in [false, true] {
                        let z = compress(&data, level, params, stream);
                        let got = decode_all(&z, 1 << 30);
                        assert!(
                            got.as_deref() == Ok(&data[..]),
                            "{name} level {level} {shape} stream {stream}: {:?}",
                            got.map(|g| g.len())
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn batches_of_every_size_decode() {
        let (_, letters) = samples().swap_remove(3);
        for size in [
            1,
            2,
            5,
            6,
            7,
            15,
            16,
            17,
            100,
            1000,
            1023,
            1024,
            1025,
            16 * 1024,
            65_536,
            131_072,
            131_073,
            199_999,
        ] {
            for level in [1, 3, 9] {
                let z = compress(&letters[..size], level, &[], true);
                assert_eq!(
                    decode_all(&z, 1 << 30).as_deref(),
                    Ok(&letters[..size]),
                    "size {size} level {level}"
                );
            }
        }
    }
}
