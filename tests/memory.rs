//! Memory on hostile or huge data: a count, a declared size or a compression ratio read off
//! the wire must never decide how much the consumer allocates; `fetch.buffer.bytes` bounds
//! what it holds; one huge response does not stay allocated after its records are gone.
//!
//! Its own test binary, so the process's resident memory (`/proc/self/status`) is this
//! file's alone. The tests run one at a time (a static mutex), and each resets the peak
//! (`VmHWM`, through `/proc/self/clear_refs`) before its scenario, so the peak it reads is
//! its own. Faults come from the fake cluster (`tests/common/fake`).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::fake::*;
use kafka_consumer::testing::records::testing::{
    encode_batch, encode_records, BatchSpec, RecordSpec,
};
use kafka_consumer::{Consumer, ConsumerConfig, Error, ErrorKind, OffsetReset, TopicPartition};

const MIB: usize = 1024 * 1024;

/// One scenario at a time: they share the process's memory counters.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A field of `/proc/self/status` in bytes.
fn status(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

fn rss() -> usize {
    status("VmRSS:")
}

fn peak() -> usize {
    status("VmHWM:")
}

/// Starts a new peak measurement: `VmHWM` becomes the current `VmRSS`.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    assert!(peak() <= rss() + MIB, "VmHWM was reset");
}

fn mib(n: usize) -> String {
    format!("{:.1} MiB", n as f64 / MIB as f64)
}

fn config(bootstrap: &str) -> ConsumerConfig {
    ConsumerConfig::new(bootstrap)
        .client_id("memory-test")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30))
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

/// A fake cluster serving partition 0 of `t` with `log`.
fn one_partition(log: Log) -> FakeCluster {
    FakeCluster::start(1, serve_logs(HashMap::from([(0, log)])))
}

/// Polls until `poll` fails, keeping the offsets of records that came first.
fn poll_error(c: &mut Consumer, limit: Duration) -> (Error, Vec<i64>) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => return (e, got),
            Ok(recs) => got.extend(recs.iter().map(|r| r.offset())),
        }
        assert!(Instant::now() < deadline, "no error within {limit:?}");
    }
}

/// Runs a consumer on `log` until its first error, and returns the error and how much the
/// peak resident memory grew meanwhile. `good`: the offsets expected before the error.
fn first_error_and_growth(
    log: Log,
    good: &[i64],
    cfg: impl Fn(&str) -> ConsumerConfig,
) -> (Error, usize) {
    let fake = one_partition(log);
    reset_peak();
    let base = rss();
    let mut c = Consumer::new(cfg(&fake.addr(0))).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let (e, got) = poll_error(&mut c, Duration::from_secs(20));
    assert_eq!(got, good, "the records before the bad batch arrive first");
    let growth = peak().saturating_sub(base);
    eprintln!("{e}\npeak grew by {}", mib(growth));
    c.close().unwrap();
    (e, growth)
}

/// A log with a good batch (offsets 0, 1) followed by `bad`, which holds offsets 2..`next`.
fn good_then(bad: Vec<u8>, next: i64) -> Log {
    let mut log = Log::default();
    log.append(2);
    log.append_batch(2, next, bad);
    log
}

/// A log whose first batch is `bad`, holding offsets 2..`next` (offsets 0 and 1 were
/// compacted away): a fetch from the start returns it first.
fn bad_first(bad: Vec<u8>, next: i64) -> Log {
    let mut log = Log::default();
    log.append_batch(2, next, bad);
    log
}

/// The error names the partition and the bad batch's offset.
fn assert_names_the_batch(e: &Error) {
    assert_eq!(e.partition(), Some(&tp(0)), "{e}");
    assert_eq!(e.offset(), Some(2), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("t-0") && msg.contains("offset 2"), "{msg}");
}

// ----- 13: a record count from the wire -----------------------------------------------

