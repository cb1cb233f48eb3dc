//! What partitions hold: logs of record batches, and batches written by hand.

use std::collections::HashMap;

use kafka_consumer::testing::records::testing::{encode_batch, BatchSpec, RecordSpec};

use super::*;

/// A partition's log as whole batches: `(base offset, next offset, bytes)`.
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub batches: Vec<(i64, i64, Vec<u8>)>,
}

impl Log {
    /// Appends `n` records with values `v<offset>`.
    pub fn append(&mut self, n: i32) -> &mut Log {
        let base = self.end();
        self.batches.push((base, base + n as i64, batch(base, n)));
        self
    }

    /// Appends a batch built elsewhere, holding offsets `base..next`.
    pub fn append_batch(&mut self, base: i64, next: i64, bytes: Vec<u8>) -> &mut Log {
        self.batches.push((base, next, bytes));
        self
    }

    /// The offset after the last record.
    pub fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.1)
    }

    /// The batches a broker returns for a fetch at `offset`: every batch that ends after
    /// it, the first one whole, then as many as fit in `max_bytes` (KIP-74).
    pub fn read(&self, offset: i64, max_bytes: i32) -> Vec<u8> {
        let mut out = Vec::new();
        for (_, next, bytes) in &self.batches {
            if *next <= offset {
                continue;
            }
            if !out.is_empty() && out.len() + bytes.len() > max_bytes.max(0) as usize {
                break;
            }
            out.extend_from_slice(bytes);
        }
        out
    }

    /// The answer for a fetch at `w`.
    pub fn answer(&self, w: &Wanted) -> FetchPart {
        FetchPart::records(self.end(), self.read(w.offset, w.max_bytes))
    }
}

/// A handler serving topic `t` with the given partition logs from node 0: Metadata,
/// ListOffsets (earliest 0, latest the end), Fetch (long polls when there is nothing), and
/// a group coordinator that has no committed offsets.
pub fn serve_logs(logs: HashMap<i32, Log>) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |r: &Request| match r.key {
        FIND_COORDINATOR => Reply::Send(find_coordinator(r, 0, 0, r.ports[0])),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        METADATA => Reply::Send(simple_metadata(r, logs.len() as i32)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, p, ts| {
            let end = logs.get(&p).map_or(0, Log::end);
            (0, if ts == -1 { end } else { 0 })
        })),
        FETCH => fetch_reply(r, |w| {
            logs.get(&w.partition)
                .map_or_else(FetchPart::default, |l| l.answer(w))
        }),
        _ => Reply::Close,
    }
}

/// `n` records at `base` with values `v<offset>`, uncompressed.
pub fn batch(base: i64, n: i32) -> Vec<u8> {
    batch_at(base, n, 0, "v")
}

/// `n` records at `base` written under leader epoch `epoch`, values `<prefix><offset>`,
/// uncompressed.
pub fn batch_at(base: i64, n: i32, epoch: i32, prefix: &str) -> Vec<u8> {
    let values: Vec<String> = (0..n)
        .map(|i| format!("{prefix}{}", base + i as i64))
        .collect();
    let recs: Vec<RecordSpec<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i32, 0, None, Some(v.as_bytes()), &[][..]))
        .collect();
    encode_batch(&BatchSpec {
        base_offset: base,
        partition_leader_epoch: epoch,
        records: &recs,
        ..BatchSpec::default()
    })
}

/// Compression codes of the batch attributes.
pub const GZIP: i16 = 1;
pub const SNAPPY: i16 = 2;
pub const ZSTD: i16 = 4;

/// A batch at `base` claiming `count` records whose records section is `section`,
/// compressed with `codec`; the CRC is valid.
pub fn compressed_batch(base: i64, count: i32, codec: i16, section: &[u8]) -> Vec<u8> {
    encode_batch(&BatchSpec {
        base_offset: base,
        attributes: codec,
        last_offset_delta: Some(count.max(1) - 1),
        records_section: Some(section),
        record_count: Some(count),
        ..BatchSpec::default()
    })
}

const ZSTD_MAX_BLOCK: usize = 128 * 1024;

/// One block of a zstd frame: `len` bytes, either `bytes` as they are (raw) or `len`
/// copies of `bytes[0]` (RLE).
struct ZstdBlock<'a> {
    rle: bool,
    bytes: &'a [u8],
    len: usize,
}

/// A zstd frame holding `data`, written by hand: runs of one byte become RLE blocks (so
/// megabytes of zeros take a few bytes), everything else raw blocks. No checksum.
pub fn zstd_frame(data: &[u8]) -> Vec<u8> {
    let mut blocks = Vec::new();
    let (mut i, mut raw_start) = (0, 0);
    while i < data.len() {
        let run = data[i..]
            .iter()
            .take(ZSTD_MAX_BLOCK)
            .take_while(|&&b| b == data[i])
            .count();
        if run >= 32 {
            push_raw(&mut blocks, &data[raw_start..i]);
            blocks.push(ZstdBlock {
                rle: true,
                bytes: &data[i..i + 1],
                len: run,
            });
            i += run;
            raw_start = i;
        } else {
            i += 1;
        }
    }
    push_raw(&mut blocks, &data[raw_start..]);
    zstd_write(blocks, ZSTD_WINDOW_1_MIB)
}

fn push_raw<'a>(blocks: &mut Vec<ZstdBlock<'a>>, data: &'a [u8]) {
    blocks.extend(data.chunks(ZSTD_MAX_BLOCK).map(|c| ZstdBlock {
        rle: false,
        bytes: c,
        len: c.len(),
    }));
}

/// A zstd frame of `n` zero bytes (RLE blocks only: about 4 bytes per 128 KiB).
pub fn zstd_zeros(n: usize) -> Vec<u8> {
    zstd_zeros_in_window(n, ZSTD_WINDOW_1_MIB)
}

/// The window descriptor of a 1 MiB window (RFC 8878, 3.1.1.1.2: exponent 10, mantissa 0).
const ZSTD_WINDOW_1_MIB: u8 = 0x50;

/// Like [`zstd_zeros`], in a frame whose header declares the window of `descriptor`
/// (`0xF0`: 2^40 bytes, a terabyte).
pub fn zstd_zeros_in_window(n: usize, descriptor: u8) -> Vec<u8> {
    let blocks = (0..n.div_ceil(ZSTD_MAX_BLOCK)).map(|k| ZstdBlock {
        rle: true,
        bytes: &[0],
        len: (n - k * ZSTD_MAX_BLOCK).min(ZSTD_MAX_BLOCK),
    });
    zstd_write(blocks.collect(), descriptor)
}

fn zstd_write(mut blocks: Vec<ZstdBlock<'_>>, window: u8) -> Vec<u8> {
    // Magic; frame header descriptor: no content size, no checksum, not single-segment;
    // the window descriptor.
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, window];
    if blocks.is_empty() {
        blocks.push(ZstdBlock {
            rle: false,
            bytes: &[],
            len: 0,
        });
    }
    let last = blocks.len() - 1;
    for (k, b) in blocks.iter().enumerate() {
        let header = (k == last) as u32 | (b.rle as u32) << 1 | (b.len as u32) << 3;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(if b.rle { &b.bytes[..1] } else { b.bytes });
    }
    out
}
