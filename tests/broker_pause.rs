//! A broker that stops answering without closing anything (its JVM stopped with SIGSTOP,
//! as in a long GC pause or a frozen VM) and then comes back: the consumer waits without
//! burning CPU, reads every record exactly once and in order afterwards, and is idle again.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{ConsumerConfig, OffsetReset};

/// A process stopped with SIGSTOP; continued (SIGCONT) when dropped, so a failing test
/// never leaves the broker frozen.
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> Frozen {
        signal("-STOP", pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill {sig} {pid}: {status}");
}

#[test]
fn a_broker_paused_for_20_seconds_leaves_the_thread_idle_and_consumption_resumes_exactly_once() {
    let broker = OwnBroker::start("pause-test", 19292);
    let topic = unique_topic("paused");
    let total = 30_000usize;
    let mut p = Produce::new(&topic, 2, total as u64);
    p.bootstrap = Some(&broker.bootstrap);
    p.value_size = 100;
    p.run();

    // A small prefetch budget, so most records are still on the broker when it freezes;
    // short request and setup timeouts, so the pause is long enough to time requests
    // out and reconnect several times.
    let cfg = ConsumerConfig::new(&broker.bootstrap)
        .client_id("it")
        .auto_offset_reset(OffsetReset::Earliest)
        .max_poll_records(500)
        .fetch_buffer_bytes(256 * 1024)
        .request_timeout(Duration::from_secs(5))
        .connection_setup_timeout(Duration::from_secs(3))
        .default_api_timeout(Duration::from_secs(30));
    let (mut c, io) = IoThread::of(cfg);
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();

    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut got = 0usize;
    let mut take = |recs: &kafka_consumer::ConsumerRecords| {
        for r in recs {
            let want = next.entry(r.partition()).or_insert(0);
            assert_eq!(
                r.offset(),
                *want,
                "partition {}: in order, no gap, no duplicate",
                r.partition()
            );
            *want += 1;
            assert_eq!(seq(&r) % 2, r.partition() as u64);
            got += 1;
        }
        got
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while take(&c.poll(Duration::from_millis(200)).unwrap()) < 3_000 {
        assert!(Instant::now() < deadline, "the first records");
    }

    let frozen = Frozen::stop(broker.pid());
    // The application keeps polling through the pause: what was prefetched, then nothing;
    // no error. The I/O thread retries at a bounded rate.
    let cpu = io.cpu();
    let paused = Instant::now();
    while paused.elapsed() < Duration::from_secs(20) {
        let recs = c
            .poll(Duration::from_millis(200))
            .expect("poll while the broker is paused");
        take(&recs);
    }
    let busy = (io.cpu() - cpu).as_secs_f64() / paused.elapsed().as_secs_f64();
    let during = take(&Default::default());
    drop(frozen);
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy while the broker was paused",
        busy * 100.0
    );
    assert!(during < total, "everything was prefetched before the pause");

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let recs = c
            .poll(Duration::from_millis(200))
            .expect("poll after the broker resumed");
        if take(&recs) >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "records after the pause (had {during} before it resumed)"
        );
    }
    assert!(
        c.poll(Duration::from_millis(500)).unwrap().is_empty(),
        "nothing after the end"
    );
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), (total / 2) as i64);
    }
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread was {:.0}% busy after the broker resumed",
        busy * 100.0
    );
}