#[test]
fn a_batch_claiming_two_billion_records_is_an_error_naming_its_offset_without_allocating_for_them()
{
    let _s = serial();
    let records: [RecordSpec<'_>; 3] = [
        (0, 0, None, Some(b"a"), &[]),
        (1, 0, None, Some(b"b"), &[]),
        (2, 0, None, Some(b"c"), &[]),
    ];
    let plain = encode_batch(&BatchSpec {
        base_offset: 2,
        records: &records,
        record_count: Some(i32::MAX),
        ..BatchSpec::default()
    });
    let section = encode_records(&records);
    let zstd = encode_batch(&BatchSpec {
        base_offset: 2,
        attributes: ZSTD,
        last_offset_delta: Some(2),
        records_section: Some(&zstd_frame(&section)),
        record_count: Some(i32::MAX),
        ..BatchSpec::default()
    });
    for (what, bad) in [("uncompressed", plain), ("zstd", zstd)] {
        // First in the answer, and after a good batch.
        for (log, good) in [
            (bad_first(bad.clone(), 5), &[][..]),
            (good_then(bad, 5), &[0, 1][..]),
        ] {
            let (e, growth) = first_error_and_growth(log, good, config);
            assert_names_the_batch(&e);
            assert!(
                growth < 16 * MIB,
                "{what}: peak resident memory grew by {}",
                mib(growth)
            );
        }
    }
}

// ----- 14: a declared decompressed size -----------------------------------------------

/// A raw snappy block that declares `n` decompressed bytes and holds one short literal.
fn lying_snappy_block(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let mut v = n;
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
    b.push(15 << 2); // a literal of 16 bytes
    b.extend_from_slice(&[7; 16]);
    b
}

#[test]
fn a_snappy_block_declaring_512_mib_is_an_error_and_allocates_nothing_of_the_sort() {
    let _s = serial();
    let block = lying_snappy_block(512 * MIB as u32);
    // Xerial framing, as the Java producer writes it: header, then length-prefixed blocks.
    let mut xerial = vec![
        0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
    ];
    for _ in 0..4 {
        xerial.extend_from_slice(&(block.len() as i32).to_be_bytes());
        xerial.extend_from_slice(&block);
    }
    for (what, section) in [("raw", block.clone()), ("xerial", xerial)] {
        let bad = compressed_batch(2, 3, SNAPPY, &section);
        // check.crcs=false: nothing but the codec stands between the claim and memory.
        let (e, growth) =
            first_error_and_growth(bad_first(bad, 5), &[], |b| config(b).check_crcs(false));
        assert_names_the_batch(&e);
        assert!(
            growth < 16 * MIB,
            "{what}: peak resident memory grew by {}",
            mib(growth)
        );
    }
}

// ----- 15: a compression bomb -----------------------------------------------------------

#[test]
fn a_32_kib_zstd_batch_inflating_to_1_gib_is_too_large_naming_where_to_seek_in_bounded_memory() {
    let _s = serial();
    assert_zstd_bomb_is_too_large(zstd_zeros(1 << 30));
}

/// A zstd frame may declare a window far larger than its batch (up to 2^41 bytes): a
/// decoder keeps that much history, and the pure-Rust one hands out nothing before it has
/// it, so the output limit alone would act only after a gigabyte was held. The declared
/// history is checked against the budget before any decoder is made.
#[test]
fn a_zstd_frame_declaring_a_terabyte_window_is_too_large_before_anything_is_decoded() {
    let _s = serial();
    assert_zstd_bomb_is_too_large(zstd_zeros_in_window(1 << 30, 0xF0));
}

/// `bomb`, a zstd frame of at most 40 KiB, as the batch after a good one: a RecordTooLarge
/// error naming the batch and where to seek, with the process's peak growing by less than
/// 56 MiB. The decoders stop at the 32 MiB budget; the rest is glibc's: decoding a batch
/// that does not fit is tried in a growing buffer, then in one allocation of the whole
/// limit (`records::decompress_into`), and once a freed buffer has raised glibc's dynamic
/// mmap threshold the first buffer comes from the heap, which keeps it resident (with a
/// fixed threshold, `MALLOC_MMAP_THRESHOLD_=131072`, the peak grows 34 MiB).
fn assert_zstd_bomb_is_too_large(bomb: Vec<u8>) {
    assert!(bomb.len() <= 40 * 1024, "{} bytes", bomb.len());
    let bad = compressed_batch(2, 1000, ZSTD, &bomb);
    let (e, growth) = first_error_and_growth(good_then(bad, 1002), &[0, 1], config);
    assert_eq!(e.kind(), ErrorKind::RecordTooLarge, "{e}");
    assert_names_the_batch(&e);
    assert_eq!(e.skip_to(), Some(1002), "{e}");
    assert!(e.to_string().contains("seek to 1002"), "{e}");
    assert!(
        growth < 56 * MIB,
        "peak resident memory grew by {}",
        mib(growth)
    );
}

