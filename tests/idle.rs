//! Busy loops: after a fault, the I/O thread must wait (backoffs, spaced metadata
//! refreshes), not spin. Each test provokes one fault, lets the consumer settle, then
//! measures the CPU time of its I/O thread over a window (idle is ~0 %, a spin ~100 % of a
//! core) and, where a request rate matters, counts the requests the broker got in that
//! window. Where the fault then clears, the consumer must recover and be idle again.
//!
//! Faults come from the fake cluster (`tests/common/fake`); idle connections closed
//! by the broker are also checked against a real broker of our own.

mod common;

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake::*;
use common::{IoThread, OwnBroker, Produce};
use kafka_consumer::testing::records::testing::{
    encode_batch, encode_records, BatchSpec, RecordSpec,
};
use kafka_consumer::{Consumer, ConsumerConfig, Error, ErrorKind, OffsetReset, TopicPartition};

/// The measuring window.
const WINDOW: Duration = Duration::from_secs(3);
/// Time for retries to reach their steady pace before measuring.
const SETTLE: Duration = Duration::from_millis(1500);
/// The most CPU an idle I/O thread may use (a busy loop uses ~1.0).
const IDLE: f64 = 0.05;

fn config(bootstrap: &str) -> ConsumerConfig {
    ConsumerConfig::new(bootstrap)
        .client_id("idle-test")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30))
}

fn tp0() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// Waits (without polling the consumer) until `cond` holds.
fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What happened during one measuring window.
#[derive(Debug)]
struct Window {
    busy: f64,
    metadata: usize,
    fetches: usize,
    list_offsets: usize,
    find_coordinator: usize,
    connections: usize,
}

/// Lets the consumer settle, then measures its I/O thread and the requests `fake` got
/// over [`WINDOW`].
fn measure(io: &IoThread, fake: &FakeCluster) -> Window {
    std::thread::sleep(SETTLE);
    let snap = || {
        (
            fake.count(METADATA),
            fake.count(FETCH),
            fake.count(LIST_OFFSETS),
            fake.count(FIND_COORDINATOR),
            fake.connections(),
        )
    };
    let before = snap();
    let busy = io.busy_fraction_over(WINDOW);
    let after = snap();
    let w = Window {
        busy,
        metadata: after.0 - before.0,
        fetches: after.1 - before.1,
        list_offsets: after.2 - before.2,
        find_coordinator: after.3 - before.3,
        connections: after.4 - before.4,
    };
    eprintln!("window: {w:?}");
    w
}

/// At most `per_sec` per second over the window.
fn at_most(per_sec: usize) -> usize {
    per_sec * WINDOW.as_secs() as usize
}

fn assert_idle(w: &Window, what: &str) {
    assert!(
        w.busy < IDLE,
        "{what}: the I/O thread used {:.0} % of a core over {WINDOW:?} ({w:?})",
        w.busy * 100.0
    );
}

/// Polls until `n` records arrived (their offsets) or `limit` passes.
fn poll_records(c: &mut Consumer, n: usize, limit: Duration) -> Vec<i64> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records within {limit:?}: {got:?}",
            got.len()
        );
        let recs = c.poll(Duration::from_millis(200)).expect("poll");
        got.extend(recs.iter().map(|r| r.offset()));
    }
    got
}

/// Polls until `poll` fails (records are not expected) or `limit` passes.
fn poll_error(c: &mut Consumer, limit: Duration) -> Error {
    let deadline = Instant::now() + limit;
    loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => return e,
            Ok(recs) => assert!(recs.is_empty(), "no records expected"),
        }
        assert!(Instant::now() < deadline, "no error within {limit:?}");
    }
}

/// A cluster serving topic `t` (one partition, `log`) whose fetches of t-0 get `fault`
/// while `faulty` holds; counts the faulty answers.
fn faulty_fetches(
    log: Log,
    faulty: Arc<AtomicBool>,
    fault: impl Fn(&Wanted) -> FetchPart + Send + Sync + 'static,
    faults: Arc<AtomicUsize>,
) -> FakeCluster {
    FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, ts| {
            (0, if ts == -1 { log.end() } else { 0 })
        })),
        FETCH => fetch_reply(r, |w| {
            if faulty.load(Ordering::SeqCst) {
                faults.fetch_add(1, Ordering::SeqCst);
                fault(w)
            } else {
                log.answer(w)
            }
        }),
        _ => Reply::Close,
    })
}

fn partition_error(code: i16) -> impl Fn(&Wanted) -> FetchPart + Send + Sync {
    move |_| FetchPart::error(code)
}

