//! zstd decoder micro-benchmark (issue 18): how fast each candidate decoder turns a
//! Kafka-shaped zstd record batch back into its records, in uncompressed MB (10^6 bytes)
//! per CPU second of the decoding thread.
//!
//! Inputs are built here, deterministically (fixed seed, no files): the records section of
//! a batch (Kafka v2 records: length, attributes, deltas, null key, value, no headers) of
//! 16 KiB, 64 KiB, 256 KiB and 1 MiB, with four kinds of values. Each is compressed by
//! libzstd at levels 3 and 9 as the Java producer does it (zstd-jni's ZstdOutputStream:
//! streaming, `ZSTD_e_continue` then `ZSTD_e_end`, so the frame header carries no content
//! size and the window is the level's default), and decoded by every decoder, in two shapes:
//!
//! * `new`: a new decoder per batch, exactly as `src/protocol/records.rs` does today (for
//!   ruzstd a `StreamingDecoder` per frame read by `read_limited` into a reused `Vec`; for
//!   libzstd `zstd::stream::read::Decoder::with_buffer`, the `zstd-native` code);
//! * `reused`: the same, with the decoder's state (ruzstd's `FrameDecoder`, libzstd's
//!   `DCtx`) kept across batches, which the library could do (one per I/O thread).
//!
//! Every output is checked against the input before it is timed. Per cell: decode repeatedly
//! until at least `--min-cpu` seconds of thread CPU time, MB/s = bytes / CPU time; the cell's
//! figure is the median of `--reps` such measurements, the decoders interleaved within each
//! repetition so that load from other work on the machine spreads over all of them.
//!
//! Usage: zstd-decode-bench [--quick] [--min-cpu S] [--reps N] [--frames stream|bulk|both]
//!        [--out PATH_WITHOUT_EXTENSION]   (writes PATH.md and PATH.json)
//!        zstd-decode-bench --probe-window DECODER WINDOW_LOG OUTPUT_MIB LIMIT_KIB
//!        (one hostile frame, see `probe_window`; benches/zstd-decode/probe-window.sh runs
//!        the set quoted in README.md)

use std::fmt::Write as _;
use std::io::{Read, Write as _};
use std::time::Instant;

// ---------------------------------------------------------------------------------------
// Deterministic inputs

/// splitmix64: small, fast and good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// One Kafka v2 record (as in a batch's records section): null key, no headers.
fn record(out: &mut Vec<u8>, offset_delta: i64, timestamp_delta: i64, value: &[u8]) {
    let mut body = Vec::with_capacity(value.len() + 16);
    body.push(0); // attributes
    varint(&mut body, timestamp_delta);
    varint(&mut body, offset_delta);
    varint(&mut body, -1); // key length: null
    varint(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    varint(&mut body, 0); // header count
    varint(out, body.len() as i64);
    out.extend_from_slice(&body);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// What Kafka's ProducerPerformance sends: per record, random uppercase A-Z.
    Letters100,
    Letters1k,
    /// Structured log lines.
    Json,
    /// A few sentences repeated with small variations.
    Text,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Letters100, Kind::Letters1k, Kind::Json, Kind::Text];
    fn name(self) -> &'static str {
        match self {
            Kind::Letters100 => "letters-100B",
            Kind::Letters1k => "letters-1KiB",
            Kind::Json => "json-logs",
            Kind::Text => "repetitive-text",
        }
    }
}

const SERVICES: &[&str] = &[
    "checkout",
    "payments",
    "inventory",
    "search",
    "auth",
    "shipping",
    "catalog",
    "gateway",
];
const LEVELS: &[&str] = &["INFO", "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"];
const METHODS: &[&str] = &["GET", "GET", "GET", "POST", "PUT", "DELETE"];
const PATHS: &[&str] = &[
    "/api/v1/orders",
    "/api/v1/orders/{id}",
    "/api/v1/cart",
    "/api/v2/search",
    "/login",
    "/api/v1/users/{id}/profile",
    "/api/v1/payments",
    "/healthz",
    "/api/v1/items/{id}",
];
const STATUSES: &[&str] = &[
    "200", "200", "200", "200", "201", "204", "304", "400", "404", "500",
];
const MESSAGES: &[&str] = &[
    "request completed",
    "cache miss, loading from database",
    "user session refreshed",
    "payment authorised",
    "retrying upstream call",
    "slow query detected",
    "order created",
    "token validation failed",
    "rate limit close to threshold",
    "item out of stock",
    "connection pool exhausted, waiting",
];