// ----- 16: the prefetch budget ----------------------------------------------------------

#[test]
fn four_partitions_of_12_mib_batches_stay_within_the_prefetch_budget_and_arrive_exactly_once() {
    let _s = serial();
    const PARTITIONS: i32 = 4;
    const BATCHES: i64 = 3;
    const PER_BATCH: i64 = 12;
    let value = vec![0u8; MIB];
    let mut logs = HashMap::new();
    let mut compressed = 0;
    for p in 0..PARTITIONS {
        let mut log = Log::default();
        for b in 0..BATCHES {
            let base = b * PER_BATCH;
            let recs: Vec<RecordSpec<'_>> = (0..PER_BATCH as i32)
                .map(|i| (i, 0, None, Some(&value[..]), &[][..]))
                .collect();
            let section = encode_records(&recs);
            let frame = zstd_frame(&section);
            let bytes = compressed_batch(base, PER_BATCH as i32, ZSTD, &frame);
            compressed += bytes.len();
            log.append_batch(base, base + PER_BATCH, bytes);
        }
        logs.insert(p, log);
    }
    drop(value);
    let budget = 16 * MIB;
    // One response: at most every batch of every partition, plus framing.
    let response = compressed + 64 * 1024;
    let fake = FakeCluster::start(1, serve_logs(logs));
    reset_peak();
    let base = rss();
    let mut c = Consumer::new(config(&fake.addr(0)).fetch_buffer_bytes(budget)).unwrap();
    let all: Vec<TopicPartition> = (0..PARTITIONS).map(tp).collect();
    c.assign(&all).unwrap();

    // The application does not poll for a while: the consumer fetches ahead, up to the
    // budget, and stops.
    let mut most = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        let m = c.metrics();
        most = most.max(m.prefetched_bytes);
        std::thread::sleep(Duration::from_millis(5));
    }
    let m = c.metrics();
    eprintln!(
        "not polling: prefetched at most {}, now {} (blocked: {})",
        mib(most),
        mib(m.prefetched_bytes),
        m.fetch_blocked_by_memory
    );
    assert!(most > 0, "it fetched ahead");
    assert!(
        most <= budget + response,
        "prefetched {} with a budget of {} and responses of at most {}",
        mib(most),
        mib(budget),
        mib(response)
    );
    assert!(
        m.fetch_blocked_by_memory,
        "fetching waits for the application"
    );

    // Now it polls: everything arrives, exactly once, in order per partition.
    let mut seen: BTreeSet<(i32, i64)> = BTreeSet::new();
    let mut next: HashMap<i32, i64> = HashMap::new();
    let want = (PARTITIONS as i64 * BATCHES * PER_BATCH) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} records arrived",
            seen.len()
        );
        let recs = c.poll(Duration::from_millis(500)).expect("poll");
        for r in &recs {
            assert_eq!(r.value().map(<[u8]>::len), Some(MIB));
            let n = next.entry(r.partition()).or_insert(0);
            assert_eq!(r.offset(), *n, "partition {} in order", r.partition());
            *n += 1;
            assert!(seen.insert((r.partition(), r.offset())), "once only");
        }
        let m = c.metrics();
        most = most.max(m.prefetched_bytes);
    }
    assert!(
        most <= budget + response,
        "prefetched {} while polling",
        mib(most)
    );
    assert!(c.poll(Duration::from_millis(700)).unwrap().is_empty());
    let growth = peak().saturating_sub(base);
    eprintln!("peak grew by {}", mib(growth));
    assert!(
        growth < budget + 24 * MIB,
        "peak resident memory grew by {} with a budget of {}",
        mib(growth),
        mib(budget)
    );
}

// ----- 17: one huge response --------------------------------------------------------------

