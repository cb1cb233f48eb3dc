//! A broker that dies and comes back: the consumer keeps polling without an error storm,
//! reconnects with backoff, and reads every record exactly once and in order.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset};

#[test]
fn consumption_survives_a_broker_restart_without_loss_or_duplicates() {
    let broker = OwnBroker::start("restart-test", 19392);
    let topic = unique_topic("restart");
    let mut p = Produce::new(&topic, 2, 20_000);
    p.bootstrap = Some(&broker.bootstrap);
    p.run();

    let cfg = ConsumerConfig::new(&broker.bootstrap)
        .auto_offset_reset(OffsetReset::Earliest)
        .max_poll_records(500)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(30));
    let mut c = Consumer::new(cfg).unwrap();
    let tps = all_partitions(&topic, 2);
    c.assign(&tps).unwrap();

    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut total = 0usize;
    let mut take = move |recs: &kafka_consumer::ConsumerRecords| {
        for r in recs {
            let want = next.entry(r.partition()).or_insert(0);
            assert_eq!(
                r.offset(),
                *want,
                "partition {} in order, no gap, no duplicate",
                r.partition()
            );
            *want += 1;
            assert_eq!(seq(&r) % 2, r.partition() as u64);
            total += 1;
        }
        total
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while take(&c.poll(Duration::from_millis(200)).unwrap()) < 3_000 {
        assert!(Instant::now() < deadline, "first records");
    }

    broker.script(&["stop"]);
    // While the broker is down, poll returns records already fetched, then nothing; no
    // error, no panic.
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(2) {
        let recs = c
            .poll(Duration::from_millis(200))
            .expect("poll while the broker is down");
        take(&recs);
    }
    let during = take(&Default::default());
    broker.script(&["start"]);

    let deadline = Instant::now() + Duration::from_secs(90);
    while take(&c.poll(Duration::from_millis(200)).unwrap()) < 20_000 {
        assert!(
            Instant::now() < deadline,
            "records after the restart (had {during} before it)"
        );
    }
    assert!(
        c.poll(Duration::from_millis(500)).unwrap().is_empty(),
        "nothing after the end"
    );
    for tp in &tps {
        assert_eq!(c.position(tp).unwrap(), 10_000);
    }
}

/// A group whose coordinator (the only broker) restarts: the members find it again, get
/// their partitions back and consume every record (at least once: what was consumed
/// after the last commit before the restart may come again).
#[test]
fn a_group_survives_its_coordinator_restarting() {
    group_survives_coordinator_restart("classic", 19492);
}

#[test]
fn a_kip848_group_survives_its_coordinator_restarting() {
    group_survives_coordinator_restart("consumer", 19496);
}

/// Two of our members (of `protocol`) consume, the broker (their coordinator) restarts,
/// and they share the partitions again and consume what was produced meanwhile.
fn group_survives_coordinator_restart(protocol: &str, port: u16) {
    use common::java_member::{wait_until, JavaMember, JavaMemberOptions};

    const N: i32 = 4;
    let broker = OwnBroker::start(&format!("restart-group-{protocol}-test"), port);
    let topic = unique_topic("restart-group");
    let group = unique_topic("g-restart");
    let produce = |start: u64, count: u64| {
        let mut p = Produce::new(&topic, N, count);
        p.bootstrap = Some(&broker.bootstrap);
        p.start = start;
        p.run();
    };
    produce(0, 400);
    let classic = protocol == "classic";
    let opts = JavaMemberOptions {
        bootstrap: Some(broker.bootstrap.clone()),
        protocol: protocol.to_owned(),
        // The consumer protocol takes its timing from the broker.
        session_timeout_ms: classic.then_some(6_000),
        heartbeat_ms: classic.then_some(500),
        ..JavaMemberOptions::new(&group, &[&topic])
    };
    let mut a = JavaMember::start_ours(&opts);
    let mut b = JavaMember::start_ours(&opts);
    let limit = Duration::from_secs(90);
    let consumed = |ms: &[&JavaMember]| {
        let mut seen = std::collections::BTreeSet::new();
        for m in ms {
            for ((_, p), o, _) in m.records() {
                seen.insert((p, o));
            }
        }
        seen.len()
    };
    wait_until(&[&a, &b], "400 records", limit, || {
        consumed(&[&a, &b]) >= 400
    });
    a.send("commit");
    b.send("commit");
    std::thread::sleep(Duration::from_secs(1));

    broker.script(&["stop"]);
    std::thread::sleep(Duration::from_secs(3));
    broker.script(&["start"]);
    produce(400, 400);
    wait_until(&[&a, &b], "800 records after the restart", limit, || {
        consumed(&[&a, &b]) >= 800
    });
    wait_until(
        &[&a, &b],
        "both members own partitions again",
        limit,
        || {
            let (x, y) = (a.owned(), b.owned());
            !x.is_empty() && !y.is_empty() && x.is_disjoint(&y) && x.len() + y.len() == N as usize
        },
    );
    a.close();
    b.close();
}