fn json_line(rng: &mut Rng, i: u64) -> Vec<u8> {
    let ms = 1_700_000_000_000u64 + i * 7 + rng.below(5);
    let (secs, milli) = (ms / 1000, ms % 1000);
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let service = rng.pick(SERVICES);
    let path = rng
        .pick(PATHS)
        .replace("{id}", &rng.below(1_000_000).to_string());
    let slow = rng.below(2000) + 1;
    let latency = 1 + rng.below(slow);
    format!(
        concat!(
            "{{\"ts\":\"2023-11-14T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",",
            "\"service\":\"{}\",\"host\":\"{}-{}.prod.internal\",\"trace_id\":\"{:016x}{:016x}\",",
            "\"msg\":\"{}\",\"user_id\":{},\"latency_ms\":{},",
            "\"http\":{{\"method\":\"{}\",\"path\":\"{}\",\"status\":{}}}}}"
        ),
        h,
        m,
        s,
        milli,
        rng.pick(LEVELS),
        service,
        service,
        rng.below(24),
        rng.next(),
        rng.next(),
        rng.pick(MESSAGES),
        100_000 + rng.below(900_000),
        latency,
        rng.pick(METHODS),
        path,
        rng.pick(STATUSES),
    )
    .into_bytes()
}

const SENTENCES: &[&str] = &[
    "The quick brown fox jumps over the lazy dog near bank {}.",
    "Sensor {} reported a temperature of {} degrees at the north gate.",
    "Shipment {} left the warehouse and is expected within {} days.",
    "User {} updated the profile settings and logged out.",
];

fn text_value(rng: &mut Rng) -> Vec<u8> {
    let mut v = String::new();
    for _ in 0..2 {
        let mut s = rng.pick(SENTENCES).to_string();
        while let Some(at) = s.find("{}") {
            s.replace_range(at..at + 2, &rng.below(100).to_string());
        }
        v.push_str(&s);
        v.push(' ');
    }
    v.into_bytes()
}

/// A records section of at most `size` bytes, filled with whole records of `kind`.
fn payload(kind: Kind, size: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(size);
    let mut i = 0u64;
    loop {
        let value = match kind {
            Kind::Letters100 | Kind::Letters1k => {
                let n = if kind == Kind::Letters100 { 100 } else { 1024 };
                (0..n).map(|_| b'A' + rng.below(26) as u8).collect()
            }
            Kind::Json => json_line(&mut rng, i),
            Kind::Text => text_value(&mut rng),
        };
        let mut rec = Vec::new();
        record(&mut rec, i as i64, (i / 4) as i64, &value);
        if out.len() + rec.len() > size {
            break;
        }
        out.extend_from_slice(&rec);
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Frames

#[derive(Clone, Copy, PartialEq, Eq)]
enum FrameShape {
    /// `zstd::stream::write::Encoder`: `ZSTD_compressStream` then `ZSTD_endStream`, as
    /// zstd-jni's ZstdOutputStream (the Java producer) writes: no content size.
    Stream,
    /// `zstd::bulk::compress`: one-shot, with the content size in the header.
    Bulk,
}

impl FrameShape {
    fn name(self) -> &'static str {
        match self {
            FrameShape::Stream => "stream",
            FrameShape::Bulk => "bulk",
        }
    }
}

fn compress(data: &[u8], level: i32, shape: FrameShape) -> Vec<u8> {
    match shape {
        FrameShape::Bulk => zstd::bulk::compress(data, level).unwrap(),
        FrameShape::Stream => {
            let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level).unwrap();
            // Kafka's producer writes through a 16 KiB BufferedOutputStream.
            for chunk in data.chunks(16 * 1024) {
                enc.write_all(chunk).unwrap();
            }
            enc.finish().unwrap()
        }
    }
}