#[test]
fn a_100_mib_response_does_not_stay_allocated_after_its_records_are_dropped() {
    let _s = serial();
    const RECORDS: i32 = 100;
    let fetched = Arc::new(AtomicUsize::new(0));
    let f2 = Arc::clone(&fetched);
    // The batch is built when first asked for, and not kept: the fake's own copy is gone
    // once it is sent.
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| {
            if w.offset > 0 {
                return FetchPart::empty(RECORDS as i64);
            }
            f2.fetch_add(1, Ordering::SeqCst);
            let value = vec![1u8; MIB];
            let recs: Vec<RecordSpec<'_>> = (0..RECORDS)
                .map(|i| (i, 0, None, Some(&value[..]), &[][..]))
                .collect();
            FetchPart::records(
                RECORDS as i64,
                encode_batch(&BatchSpec {
                    records: &recs,
                    ..BatchSpec::default()
                }),
            )
        }),
        _ => Reply::Close,
    });
    let cfg = config(&fake.addr(0))
        .fetch_max_bytes(200 * MIB as i32)
        .max_partition_fetch_bytes(200 * MIB as i32)
        .fetch_buffer_bytes(256 * MIB);
    let base = rss();
    let mut c = Consumer::new(cfg).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let mut held = Vec::new();
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while n < RECORDS as usize {
        assert!(Instant::now() < deadline, "{n} of {RECORDS} records");
        let recs = c.poll(Duration::from_millis(500)).unwrap();
        n += recs.len();
        held.push(recs);
    }
    let holding = rss();
    eprintln!("base {}, holding the records {}", mib(base), mib(holding));
    assert!(
        holding >= base + 90 * MIB,
        "the records are resident while held"
    );
    assert_eq!(fetched.load(Ordering::SeqCst), 1, "one huge response");
    drop(held);
    // Fetching goes on (empty long polls), and the memory is given back to the system.
    assert!(c.poll(Duration::from_millis(700)).unwrap().is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = rss();
    while after >= base + 40 * MIB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = rss();
    }
    eprintln!("after dropping them {}", mib(after));
    assert!(
        after < base + 40 * MIB,
        "the response's memory was given back: {} before, {} after",
        mib(base),
        mib(after)
    );
    assert!(c.metrics().prefetched_bytes < MIB);
}

// ----- spare buffers and the budget -----------------------------------------------------

#[test]
fn spare_pooled_buffers_never_keep_a_batch_that_fits_the_budget_from_being_delivered() {
    let _s = serial();
    // First ~1 MiB uncompressed batches (their frames become spare buffers once the
    // application drops them), then a zstd batch inflating to 15 MiB: it fits the 16 MiB
    // budget only if the spares give way.
    let small = vec![7u8; 100 * 1024];
    let big = vec![0u8; MIB];
    let mut log = Log::default();
    for b in 0..6 {
        let recs: Vec<RecordSpec<'_>> = (0..9)
            .map(|i| (i, 0, None, Some(&small[..]), &[][..]))
            .collect();
        log.append_batch(
            b * 9,
            b * 9 + 9,
            encode_batch(&BatchSpec {
                base_offset: b * 9,
                records: &recs,
                ..BatchSpec::default()
            }),
        );
    }
    let recs: Vec<RecordSpec<'_>> = (0..15)
        .map(|i| (i, 0, None, Some(&big[..]), &[][..]))
        .collect();
    let section = encode_records(&recs);
    log.append_batch(
        54,
        69,
        compressed_batch(54, 15, ZSTD, &zstd_frame(&section)),
    );
    let fake = one_partition(log);
    let mut c = Consumer::new(config(&fake.addr(0)).fetch_buffer_bytes(16 * MIB)).unwrap();
    c.assign(&[tp(0)]).unwrap();
    let mut next = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while next < 69 {
        assert!(
            Instant::now() < deadline,
            "stuck at offset {next} (prefetched {}, blocked: {})",
            mib(c.metrics().prefetched_bytes),
            c.metrics().fetch_blocked_by_memory
        );
        let recs = c.poll(Duration::from_millis(200)).expect("poll");
        for r in &recs {
            assert_eq!(r.offset(), next);
            next += 1;
        }
    }
}