// ----- 1, 2: a partition error that never clears --------------------------------------

fn a_leader_error_for_good_is_idle(code: i16) {
    let faults = Arc::new(AtomicUsize::new(0));
    let fake = faulty_fetches(
        Log::default(),
        Arc::new(AtomicBool::new(true)),
        partition_error(code),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for(
        "the fault to be answered twice",
        Duration::from_secs(10),
        || faults.load(Ordering::SeqCst) >= 2,
    );
    let w = measure(&io, &fake);
    assert_idle(&w, &format!("fetch error {code} for good"));
    assert!(
        w.metadata <= at_most(3),
        "metadata refreshes are spaced: {} in {WINDOW:?}",
        w.metadata
    );
    assert!(
        w.fetches <= at_most(3),
        "fetch retries back off: {} in {WINDOW:?}",
        w.fetches
    );
}

#[test]
fn not_leader_for_good_leaves_the_thread_idle_with_spaced_metadata_refreshes() {
    a_leader_error_for_good_is_idle(6);
}

#[test]
fn fenced_leader_epoch_for_good_leaves_the_thread_idle_with_spaced_metadata_refreshes() {
    a_leader_error_for_good_is_idle(74);
}

// ----- 3, 11: a partition error that clears -------------------------------------------

#[test]
fn not_leader_for_two_seconds_then_records_arrive_and_the_thread_is_idle_again() {
    let faulty = Arc::new(AtomicBool::new(true));
    let faults = Arc::new(AtomicUsize::new(0));
    let mut log = Log::default();
    log.append(5);
    let fake = faulty_fetches(
        log,
        Arc::clone(&faulty),
        partition_error(6),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for("the first NOT_LEADER", Duration::from_secs(10), || {
        faults.load(Ordering::SeqCst) >= 1
    });
    std::thread::sleep(Duration::from_secs(2));
    faulty.store(false, Ordering::SeqCst);
    let cleared = Instant::now();
    assert_eq!(
        poll_records(&mut c, 5, Duration::from_secs(5)),
        vec![0, 1, 2, 3, 4]
    );
    eprintln!("records {:?} after the fault cleared", cleared.elapsed());
    let w = measure(&io, &fake);
    assert_idle(&w, "after NOT_LEADER cleared, on an empty log");
    assert!(w.metadata <= 1, "no more refreshes: {w:?}");
}

// ----- 4: the broker closes idle connections ------------------------------------------

#[test]
fn a_broker_closing_idle_connections_does_not_make_the_consumer_reconnect_in_a_loop() {
    let mut log = Log::default();
    log.append(3);
    let fake = FakeCluster::with(
        Options {
            idle_close: Some(Duration::from_millis(300)),
            ..Options::default()
        },
        serve_logs(HashMap::from([(0, log)])),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(10)),
        vec![0, 1, 2]
    );
    wait_for(
        "the broker to close an idle link",
        Duration::from_secs(5),
        || fake.idle_closes() >= 1,
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "a broker closing connections idle for 300 ms");
    assert!(
        w.connections <= 2,
        "links closed while idle are not reopened in a loop: {} new connections in {WINDOW:?}",
        w.connections
    );
    // Still consuming: new records are fetched on the fetch link, which stays busy.
    assert!(w.fetches >= 2, "the fetch long-polls go on: {w:?}");
    // Paused, nothing is fetched: the broker closes the fetch link too, and nothing
    // reopens it.
    c.pause(&[tp0()]).unwrap();
    let w = measure(&io, &fake);
    assert_idle(&w, "paused, with a broker closing idle connections");
    assert_eq!(w.fetches, 0, "{w:?}");
    assert!(w.connections <= 1, "{w:?}");
}

#[test]
fn a_real_broker_with_a_short_connections_max_idle_ms_leaves_an_idle_consumer_idle() {
    let broker = OwnBroker::start_with("idle-close-test", 19492, &["connections.max.idle.ms=3000"]);
    let topic = common::unique_topic("idle-close");
    let mut p = Produce::new(&topic, 1, 0);
    p.bootstrap = Some(&broker.bootstrap);
    p.run();
    let (mut c, io) = IoThread::of(config(&broker.bootstrap));
    let tp = TopicPartition::new(topic.as_str(), 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(c.position(&tp).unwrap(), 0);
    assert!(c.poll(Duration::from_millis(500)).unwrap().is_empty());
    let port: u16 = broker
        .bootstrap
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        sockets_to(port) >= 2,
        "control and fetch links are open: {}",
        sockets_to(port)
    );
    // Past connections.max.idle.ms the broker closes the idle links; the fetch link, busy
    // with long polls, stays.
    wait_for(
        "the broker to close the idle links",
        Duration::from_secs(20),
        || sockets_to(port) == 1,
    );
    std::thread::sleep(SETTLE);
    let busy = io.busy_fraction_over(WINDOW);
    eprintln!("busy {busy:.3}");
    assert!(
        busy < IDLE,
        "after the broker closed idle links the I/O thread used {:.0} % of a core",
        busy * 100.0
    );
    assert_eq!(sockets_to(port), 1, "nothing reconnected the closed links");
    // And it still works.
    assert_eq!(c.end_offsets(std::slice::from_ref(&tp)).unwrap()[&tp], 0);
}

/// This process's established TCP connections to 127.0.0.1:`port` (its sockets, found
/// through `/proc/self/fd`, matched with `/proc/net/tcp`).
fn sockets_to(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .flatten()
    {
        if let Ok(link) = std::fs::read_link(fd.path()) {
            let link = link.to_string_lossy().into_owned();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let remote = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/self/net/tcp")
        .expect("/proc/self/net/tcp")
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl, local, remote, state (01: established), ..., inode (10th)
            f.len() > 9 && f[2] == remote && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

// ----- 5: answers that do not move the position ---------------------------------------

#[test]
fn a_batch_that_never_completes_is_reported_after_a_few_answers_and_the_thread_is_idle() {
    let full = batch(0, 5);
    let half = full[..full.len() / 2].to_vec();
    let faults = Arc::new(AtomicUsize::new(0));
    let fake = faulty_fetches(
        Log::default(),
        Arc::new(AtomicBool::new(true)),
        move |_| FetchPart::records(5, half.clone()),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    let e = poll_error(&mut c, Duration::from_secs(15));
    eprintln!("{e}");
    assert_eq!(e.partition(), Some(&tp0()), "{e}");
    assert_eq!(e.offset(), Some(0), "{e}");
    assert!(e.to_string().contains("t-0"), "{e}");
    assert!(
        faults.load(Ordering::SeqCst) >= 2,
        "reported after a few answers, not the first"
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "a batch cut short for good");
    assert!(w.fetches <= at_most(2), "refetches back off: {w:?}");
}

#[test]
fn a_batch_cut_short_that_later_completes_is_delivered_and_the_thread_is_idle_again() {
    let mut log = Log::default();
    log.append(5);
    let full = batch(0, 5);
    let half = full[..full.len() / 2].to_vec();
    let faulty = Arc::new(AtomicBool::new(true));
    let faults = Arc::new(AtomicUsize::new(0));
    let fake = faulty_fetches(
        log,
        Arc::clone(&faulty),
        move |_| FetchPart::records(5, half.clone()),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for("partial answers", Duration::from_secs(10), || {
        faults.load(Ordering::SeqCst) >= 3
    });
    faulty.store(false, Ordering::SeqCst);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 5 {
        assert!(
            Instant::now() < deadline,
            "records after the batch completed"
        );
        match c.poll(Duration::from_millis(200)) {
            Ok(recs) => got.extend(recs.iter().map(|r| r.offset())),
            // The stall may have been reported before it cleared.
            Err(e) => assert_eq!(e.partition(), Some(&tp0()), "{e}"),
        }
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    let w = measure(&io, &fake);
    assert_idle(&w, "after the batch completed");
}

#[test]
fn a_batch_with_a_negative_last_offset_delta_is_reported_at_once_and_the_thread_is_idle() {
    let bad = encode_batch(&BatchSpec {
        base_offset: 0,
        last_offset_delta: Some(-3),
        records: &[(0, 0, None, Some(b"x"), &[])],
        ..BatchSpec::default()
    });
    let faults = Arc::new(AtomicUsize::new(0));
    let fake = faulty_fetches(
        Log::default(),
        Arc::new(AtomicBool::new(true)),
        move |_| FetchPart::records(1, bad.clone()),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    let e = poll_error(&mut c, Duration::from_secs(10));
    eprintln!("{e}");
    assert!(
        faults.load(Ordering::SeqCst) <= 2,
        "reported at the first answer ({} answers so far)",
        faults.load(Ordering::SeqCst)
    );
    assert_eq!(e.partition(), Some(&tp0()), "{e}");
    assert_eq!(e.offset(), Some(0), "{e}");
    assert!(e.to_string().contains("t-0"), "{e}");
    let w = measure(&io, &fake);
    assert_idle(&w, "a batch with a negative lastOffsetDelta");
    assert!(w.fetches <= at_most(2), "refetches back off: {w:?}");
}

#[test]
fn offset_out_of_range_after_every_reset_backs_off_then_records_arrive_and_the_thread_is_idle() {
    // ListOffsets says the log starts at 0, and every fetch from 0 answers
    // OFFSET_OUT_OF_RANGE: reset and fetch must not alternate in a loop.
    let faulty = Arc::new(AtomicBool::new(true));
    let faults = Arc::new(AtomicUsize::new(0));
    let mut log = Log::default();
    log.append(3);
    let fake = faulty_fetches(
        log,
        Arc::clone(&faulty),
        partition_error(1),
        Arc::clone(&faults),
    );
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for("OFFSET_OUT_OF_RANGE twice", Duration::from_secs(10), || {
        faults.load(Ordering::SeqCst) >= 2
    });
    let w = measure(&io, &fake);
    assert_idle(&w, "OFFSET_OUT_OF_RANGE after every reset");
    assert!(
        w.fetches <= at_most(2) && w.list_offsets <= at_most(2),
        "resets back off: {w:?}"
    );
    faulty.store(false, Ordering::SeqCst);
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "after the log was readable again");
}

// ----- 6: position lookups that find nothing ------------------------------------------

#[test]
fn position_resets_answered_with_offset_minus_one_are_reported_and_the_thread_is_idle() {
    for reset in [OffsetReset::Earliest, OffsetReset::Latest] {
        let fake = FakeCluster::start(1, |r| match r.key {
            METADATA => Reply::Send(simple_metadata(r, 1)),
            LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, -1))),
            FETCH => fetch_reply(r, |_| FetchPart::default()),
            _ => Reply::Close,
        });
        let (mut c, io) = IoThread::of(config(&fake.addr(0)).auto_offset_reset(reset));
        c.assign(&[tp0()]).unwrap();
        let e = poll_error(&mut c, Duration::from_secs(15));
        eprintln!("{reset:?}: {e}");
        assert_eq!(e.partition(), Some(&tp0()), "{e}");
        assert!(e.to_string().contains("t-0"), "{e}");
        let w = measure(&io, &fake);
        assert_idle(&w, &format!("{reset:?} reset answered with -1"));
        assert!(w.list_offsets <= at_most(2), "lookups back off: {w:?}");
        assert_eq!(w.fetches, 0, "nothing is fetched without a position");
    }
}

// ----- 7: a batch that does not decompress --------------------------------------------

#[test]
fn a_batch_that_fails_to_decompress_is_reported_and_refetched_at_most_about_once_a_second() {
    // Valid CRCs, garbage payloads behind a correct gzip header and zstd magic.
    let gzip = [
        0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xde, 0xad, 0xbe, 0xef, 0x42, 0x42,
    ];
    let zstd = [
        0x28, 0xb5, 0x2f, 0xfd, 0xde, 0xad, 0xbe, 0xef, 0x42, 0x42, 0x42,
    ];
    for (codec, payload) in [(GZIP, &gzip[..]), (ZSTD, &zstd[..])] {
        let mut log = Log::default();
        log.append(2);
        log.append_batch(2, 5, compressed_batch(2, 3, codec, payload));
        let fake = FakeCluster::start(1, serve_logs(HashMap::from([(0, log)])));
        let (mut c, io) = IoThread::of(config(&fake.addr(0)));
        c.assign(&[tp0()]).unwrap();
        assert_eq!(poll_records(&mut c, 2, Duration::from_secs(10)), vec![0, 1]);
        let e = poll_error(&mut c, Duration::from_secs(10));
        eprintln!("codec {codec}: {e}");
        assert_eq!(e.partition(), Some(&tp0()), "{e}");
        assert_eq!(e.offset(), Some(2), "{e}");
        assert_eq!(e.skip_to(), Some(5), "{e}");
        assert!(e.to_string().contains("t-0"), "{e}");
        assert!(e.to_string().contains("offset 2"), "{e}");
        let w = measure(&io, &fake);
        assert_idle(
            &w,
            &format!("a batch that does not decompress (codec {codec})"),
        );
        assert!(
            w.fetches <= at_most(1) + 1,
            "refetches at most about once a second: {w:?}"
        );
        // Skipping the batch as the error says works.
        c.seek(&tp0(), 5).unwrap();
        assert_eq!(c.position(&tp0()).unwrap(), 5);
    }
}

#[test]
fn a_batch_too_large_for_the_buffer_is_retried_at_most_about_once_a_second() {
    // 32 KiB of zstd that inflates to 1 GiB, with the default fetch.buffer.bytes:
    // each retry decompresses up to the budget before giving up, so retries must be rare.
    let mut log = Log::default();
    log.append_batch(
        0,
        1000,
        compressed_batch(0, 1000, ZSTD, &zstd_zeros(1 << 30)),
    );
    let fake = FakeCluster::start(1, serve_logs(HashMap::from([(0, log)])));
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    let e = poll_error(&mut c, Duration::from_secs(10));
    eprintln!("{e}");
    assert_eq!(e.kind(), ErrorKind::RecordTooLarge, "{e}");
    let w = measure(&io, &fake);
    assert_idle(&w, "a batch too large for fetch.buffer.bytes");
    assert!(w.fetches <= at_most(1) + 1, "retries back off: {w:?}");
}

// ----- 8: settings of zero ------------------------------------------------------------

/// A port nothing listens on.
fn refused_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn zero_reconnect_backoff(bootstrap: &str) -> ConsumerConfig {
    config(bootstrap)
        .set("reconnect.backoff.ms", "0")
        .and_then(|c| c.set("reconnect.backoff.max.ms", "0"))
        .unwrap()
}

#[test]
fn zero_reconnect_backoff_against_a_refusing_server_is_idle_and_recovers_when_it_listens() {
    let port = refused_port();
    let (mut c, io) = IoThread::of(zero_reconnect_backoff(&format!("127.0.0.1:{port}")));
    c.assign(&[tp0()]).unwrap();
    std::thread::sleep(SETTLE);
    let busy = io.busy_fraction_over(WINDOW);
    eprintln!("refused: busy {busy:.3}");
    assert!(
        busy < IDLE,
        "reconnecting to a refusing server used {:.0} % of a core",
        busy * 100.0
    );
    // The broker comes up on that port: the consumer finds it and is idle again.
    let mut log = Log::default();
    log.append(3);
    let fake = FakeCluster::with(
        Options {
            ports: Some(vec![port]),
            ..Options::default()
        },
        serve_logs(HashMap::from([(0, log)])),
    );
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "after the broker came up");
}

#[test]
fn zero_reconnect_backoff_against_a_server_that_drops_every_connection_reconnects_slowly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a2 = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for s in listener.incoming() {
            a2.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    let (mut c, io) = IoThread::of(zero_reconnect_backoff(&format!("127.0.0.1:{port}")));
    c.assign(&[tp0()]).unwrap();
    std::thread::sleep(SETTLE);
    let before = accepted.load(Ordering::SeqCst);
    let busy = io.busy_fraction_over(WINDOW);
    let n = accepted.load(Ordering::SeqCst) - before;
    eprintln!("dropped connections: busy {busy:.3}, {n} connections in {WINDOW:?}");
    assert!(
        busy < IDLE,
        "reconnecting used {:.0} % of a core",
        busy * 100.0
    );
    assert!(
        n <= at_most(RECONNECTS_PER_SEC),
        "{n} connections in {WINDOW:?}"
    );
}

/// The most reconnects per second to one dead server with every backoff set to 0.
const RECONNECTS_PER_SEC: usize = 120;

#[test]
fn metadata_max_age_zero_refreshes_at_most_a_few_times_a_second() {
    let mut log = Log::default();
    log.append(2);
    let fake = FakeCluster::start(1, serve_logs(HashMap::from([(0, log)])));
    let cfg = config(&fake.addr(0))
        .set("metadata.max.age.ms", "0")
        .unwrap();
    let (mut c, io) = IoThread::of(cfg);
    c.assign(&[tp0()]).unwrap();
    assert_eq!(poll_records(&mut c, 2, Duration::from_secs(10)), vec![0, 1]);
    let w = measure(&io, &fake);
    assert_idle(&w, "metadata.max.age.ms=0");
    assert!(
        w.metadata <= at_most(3),
        "{} metadata requests in {WINDOW:?}",
        w.metadata
    );
}

// ----- a full prefetch buffer ----------------------------------------------------------

#[test]
fn a_full_prefetch_buffer_while_the_application_does_not_poll_leaves_the_thread_idle() {
    // Two partitions, one zstd batch each that inflates to 12 MiB: with a 16 MiB buffer
    // one fits, the other must wait until the application frees memory.
    let value = vec![0u8; 1024 * 1024];
    let recs: Vec<RecordSpec<'_>> = (0..12)
        .map(|i| (i, 0, None, Some(&value[..]), &[][..]))
        .collect();
    let section = encode_records(&recs);
    let bytes = compressed_batch(0, 12, ZSTD, &zstd_frame(&section));
    let mut logs = HashMap::new();
    for p in 0..2 {
        let mut log = Log::default();
        log.append_batch(0, 12, bytes.clone());
        logs.insert(p, log);
    }
    let fake = FakeCluster::start(1, serve_logs(logs));
    let (mut c, io) = IoThread::of(config(&fake.addr(0)).fetch_buffer_bytes(16 * 1024 * 1024));
    let tps = [tp0(), TopicPartition::new("t", 1)];
    c.assign(&tps).unwrap();
    wait_for("the buffer to fill", Duration::from_secs(10), || {
        c.metrics().fetch_blocked_by_memory
    });
    let w = measure(&io, &fake);
    assert_idle(&w, "a full prefetch buffer");
    assert!(
        w.fetches <= at_most(3),
        "the partition that does not fit is not refetched until memory is freed: {w:?}"
    );
    // The application polls: both partitions arrive, then the thread is idle again.
    let mut got: Vec<(i32, i64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 24 {
        assert!(Instant::now() < deadline, "records: {got:?}");
        let recs = c.poll(Duration::from_millis(200)).expect("poll");
        got.extend(recs.iter().map(|r| (r.partition(), r.offset())));
    }
    got.sort_unstable();
    let want: Vec<(i32, i64)> = (0..2).flat_map(|p| (0..12).map(move |o| (p, o))).collect();
    assert_eq!(got, want);
    let w = measure(&io, &fake);
    assert_idle(&w, "after the application caught up");
}

// ----- 9: a leader missing from the broker list ---------------------------------------

#[test]
fn a_leader_missing_from_the_broker_list_is_awaited_idly_and_used_within_seconds_once_listed() {
    let listed = Arc::new(AtomicBool::new(false));
    let l2 = Arc::clone(&listed);
    let mut log = Log::default();
    log.append(4);
    let wrong_node = Arc::new(AtomicUsize::new(0));
    let w2 = Arc::clone(&wrong_node);
    // Node 0 (ports[0]) and node 2 (ports[1]); node 2 leads t-0.
    let fake = FakeCluster::start(2, move |r| match r.key {
        METADATA => {
            let mut brokers = vec![broker(0, r.ports[0])];
            if l2.load(Ordering::SeqCst) {
                brokers.push(broker(2, r.ports[1]));
            }
            Reply::Send(metadata(r, &brokers, &[part("t", 0, 2)]))
        }
        _ if r.node != 1 => {
            w2.fetch_add(1, Ordering::SeqCst);
            Reply::Close
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| log.answer(w)),
        _ => Reply::Close,
    });
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for(
        "metadata naming the missing leader",
        Duration::from_secs(10),
        || fake.count(METADATA) >= 2,
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "waiting for a leader missing from the broker list");
    assert!(
        w.metadata <= at_most(3),
        "refreshes are spaced while the leader is missing: {w:?}"
    );
    listed.store(true, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(
        poll_records(&mut c, 4, Duration::from_secs(5)),
        vec![0, 1, 2, 3]
    );
    eprintln!("records {:?} after node 2 was listed", t.elapsed());
    assert_eq!(
        wrong_node.load(Ordering::SeqCst),
        0,
        "nothing went to the wrong node"
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "after the leader was found");
}

// ----- a preferred read replica missing from the metadata --------------------------------

#[test]
fn a_preferred_read_replica_missing_from_the_metadata_is_awaited_idly_then_used() {
    // KIP-392: the leader (node 0) answers every fetch at once with "fetch from replica 5";
    // the metadata lists node 5 (on ports[1]) only once `listed`.
    let listed = Arc::new(AtomicBool::new(false));
    let l2 = Arc::clone(&listed);
    let mut log = Log::default();
    log.append(3);
    let fake = FakeCluster::start(2, move |r| match r.key {
        METADATA => {
            let mut brokers = vec![broker(0, r.ports[0])];
            if l2.load(Ordering::SeqCst) {
                brokers.push(broker(5, r.ports[1]));
            }
            Reply::Send(metadata(r, &brokers, &[part("t", 0, 0)]))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH if r.node == 0 => fetch_reply(r, |_| FetchPart {
            preferred_read_replica: Some(5),
            ..FetchPart::empty(3)
        }),
        FETCH => fetch_reply(r, |w| log.answer(w)),
        _ => Reply::Close,
    });
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for(
        "the leader to name the replica",
        Duration::from_secs(10),
        || fake.count(FETCH) >= 2,
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "a preferred read replica without an address");
    assert!(
        w.fetches <= at_most(2) && w.metadata <= at_most(3),
        "the leader is not asked again before newer metadata: {w:?}"
    );
    listed.store(true, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    eprintln!("records {:?} after node 5 was listed", t.elapsed());
    let w = measure(&io, &fake);
    assert_idle(&w, "fetching from the preferred replica");
}

#[test]
fn a_preferred_read_replica_that_refuses_connections_is_given_up_for_the_leader() {
    // The leader names replica 5, listed at a port nobody listens on, until `relents`: the
    // consumer must go back to the leader after the replica's link fails, not wait for the
    // replica until the lease ends (metadata.max.age.ms), and not ping-pong in a loop.
    let dead = refused_port();
    let mut log = Log::default();
    log.append(3);
    let relents = Arc::new(AtomicBool::new(false));
    let r2 = Arc::clone(&relents);
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => {
            let brokers = [broker(0, r.ports[0]), broker(5, dead)];
            Reply::Send(metadata(r, &brokers, &[part("t", 0, 0)]))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| {
            if r2.load(Ordering::SeqCst) {
                log.answer(w)
            } else {
                FetchPart {
                    preferred_read_replica: Some(5),
                    ..FetchPart::empty(3)
                }
            }
        }),
        _ => Reply::Close,
    });
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    wait_for(
        "the leader to be asked again",
        Duration::from_secs(10),
        || fake.count(FETCH) >= 2,
    );
    let w = measure(&io, &fake);
    assert_idle(&w, "a preferred read replica that refuses connections");
    assert!(
        (1..=at_most(2)).contains(&w.fetches),
        "back to the leader, at a spaced pace: {w:?}"
    );
    relents.store(true, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    eprintln!("records {:?} after the leader served them", t.elapsed());
    let w = measure(&io, &fake);
    assert_idle(&w, "back on the leader");
}

// ----- a leader that refuses connections ---------------------------------------------------

#[test]
fn a_leader_that_refuses_connections_makes_the_consumer_refresh_metadata_idly_until_another_leads()
{
    // Node 5, listed at a port nobody listens on (a broker killed with kill -9), leads t-0
    // until `moved`, then node 0 does. The consumer must ask for newer metadata after it
    // fails to reach the leader, at a spaced pace, not wait for metadata.max.age.ms (5 min)
    // while every reconnect is refused.
    let dead = refused_port();
    let mut log = Log::default();
    log.append(3);
    let moved = Arc::new(AtomicBool::new(false));
    let m2 = Arc::clone(&moved);
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => {
            let leader = if m2.load(Ordering::SeqCst) { 0 } else { 5 };
            let brokers = [broker(0, r.ports[0]), broker(5, dead)];
            Reply::Send(metadata(r, &brokers, &[part("t", 0, leader)]))
        }
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| log.answer(w)),
        _ => Reply::Close,
    });
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    let w = measure(&io, &fake);
    assert_idle(&w, "a leader that refuses connections");
    assert!(
        (1..=at_most(3)).contains(&w.metadata),
        "metadata refreshed, at a spaced pace, while the leader cannot be reached: {w:?}"
    );
    moved.store(true, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    eprintln!("records {:?} after node 0 took over", t.elapsed());
    let w = measure(&io, &fake);
    assert_idle(&w, "on the new leader");
}

// ----- 10: a broker without a version we speak ----------------------------------------

fn without_versions(versions: Vec<(i16, i16, i16)>) -> FakeCluster {
    FakeCluster::with(
        Options {
            versions,
            ..Options::default()
        },
        |r| match r.key {
            METADATA => Reply::Send(simple_metadata(r, 1)),
            LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
            _ => Reply::Close,
        },
    )
}

#[test]
fn a_broker_without_a_common_fetch_version_is_reported_as_unsupported_promptly() {
    let fake = without_versions(vec![(18, 0, 3), (3, 1, 12), (2, 1, 8), (1, 0, 3)]);
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    c.assign(&[tp0()]).unwrap();
    let t = Instant::now();
    let e = c
        .poll(Duration::from_secs(20))
        .expect_err("poll reports the missing Fetch version");
    eprintln!("{e} after {:?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "promptly, not a timeout"
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let msg = e.to_string();
    for part in ["Fetch", "v0-v3", "v4-v18"] {
        assert!(msg.contains(part), "`{msg}` names {part}");
    }
    let w = measure(&io, &fake);
    assert_idle(&w, "no common Fetch version");
    assert_eq!(w.fetches, 0, "{w:?}");
}

#[test]
fn a_broker_without_list_offsets_fails_end_offsets_as_unsupported_promptly() {
    let fake = without_versions(vec![(18, 0, 3), (3, 1, 12), (1, 4, 12)]);
    let (mut c, io) = IoThread::of(config(&fake.addr(0)));
    let t = Instant::now();
    let e = c
        .end_offsets(&[tp0()])
        .expect_err("end_offsets needs ListOffsets");
    eprintln!("{e} after {:?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "promptly, not a timeout"
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("ListOffsets"), "{e}");
    // A partition needing a position reset cannot get one either: idle all the same.
    c.assign(&[tp0()]).unwrap();
    let e = c
        .poll(Duration::from_secs(20))
        .expect_err("poll reports it");
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let w = measure(&io, &fake);
    assert_idle(&w, "no ListOffsets");
}

// ----- 12: the I/O thread panics ------------------------------------------------------

#[test]
fn an_io_thread_panic_closes_the_consumer_for_every_later_call_promptly() {
    let mut log = Log::default();
    log.append(2);
    let fake = FakeCluster::start(1, serve_logs(HashMap::from([(0, log)])));
    let (mut c, _io) = IoThread::of(config(&fake.addr(0)).group_id("panic-group"));
    c.assign(&[tp0()]).unwrap();
    assert_eq!(poll_records(&mut c, 2, Duration::from_secs(10)), vec![0, 1]);
    c.inject_io_panic();
    let t = Instant::now();
    let e = c
        .poll(Duration::from_secs(20))
        .expect_err("poll sees the panic");
    eprintln!("{e} after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2), "promptly");
    assert_eq!(e.kind(), ErrorKind::Closed, "{e}");
    assert!(e.to_string().contains("panicked"), "{e}");
    let results: Vec<(&str, Option<Error>)> = vec![
        ("poll", c.poll(Duration::from_secs(20)).err()),
        ("position", c.position(&tp0()).err()),
        ("end_offsets", c.end_offsets(&[tp0()]).err()),
        ("commit_sync", c.commit_sync().err()),
        ("partitions_for", c.partitions_for("t").err()),
        ("seek", c.seek(&tp0(), 0).err()),
    ];
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "every call returns promptly"
    );
    for (call, e) in results {
        let e = e.unwrap_or_else(|| panic!("{call} succeeded after the panic"));
        assert_eq!(e.kind(), ErrorKind::Closed, "{call}: {e}");
        assert!(e.to_string().contains("panicked"), "{call}: {e}");
    }
}

// ----- the group coordinator ------------------------------------------------------------

#[test]
fn a_coordinator_that_refuses_connections_is_awaited_idly_and_rediscovered() {
    // FindCoordinator names node 7 on a port nobody listens on until `moved`, then node 0:
    // the consumer must look for the coordinator again after its link fails (not reconnect
    // to the dead one for ever) to read the group's committed offset.
    let dead = refused_port();
    let moved = Arc::new(AtomicBool::new(false));
    let m2 = Arc::clone(&moved);
    let mut log = Log::default();
    log.append(3);
    let fake = FakeCluster::start(1, move |r| match r.key {
        METADATA => Reply::Send(simple_metadata(r, 1)),
        FIND_COORDINATOR if !m2.load(Ordering::SeqCst) => {
            Reply::Send(find_coordinator(r, 0, 7, dead))
        }
        FIND_COORDINATOR => Reply::Send(find_coordinator(r, 0, 0, r.ports[0])),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
        FETCH => fetch_reply(r, |w| log.answer(w)),
        _ => Reply::Close,
    });
    let (mut c, io) = IoThread::of(config(&fake.addr(0)).group_id("g"));
    c.assign(&[tp0()]).unwrap();
    wait_for("FindCoordinator", Duration::from_secs(10), || {
        fake.count(FIND_COORDINATOR) >= 1
    });
    let w = measure(&io, &fake);
    assert_idle(&w, "a coordinator that refuses connections");
    assert!(
        (1..=at_most(2)).contains(&w.find_coordinator),
        "the coordinator is looked for again, at a spaced pace: {w:?}"
    );
    moved.store(true, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(
        poll_records(&mut c, 3, Duration::from_secs(5)),
        vec![0, 1, 2]
    );
    eprintln!("records {:?} after the coordinator moved", t.elapsed());
    let w = measure(&io, &fake);
    assert_idle(&w, "after the coordinator was found");
}