/// (has content size, window log or None for single-segment) from a frame header.
fn frame_info(frame: &[u8]) -> (bool, Option<u32>) {
    let d = frame[4];
    let single_segment = d & 0x20 != 0;
    let fcs = (d >> 6) != 0 || single_segment;
    let window = (!single_segment).then(|| 10 + (frame[5] >> 3) as u32);
    (fcs, window)
}

// ---------------------------------------------------------------------------------------
// The library's output loop (copied from src/protocol/records.rs, fn read_limited and
// reserve_within, error type simplified), so each decoder is driven as the library drives
// it.

const GROW_STEP: usize = 64 * 1024;
const MIN_FILL_STEP: usize = 4 * 1024;
const FILL_STEP_MAX: usize = 256 * 1024;

fn reserve_within(out: &mut Vec<u8>, additional: usize, ceiling: usize) -> bool {
    let needed = out.len().saturating_add(additional);
    let cap = out.capacity();
    if needed <= cap {
        return true;
    }
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

fn read_limited<R: Read>(
    mut reader: R,
    input_len: usize,
    out: &mut Vec<u8>,
    end: &mut usize,
    limit: usize,
) -> Result<(), String> {
    let ceiling = end.saturating_add(limit).saturating_add(1);
    let mut filled = *end;
    let mut step = input_len
        .saturating_mul(2)
        .clamp(MIN_FILL_STEP, FILL_STEP_MAX);
    loop {
        if filled >= out.len() {
            if filled >= ceiling {
                return Err("too large".into());
            }
            let mut room = (ceiling - filled).min(step);
            step = step.saturating_mul(2).min(FILL_STEP_MAX);
            out.truncate(filled);
            if !reserve_within(out, room, ceiling) {
                room = room.min(out.capacity() - filled);
                if room == 0 {
                    return Err("too large".into());
                }
            }
            out.resize(filled + room, 0);
        }
        let stop = out.len().min(ceiling);
        match reader.read(&mut out[filled..stop]) {
            Ok(0) => break,
            Ok(n) => filled += n.min(stop - filled),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if filled == ceiling {
            return Err("too large".into());
        }
    }
    *end = filled;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Decoders

/// The library's ruzstd code (records.rs, fn zstd), generic over the two ruzstd versions
/// by a macro: their `StreamingDecoder` API is the same in what this uses.
macro_rules! ruzstd_frames {
    ($krate:ident, $input:expr, $out:expr, $limit:expr, |$r:ident| $make:expr) => {{
        use $krate::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        let out: &mut Vec<u8> = $out;
        let mut filled = 0usize;
        let mut rest: &[u8] = $input;
        while !rest.is_empty() {
            let budget = $limit - filled;
            let left = rest.len();
            match {
                let $r = &mut rest;
                $make
            } {
                Ok(mut decoder) => read_limited(&mut decoder, left, out, &mut filled, budget)?,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let length = length as usize;
                    if length > rest.len() {
                        return Err("truncated skippable frame".into());
                    }
                    rest = &rest[length..];
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(filled)
    }};
}

const LIMIT: usize = 64 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dec {
    Ruzstd08,
    Ruzstd09,
    Structured,
    Libzstd,
    /// The library's own decoder (src/protocol/zstd), through `records::decompress` as
    /// batches use it. It has no per-batch decoder state (its tables and literal buffer are
    /// kept per thread), so `new` and `reused` are the same call.
    Ours,
}

impl Dec {
    const ALL: [Dec; 5] = [
        Dec::Ruzstd08,
        Dec::Ruzstd09,
        Dec::Structured,
        Dec::Ours,
        Dec::Libzstd,
    ];
    fn name(self) -> &'static str {
        match self {
            Dec::Ruzstd08 => "ruzstd 0.8",
            Dec::Ruzstd09 => "ruzstd 0.9",
            Dec::Structured => "structured-zstd",
            Dec::Libzstd => "libzstd",
            Dec::Ours => "ours",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Dec::Ruzstd08 => "ruzstd08",
            Dec::Ruzstd09 => "ruzstd09",
            Dec::Structured => "structured_zstd",
            Dec::Libzstd => "libzstd",
            Dec::Ours => "ours",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    New,
    Reused,
}

impl Shape {
    const ALL: [Shape; 2] = [Shape::New, Shape::Reused];
    fn name(self) -> &'static str {
        match self {
            Shape::New => "new",
            Shape::Reused => "reused",
        }
    }
}

/// Decoder state kept across batches for the `reused` shape.
struct States {
    r08: ruzstd08::decoding::FrameDecoder,
    r09: ruzstd09::decoding::FrameDecoder,
    structured: structured_zstd::decoding::FrameDecoder,
    dctx: zstd::zstd_safe::DCtx<'static>,
}

impl States {
    fn new() -> Self {
        States {
            r08: ruzstd08::decoding::FrameDecoder::new(),
            r09: ruzstd09::decoding::FrameDecoder::new(),
            structured: structured_zstd::decoding::FrameDecoder::new(),
            dctx: zstd::zstd_safe::DCtx::create(),
        }
    }
}

/// Decodes `input` into `out[..n]` (out's bytes past n are scratch, kept for the next call
/// as the library keeps them) and returns n.
fn decode(
    dec: Dec,
    shape: Shape,
    st: &mut States,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<usize, String> {
    match (dec, shape) {
        (Dec::Ruzstd08, Shape::New) => ruzstd_frames!(ruzstd08, input, out, limit, |r| {
            ruzstd08::decoding::StreamingDecoder::new(r)
        }),
        (Dec::Ruzstd08, Shape::Reused) => ruzstd_frames!(ruzstd08, input, out, limit, |r| {
            ruzstd08::decoding::StreamingDecoder::new_with_decoder(r, &mut st.r08)
        }),
        (Dec::Ruzstd09, Shape::New) => ruzstd_frames!(ruzstd09, input, out, limit, |r| {
            ruzstd09::decoding::StreamingDecoder::new(r)
        }),
        (Dec::Ruzstd09, Shape::Reused) => ruzstd_frames!(ruzstd09, input, out, limit, |r| {
            ruzstd09::decoding::StreamingDecoder::new_with_decoder(r, &mut st.r09)
        }),
        // structured-zstd's StreamingDecoder reads concatenated and skippable frames
        // itself, and its constructor reads nothing (so cannot fail).
        (Dec::Structured, Shape::New) => {
            let decoder = structured_zstd::decoding::StreamingDecoder::new(input);
            let mut filled = 0;
            read_limited(decoder, input.len(), out, &mut filled, limit)?;
            Ok(filled)
        }
        (Dec::Structured, Shape::Reused) => {
            let decoder = structured_zstd::decoding::StreamingDecoder::new_with_decoder(
                input,
                &mut st.structured,
            );
            let mut filled = 0;
            read_limited(decoder, input.len(), out, &mut filled, limit)?;
            Ok(filled)
        }
        // The library's zstd-native code.
        (Dec::Libzstd, Shape::New) => {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| e.to_string())?;
            let mut filled = 0;
            read_limited(decoder, input.len(), out, &mut filled, limit)?;
            Ok(filled)
        }
        (Dec::Ours, _) => {
            use kafka_consumer::testing::records::{decompress_into, Compression};
            let mut filled = 0;
            decompress_into(Compression::Zstd, input, out, &mut filled, limit)
                .map_err(|e| e.to_string())?;
            Ok(filled)
        }
        (Dec::Libzstd, Shape::Reused) => {
            let decoder = zstd::stream::read::Decoder::with_context(input, &mut st.dctx);
            let mut filled = 0;
            read_limited(decoder, input.len(), out, &mut filled, limit)?;
            Ok(filled)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Timing

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer to a timespec.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One measurement: decode until `min_cpu` seconds of this thread's CPU, in chunks of
/// iterations long enough (~2 ms) that reading the clock costs nothing measurable.
/// Returns uncompressed MB per CPU second.
fn measure(
    dec: Dec,
    shape: Shape,
    st: &mut States,
    input: &[u8],
    expect_len: usize,
    out: &mut Vec<u8>,
    min_cpu: f64,
) -> f64 {
    let t0 = thread_cpu();
    decode(dec, shape, st, input, out, LIMIT).unwrap();
    let one = (thread_cpu() - t0).max(1e-7);
    let chunk = ((0.002 / one) as usize).clamp(1, 1 << 20);
    let start = thread_cpu();
    let mut iters = 0usize;
    let mut spent;
    loop {
        for _ in 0..chunk {
            let n = decode(dec, shape, st, std::hint::black_box(input), out, LIMIT).unwrap();
            debug_assert_eq!(n, expect_len);
            std::hint::black_box(&out[..n]);
        }
        iters += chunk;
        spent = thread_cpu() - start;
        if spent >= min_cpu {
            break;
        }
    }
    (iters * expect_len) as f64 / spent / 1e6
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

// ---------------------------------------------------------------------------------------
// Window probe: what a hostile frame that declares a large window costs each decoder.

/// A frame that declares a window of 2^`window_log` bytes (no content size, not single
/// segment) and holds `blocks` RLE blocks of 128 KiB of zeros: 4 bytes of input per 128 KiB
/// of output.
fn window_bomb(window_log: u32, blocks: usize) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, ((window_log - 10) << 3) as u8];
    for i in 0..blocks {
        let last = (i + 1 == blocks) as u32;
        let header = (128 * 1024u32) << 3 | 1 << 1 | last; // RLE block
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(0);
    }
    f
}

fn max_rss_kib() -> i64 {
    // SAFETY: a valid `who` and a valid pointer to an rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss
}

/// `--probe-window DECODER WINDOW_LOG OUTPUT_MIB LIMIT_KIB`: decode one such frame with the
/// library's code and a limit, in a process of its own, and report the outcome and the
/// process's peak RSS.
fn probe_window(mut args: impl Iterator<Item = String>) {
    let dec = match args.next().unwrap().as_str() {
        "ruzstd08" => Dec::Ruzstd08,
        "ruzstd09" => Dec::Ruzstd09,
        "structured_zstd" => Dec::Structured,
        "libzstd" => Dec::Libzstd,
        d => panic!("unknown decoder {d}"),
    };
    let window_log: u32 = args.next().unwrap().parse().unwrap();
    let mib: usize = args.next().unwrap().parse().unwrap();
    let limit_kib: usize = args.next().unwrap().parse().unwrap();
    let frame = window_bomb(window_log, mib * 8);
    let before = max_rss_kib();
    let mut st = States::new();
    let mut out = Vec::new();
    let r = decode(dec, Shape::New, &mut st, &frame, &mut out, limit_kib << 10);
    let outcome = match r {
        Ok(n) => format!("decoded {n} B"),
        Err(e) => format!("error: {e}"),
    };
    println!(
        "{} | window 2^{} | {} MiB of zeros in {} B | limit {} KiB | {} | peak RSS {} MiB (before {} MiB)",
        dec.name(),
        window_log,
        mib,
        frame.len(),
        limit_kib,
        outcome.chars().take(90).collect::<String>(),
        max_rss_kib() / 1024,
        before / 1024
    );
}

// ---------------------------------------------------------------------------------------

struct Row {
    kind: Kind,
    level: i32,
    size: usize,
    frame: FrameShape,
    raw_len: usize,
    zlen: usize,
    fcs: bool,
    window_log: Option<u32>,
    /// [shape][decoder] -> samples (MB/s)
    samples: Vec<Vec<Vec<f64>>>,
}

fn size_name(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else {
        format!("{} KiB", size >> 10)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut min_cpu = 0.3;
    let mut reps = 5usize;
    let mut frames = vec![FrameShape::Stream];
    let mut out_path: Option<String> = None;
    let mut quick = false;
    let mut only: Option<Vec<String>> = None;
    let mut kinds_only: Option<Vec<String>> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                quick = true;
                min_cpu = 0.01;
                reps = 1;
            }
            "--min-cpu" => min_cpu = args.next().unwrap().parse().unwrap(),
            "--reps" => reps = args.next().unwrap().parse().unwrap(),
            "--frames" => {
                frames = match args.next().unwrap().as_str() {
                    "stream" => vec![FrameShape::Stream],
                    "bulk" => vec![FrameShape::Bulk],
                    "both" => vec![FrameShape::Stream, FrameShape::Bulk],
                    f => panic!("--frames {f}: stream, bulk or both"),
                }
            }
            "--out" => out_path = Some(args.next().unwrap()),
            // Only these payload kinds (names, comma-separated).
            "--kinds" => {
                kinds_only = Some(args.next().unwrap().split(',').map(String::from).collect())
            }
            // Time only these decoders (keys, comma-separated); the others show as NaN.
            "--decoders" => {
                only = Some(args.next().unwrap().split(',').map(String::from).collect())
            }
            "--probe-window" => return probe_window(args),
            a => panic!("unknown argument {a}; see the header of src/main.rs"),
        }
    }
    let command: Vec<String> = std::env::args().collect();
    let sizes = [16 << 10, 64 << 10, 256 << 10, 1 << 20];
    let levels = [3, 9];
    let wall = Instant::now();

    let mut st = States::new();
    let mut out = Vec::new();
    let mut rows = Vec::new();
    for &frame in &frames {
        for kind in Kind::ALL {
            if kinds_only.as_ref().is_some_and(|o| !o.iter().any(|k| k == kind.name())) {
                continue;
            }
            for level in levels {
                for (si, &size) in sizes.iter().enumerate() {
                    let raw = payload(kind, size, 0x5EED_0000 + si as u64 * 16 + kind as u64);
                    let z = compress(&raw, level, frame);
                    let (fcs, window_log) = frame_info(&z);
                    // Check every decoder and shape before timing anything.
                    for shape in Shape::ALL {
                        for dec in Dec::ALL {
                            let n = decode(dec, shape, &mut st, &z, &mut out, LIMIT)
                                .unwrap_or_else(|e| panic!("{} {}: {e}", dec.name(), shape.name()));
                            assert!(
                                n == raw.len() && out[..n] == raw[..],
                                "{} ({}) decoded {} {} L{} wrongly",
                                dec.name(),
                                shape.name(),
                                kind.name(),
                                size_name(size),
                                level
                            );
                        }
                    }
                    let mut samples = vec![vec![Vec::new(); Dec::ALL.len()]; Shape::ALL.len()];
                    for _ in 0..reps {
                        for (hi, shape) in Shape::ALL.into_iter().enumerate() {
                            for (di, dec) in Dec::ALL.into_iter().enumerate() {
                                if only.as_ref().is_some_and(|o| !o.iter().any(|k| k == dec.key())) {
                                    samples[hi][di].push(f64::NAN);
                                    continue;
                                }
                                let mbs =
                                    measure(dec, shape, &mut st, &z, raw.len(), &mut out, min_cpu);
                                samples[hi][di].push(mbs);
                            }
                        }
                    }
                    let row = Row {
                        kind,
                        level,
                        size,
                        frame,
                        raw_len: raw.len(),
                        zlen: z.len(),
                        fcs,
                        window_log,
                        samples,
                    };
                    eprintln!("{}", line(&row, Shape::New, frames.len() > 1));
                    rows.push(row);
                }
            }
        }
    }
    let elapsed = wall.elapsed().as_secs_f64();
    let md = markdown(
        &rows,
        frames.len() > 1,
        reps,
        min_cpu,
        quick,
        &command,
        elapsed,
    );
    println!("{md}");
    if let Some(p) = out_path {
        std::fs::write(format!("{p}.md"), &md).unwrap();
        std::fs::write(format!("{p}.json"), json(&rows, reps, min_cpu, &command)).unwrap();
        eprintln!("wrote {p}.md and {p}.json");
    }
}

fn med(row: &Row, shape: Shape, di: usize) -> f64 {
    let hi = Shape::ALL.iter().position(|&s| s == shape).unwrap();
    median(&mut row.samples[hi][di].clone())
}

/// Largest (max - min) / median over a row's cells, for the spread note.
fn spread(row: &Row) -> f64 {
    let mut worst: f64 = 0.0;
    for shape_samples in &row.samples {
        for s in shape_samples {
            let mut v = s.clone();
            let m = median(&mut v);
            worst = worst.max((v[v.len() - 1] - v[0]) / m);
        }
    }
    worst
}

fn line(row: &Row, shape: Shape, with_frame: bool) -> String {
    let lib = med(row, shape, Dec::ALL.len() - 1);
    let mut s = format!(
        "| {} | {} | {} |",
        row.kind.name(),
        row.level,
        size_name(row.size)
    );
    if with_frame {
        let _ = write!(s, " {} |", row.frame.name());
    }
    let _ = write!(
        s,
        " {:.2} | {} |",
        row.raw_len as f64 / row.zlen as f64,
        row.window_log
            .map_or("single".to_string(), |w| format!("2^{w}")),
    );
    for di in 0..Dec::ALL.len() {
        let m = med(row, shape, di);
        if di == Dec::ALL.len() - 1 {
            let _ = write!(s, " {m:.0} |");
        } else {
            let _ = write!(s, " {m:.0} ({:.2}x) |", m / lib);
        }
    }
    s
}

fn markdown(
    rows: &[Row],
    with_frame: bool,
    reps: usize,
    min_cpu: f64,
    quick: bool,
    command: &[String],
    elapsed: f64,
) -> String {
    let mut s = String::new();
    if quick {
        s.push_str(
            "**Quick run (--quick): one short measurement per cell, not for comparison.**\n\n",
        );
    }
    let _ = writeln!(
        s,
        "Decode-only throughput, uncompressed MB (10^6 B) per CPU second of the decoding \
         thread; median of {reps} measurements of at least {min_cpu} s CPU each; in brackets \
         the ratio to libzstd in the same shape. Ratio = uncompressed / compressed size; \
         window = the frame header's window size. Largest spread in a row ((max - min) / \
         median of one cell): {:.0} %. Run time {:.0} s. Binary args: `{}`.\n",
        rows.iter().map(spread).fold(0.0, f64::max) * 100.0,
        elapsed,
        command[1..].join(" ")
    );
    for shape in Shape::ALL {
        let title = match shape {
            Shape::New => "New decoder per batch (what src/protocol/records.rs does today)",
            Shape::Reused => "Decoder state reused across batches (FrameDecoder / DCtx kept)",
        };
        let _ = writeln!(s, "### {title}\n");
        s.push_str("| kind | level | batch |");
        if with_frame {
            s.push_str(" frame |");
        }
        s.push_str(" ratio | window |");
        for d in Dec::ALL {
            let _ = write!(s, " {} MB/s |", d.name());
        }
        s.push_str("\n|---|--:|--:|");
        if with_frame {
            s.push_str("---|");
        }
        s.push_str("--:|--:|");
        for _ in Dec::ALL {
            s.push_str("--:|");
        }
        s.push('\n');
        for row in rows {
            s.push_str(&line(row, shape, with_frame));
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

fn json(rows: &[Row], reps: usize, min_cpu: f64, command: &[String]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\n  \"unit\": \"uncompressed MB (1e6 B) per thread-CPU second\",\n  \
         \"reps\": {reps},\n  \"min_cpu_s\": {min_cpu},\n  \"args\": {:?},\n  \"rows\": [\n",
        command[1..].join(" ")
    );
    for (i, row) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "    {{\"kind\": \"{}\", \"level\": {}, \"target_size\": {}, \"frame\": \"{}\", \
             \"uncompressed\": {}, \"compressed\": {}, \"content_size_in_header\": {}, \
             \"window_log\": {}, \"results\": {{",
            row.kind.name(),
            row.level,
            row.size,
            row.frame.name(),
            row.raw_len,
            row.zlen,
            row.fcs,
            row.window_log.map_or("null".to_string(), |w| w.to_string()),
        );
        let mut first = true;
        for (hi, shape) in Shape::ALL.into_iter().enumerate() {
            for (di, dec) in Dec::ALL.into_iter().enumerate() {
                let v = &row.samples[hi][di];
                let _ = write!(
                    s,
                    "{}\"{}/{}\": {{\"median\": {:.1}, \"samples\": [{}]}}",
                    if first { "" } else { ", " },
                    dec.key(),
                    shape.name(),
                    median(&mut v.clone()),
                    v.iter()
                        .map(|x| format!("{x:.1}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                first = false;
            }
        }
        let _ = writeln!(s, "}}}}{}", if i + 1 < rows.len() { "," } else { "" });
    }
    s.push_str("  ]\n}\n");
    s
}
