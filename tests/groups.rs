//! Consumer groups with the classic protocol on the real broker: our members (each in a
//! process of its own, `examples/group_member.rs`, so that one can be killed) and Java
//! `KafkaConsumer`s (`scripts/java/GroupMember.java`) in the same groups. Session timeout
//! 6 s, heartbeat 500 ms.
//!
//! What a user checks: every partition has exactly one owner once the group settles; no
//! two members own a partition at the same time; every record is consumed (at least once,
//! and exactly once where every owner commits before giving a partition up).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::java_member::{
    assert_no_overlap, wait_until, Event, JavaMember, JavaMemberOptions, Owned,
};
use common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn options(group: &str, topic: &str, assignor: &str) -> JavaMemberOptions {
    JavaMemberOptions {
        assignor: Some(assignor.into()),
        session_timeout_ms: Some(6_000),
        heartbeat_ms: Some(500),
        ..JavaMemberOptions::new(group, &[topic])
    }
}

fn all(topic: &str, n: i32) -> Owned {
    (0..n).map(|p| (topic.to_owned(), p)).collect()
}

/// Waits until the members own every partition of `topic` between them, each exactly once,
/// and each owns some (when `all_busy`).
fn wait_split(members: &[&JavaMember], topic: &str, n: i32, all_busy: bool, what: &str) {
    wait_owners(members, topic, n, all_busy, what);
    assert_no_overlap(members);
}

/// [`wait_split`] without the check that no two members ever owned a partition at once:
/// for a member that stopped polling past `max.poll.interval.ms`, which, as with the Java
/// client, believes it owns its partitions until its next poll reports them lost.
fn wait_owners(members: &[&JavaMember], topic: &str, n: i32, all_busy: bool, what: &str) {
    wait_until(members, what, LIMIT, || {
        let mut union = Owned::new();
        let mut total = 0;
        for m in members {
            let o = m.owned();
            if all_busy && o.is_empty() {
                return false;
            }
            total += o.len();
            union.extend(o);
        }
        total == n as usize && union == all(topic, n)
    });
}

/// Every record of `topic` the members polled, by (partition, offset), with how often.
fn consumed(members: &[&JavaMember]) -> BTreeMap<(i32, i64), usize> {
    let mut seen = BTreeMap::new();
    for m in members {
        for ((_, p), offset, _) in m.records() {
            *seen.entry((p, offset)).or_insert(0) += 1;
        }
    }
    seen
}

/// Asserts that records 0..count of a topic of `n` partitions written by TestProducer were
/// all consumed (record i is at offset i / n of partition i % n); `exactly`: none twice.
fn assert_all_consumed(members: &[&JavaMember], n: i32, count: u64, exactly: bool) {
    let seen = consumed(members);
    for i in 0..count {
        let key = ((i % n as u64) as i32, (i / n as u64) as i64);
        match seen.get(&key) {
            None => panic!(
                "record {i} (partition {}, offset {}) was never consumed",
                key.0, key.1
            ),
            Some(&k) if exactly && k > 1 => {
                panic!(
                    "record {i} (partition {}, offset {}) consumed {k} times",
                    key.0, key.1
                )
            }
            _ => {}
        }
    }
}

fn wait_consumed(members: &[&JavaMember], n: i32, count: u64) {
    wait_until(members, &format!("{count} records consumed"), LIMIT, || {
        let seen = consumed(members);
        (0..count).all(|i| seen.contains_key(&((i % n as u64) as i32, (i / n as u64) as i64)))
    });
}

/// Writes records `start..start + count` of a topic of `n` partitions (TestProducer).
fn produce(topic: &str, n: i32, start: u64, count: u64) {
    Produce {
        start,
        ..Produce::new(topic, n, count)
    }
    .run();
}

/// Every partition `m` was ever told to give up (revoked, not lost).
fn revoked_from(m: &JavaMember) -> Owned {
    m.events()
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Revoked { partitions, .. } => Some(partitions.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

// ----- membership -----------------------------------------------------------------------

#[test]
fn three_members_share_12_partitions_through_joins_a_close_and_a_kill() {
    const N: i32 = 12;
    let topic = unique_topic("groups-three");
    let group = unique_topic("g-three");
    Produce::new(&topic, N, 1200).run();
    let opts = options(&group, &topic, "range");

    let mut a = JavaMember::start_ours(&opts);
    wait_split(&[&a], &topic, N, true, "a owns all 12");
    let mut b = JavaMember::start_ours(&opts);
    wait_split(&[&a, &b], &topic, N, true, "a and b split 12");
    let mut c = JavaMember::start_ours(&opts);
    wait_split(&[&a, &b, &c], &topic, N, true, "a, b and c split 12");
    for m in [&a, &b, &c] {
        assert_eq!(
            m.owned().len(),
            4,
            "range over 3 members: 4 each\n{}",
            m.describe()
        );
    }
    wait_consumed(&[&a, &b, &c], N, 1200);

    // c leaves with close: its partitions move at once (well within the session timeout).
    let closed = Instant::now();
    c.close();
    wait_split(&[&a, &b], &topic, N, true, "a and b take c's partitions");
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "a closed member's partitions moved only after {:?}",
        closed.elapsed()
    );

    // b is killed: nothing is said to the group; its partitions move after the session
    // timeout.
    produce(&topic, N, 1200, 1200);
    wait_consumed(&[&a, &b, &c], N, 2400);
    let killed = Instant::now();
    b.kill();
    wait_split(
        &[&a],
        &topic,
        N,
        true,
        "a takes over everything after b's session ends",
    );
    let moved = killed.elapsed();
    assert!(
        moved >= Duration::from_secs(3),
        "b's partitions moved after {moved:?}, before its session could expire"
    );
    produce(&topic, N, 2400, 600);
    wait_consumed(&[&a, &b, &c], N, 3000);
    // Each member committed in on_partitions_revoked; b was killed, so what it consumed
    // after its last commit may come again: at least once.
    assert_all_consumed(&[&a, &b, &c], N, 3000, false);
    a.close();
}

#[test]
fn a_member_that_sleeps_past_the_session_timeout_keeps_its_partitions_but_not_past_max_poll_interval(
) {
    const N: i32 = 4;
    let topic = unique_topic("groups-sleep");
    let group = unique_topic("g-sleep");
    Produce::new(&topic, N, 40).run();
    let opts = JavaMemberOptions {
        max_poll_interval_ms: Some(12_000),
        ..options(&group, &topic, "range")
    };
    let mut a = JavaMember::start_ours(&opts);
    let b = JavaMember::start_ours(&opts);
    wait_split(&[&a, &b], &topic, N, true, "a and b split 4");
    wait_consumed(&[&a, &b], N, 40);
    let before = a.owned();
    let (a_seen, b_seen) = (a.events().len(), b.events().len());

    // 8 s without polling: past the 6 s session, but heartbeats come from the I/O thread.
    a.send("pause-poll 8000");
    std::thread::sleep(Duration::from_secs(9));
    assert_eq!(a.owned(), before, "a kept its partitions\n{}", a.describe());
    let rebalanced = a.events()[a_seen..]
        .iter()
        .chain(b.events()[b_seen..].iter())
        .any(|(_, e)| matches!(e, Event::Revoked { .. } | Event::Lost { .. }));
    assert!(
        !rebalanced,
        "nobody gave anything up\n{}\n{}",
        a.describe(),
        b.describe()
    );

    // 16 s without polling: past max.poll.interval.ms (12 s). a leaves the group, b takes
    // everything, and a's next poll reports its partitions lost, then a rejoins.
    a.send("pause-poll 16000");
    b.wait_owned("b takes a's partitions", Duration::from_secs(30), |o| {
        *o == all(&topic, N)
    });
    a.wait_for(
        "a loses its partitions on its next poll",
        Duration::from_secs(30),
        |e| {
            e.iter()
                .any(|(_, e)| matches!(e, Event::Lost { partitions, .. } if !partitions.is_empty()))
        },
    );
    wait_owners(&[&a, &b], &topic, N, true, "a rejoined and consumes again");
    produce(&topic, N, 40, 40);
    wait_consumed(&[&a, &b], N, 80);
    let after_rejoin: usize = a
        .records()
        .iter()
        .filter(|(_, offset, _)| *offset >= 10)
        .count();
    assert!(
        after_rejoin > 0,
        "a consumes after rejoining\n{}",
        a.describe()
    );
}

#[test]
fn with_commits_in_on_partitions_revoked_every_record_is_consumed_under_churn() {
    const N: i32 = 6;
    const BATCHES: u64 = 8;
    const PER_BATCH: u64 = 150;
    let topic = unique_topic("groups-churn");
    let group = unique_topic("g-churn");
    Produce::new(&topic, N, PER_BATCH).run();
    let producer = {
        let topic = topic.clone();
        std::thread::spawn(move || {
            for b in 1..BATCHES {
                produce(&topic, N, b * PER_BATCH, PER_BATCH);
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let opts = options(&group, &topic, "cooperative-sticky");
    let mut members = vec![JavaMember::start_ours(&opts)];
    let mut gone = Vec::new();
    // Members come and go while the producer writes.
    for round in 0..4 {
        members.push(JavaMember::start_ours(&opts));
        std::thread::sleep(Duration::from_secs(2));
        if round % 2 == 1 {
            let mut m = members.remove(0);
            m.close();
            gone.push(m);
        }
    }
    producer.join().expect("producer");
    let live: Vec<&JavaMember> = members.iter().collect();
    wait_split(&live, &topic, N, false, "the group settles");
    let everyone: Vec<&JavaMember> = members.iter().chain(gone.iter()).collect();
    wait_consumed(&everyone, N, BATCHES * PER_BATCH);
    // Every owner committed before giving a partition up: nothing was read twice.
    assert_all_consumed(&everyone, N, BATCHES * PER_BATCH, true);
    assert_no_overlap(&everyone);
    for mut m in members {
        m.close();
    }
}

#[test]
fn with_cooperative_sticky_partitions_that_stay_are_never_revoked_and_keep_flowing() {
    const N: i32 = 6;
    let topic = unique_topic("groups-coop");
    let group = unique_topic("g-coop");
    Produce::new(&topic, N, 60).run();
    let opts = options(&group, &topic, "cooperative-sticky");
    let mut a = JavaMember::start_ours(&opts);
    wait_split(&[&a], &topic, N, true, "a owns all");
    wait_consumed(&[&a], N, 60);
    let b = JavaMember::start_ours(&opts);
    wait_split(&[&a, &b], &topic, N, true, "a and b split");
    let kept = a.owned();
    assert_eq!(kept.len(), 3);
    // a gave up exactly what b got, and nothing else.
    let revoked = revoked_from(&a);
    assert_eq!(
        revoked,
        b.owned(),
        "only the moved partitions were revoked\n{}",
        a.describe()
    );
    assert!(revoked.is_disjoint(&kept));
    // A third member joins while records flow: a's remaining partitions that stay keep
    // being delivered throughout.
    let c = JavaMember::start_ours(&opts);
    produce(&topic, N, 60, 600);
    wait_split(&[&a, &b, &c], &topic, N, true, "a, b and c split");
    wait_consumed(&[&a, &b, &c], N, 660);
    let still = a.owned();
    let revoked = revoked_from(&a);
    assert!(
        revoked.is_disjoint(&still),
        "a partition a kept was revoked\n{}",
        a.describe()
    );
    // The partitions a owned throughout were delivered to a, new records included (the
    // first 60 records are offsets 0..10 of each partition).
    let throughout: Owned = kept.intersection(&still).cloned().collect();
    assert!(
        !throughout.is_empty(),
        "a kept some partitions\n{}",
        a.describe()
    );
    for p in &throughout {
        let newest = a
            .records()
            .iter()
            .filter(|(q, _, _)| q == p)
            .map(|(_, o, _)| *o)
            .max();
        assert!(
            newest.is_some_and(|o| o >= 10),
            "a kept {p:?} but did not get its new records\n{}",
            a.describe()
        );
    }
    assert_all_consumed(&[&a, &b, &c], N, 660, true);
    a.close();
}

#[test]
fn a_commit_made_in_on_partitions_revoked_is_where_the_next_owner_starts() {
    const N: i32 = 2;
    let topic = unique_topic("groups-handover");
    let group = unique_topic("g-handover");
    Produce::new(&topic, N, 200).run();
    let opts = options(&group, &topic, "range");
    let mut a = JavaMember::start_ours(&opts);
    wait_consumed(&[&a], N, 200);
    // a commits in on_partitions_revoked as b joins; b starts exactly there.
    let b = JavaMember::start_ours(&opts);
    wait_split(&[&a, &b], &topic, N, true, "a and b split");
    let committed: BTreeMap<(String, i32), i64> = a
        .events()
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Committed { offsets } => Some(offsets.clone()),
            _ => None,
        })
        .flatten()
        .map(|(t, p, o)| ((t, p), o))
        .collect();
    for p in b.owned() {
        assert_eq!(
            committed.get(&p),
            Some(&100),
            "a committed {p:?} in its revoke callback"
        );
    }
    produce(&topic, N, 200, 20);
    wait_consumed(&[&a, &b], N, 220);
    // b's first record of its partition is the committed offset, not earlier.
    for ((_, _p), offset, _) in b.records() {
        assert!(
            offset >= 100,
            "b read offset {offset}, before a's commit\n{}",
            b.describe()
        );
    }
    assert_all_consumed(&[&a, &b], N, 220, true);
    a.close();
}

#[test]
fn a_static_member_restarted_within_the_session_timeout_gets_its_partitions_back_without_a_rebalance(
) {
    const N: i32 = 4;
    let topic = unique_topic("groups-static");
    let group = unique_topic("g-static");
    Produce::new(&topic, N, 40).run();
    let a_opts = JavaMemberOptions {
        instance_id: Some("a".into()),
        ..options(&group, &topic, "range")
    };
    let b_opts = JavaMemberOptions {
        instance_id: Some("b".into()),
        ..options(&group, &topic, "range")
    };
    let mut a = JavaMember::start_ours(&a_opts);
    let b = JavaMember::start_ours(&b_opts);
    wait_split(&[&a, &b], &topic, N, true, "a and b split");
    let a_had = a.owned();
    let b_events = b.events().len();
    // A static member does not leave the group on close.
    a.close();
    let mut a2 = JavaMember::start_ours(&a_opts);
    let got = a2.wait_owned("the restarted a gets its partitions", LIMIT, |o| {
        !o.is_empty()
    });
    assert_eq!(got, a_had, "the same partitions come back");
    std::thread::sleep(Duration::from_secs(2));
    let b_saw: Vec<Event> = b.events()[b_events..]
        .iter()
        .map(|(_, e)| e.clone())
        .filter(|e| {
            matches!(
                e,
                Event::Assigned { .. } | Event::Revoked { .. } | Event::Lost { .. }
            )
        })
        .collect();
    assert!(b_saw.is_empty(), "b saw no rebalance, but {b_saw:?}");
    a2.close();
}

// ----- with the Java client --------------------------------------------------------------

fn interop(assignor: &str, java_first: bool) {
    const N: i32 = 6;
    let topic = unique_topic("groups-interop");
    let group = unique_topic("g-interop");
    Produce::new(&topic, N, 600).run();
    let opts = options(&group, &topic, assignor);
    // The first member to join leads the group (computes the assignment).
    let (mut first, second) = if java_first {
        let j = JavaMember::start(&opts);
        wait_split(&[&j], &topic, N, true, "the Java member owns all");
        (j, JavaMember::start_ours(&opts))
    } else {
        let o = JavaMember::start_ours(&opts);
        wait_split(&[&o], &topic, N, true, "our member owns all");
        (o, JavaMember::start(&opts))
    };
    let mut third = JavaMember::start_ours(&opts);
    wait_split(
        &[&first, &second, &third],
        &topic,
        N,
        true,
        "three members split 6",
    );
    wait_consumed(&[&first, &second, &third], N, 600);
    // The leader leaves: the others go on, one of them leading now.
    first.close();
    wait_split(&[&second, &third], &topic, N, true, "two members split 6");
    produce(&topic, N, 600, 120);
    wait_consumed(&[&first, &second, &third], N, 720);
    assert_all_consumed(&[&first, &second, &third], N, 720, true);
    third.close();
}

#[test]
fn our_members_and_java_members_share_a_range_group_with_java_leading() {
    interop("range", true);
}

#[test]
fn our_members_and_java_members_share_a_range_group_with_us_leading() {
    interop("range", false);
}

#[test]
fn our_members_and_java_members_share_a_cooperative_sticky_group_with_java_leading() {
    interop("cooperative-sticky", true);
}

#[test]
fn our_members_and_java_members_share_a_cooperative_sticky_group_with_us_leading() {
    interop("cooperative-sticky", false);
}

// ----- in-process API -------------------------------------------------------------------

#[test]
fn subscribe_needs_a_group_id_and_known_assignors() {
    let mut c = consumer(&[]);
    let e = c.subscribe(&["t"]).unwrap_err();
    assert_eq!(e.kind(), kafka_consumer::ErrorKind::Config);
    assert!(e.to_string().contains("group.id"), "{e}");
    let e = kafka_consumer::ConsumerConfig::new(bootstrap())
        .group_id("g")
        .partition_assignment_strategy(&["sticky-ish"]);
    let e = kafka_consumer::Consumer::new(e).unwrap_err();
    assert_eq!(e.kind(), kafka_consumer::ErrorKind::Config);
    assert!(
        e.to_string().contains("partition.assignment.strategy"),
        "{e}"
    );
    assert!(e.to_string().contains("sticky-ish"), "{e}");
}

#[test]
fn a_session_timeout_the_broker_rejects_is_an_error_from_poll_naming_the_setting() {
    // The test broker allows 3 s .. 30 min (group.min.session.timeout.ms=3000).
    let topic = unique_topic("groups-badsession");
    Produce::new(&topic, 1, 1).run();
    let group = unique_topic("g-badsession");
    let mut c = consumer(&[
        ("group.id", &group),
        ("session.timeout.ms", "1000"),
        ("heartbeat.interval.ms", "100"),
    ]);
    c.subscribe(&[&topic]).unwrap();
    let deadline = Instant::now() + LIMIT;
    let e = loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "no error from poll"),
        }
    };
    assert!(e.to_string().contains("session.timeout.ms"), "{e}");
    assert_eq!(e.kafka_code(), Some(26), "INVALID_SESSION_TIMEOUT: {e}");
    assert_eq!(e.kind(), kafka_consumer::ErrorKind::GroupFatal, "{e}");
    // The member stopped: reported once, then polls wait out their timeout (no spinning).
    let start = Instant::now();
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn assignors_no_member_shares_are_an_inconsistent_group_protocol_error() {
    let topic = unique_topic("groups-inconsistent");
    let group = unique_topic("g-inconsistent");
    Produce::new(&topic, 2, 2).run();
    let java = JavaMember::start(&options(&group, &topic, "roundrobin"));
    java.wait_owned("the Java member joined", LIMIT, |o| o.len() == 2);
    let mut c = consumer(&[
        ("group.id", &group),
        ("partition.assignment.strategy", "range"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe(&[&topic]).unwrap();
    let deadline = Instant::now() + LIMIT;
    let e = loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "no error from poll"),
        }
    };
    assert_eq!(e.kafka_code(), Some(23), "INCONSISTENT_GROUP_PROTOCOL: {e}");
    assert_eq!(e.kind(), kafka_consumer::ErrorKind::GroupFatal, "{e}");
    assert!(
        e.to_string().contains("partition.assignment.strategy"),
        "{e}"
    );
    assert!(e.to_string().contains(&group), "{e}");
}

/// The new partitions reach the fetcher before what the listener does with them inside
/// `on_partitions_assigned`: `position` answers (it waits for the fetcher), and a pause
/// holds, under both group protocols.
#[test]
fn the_listener_may_read_positions_and_pause_the_partitions_it_is_given() {
    use kafka_consumer::{Consumer, RebalanceListener, TopicPartition};
    use std::sync::{Arc, Mutex};

    struct L(Arc<Mutex<Vec<(TopicPartition, i64)>>>);
    impl RebalanceListener for L {
        fn on_partitions_assigned(&mut self, c: &mut Consumer, parts: &[TopicPartition]) {
            for tp in parts {
                let position = c.position(tp).expect("position in on_partitions_assigned");
                self.0.lock().unwrap().push((tp.clone(), position));
                if tp.partition() == 1 {
                    c.pause(std::slice::from_ref(tp)).expect("pause");
                }
            }
        }
        fn on_partitions_revoked(&mut self, _: &mut Consumer, _: &[TopicPartition]) {}
    }

    for protocol in ["classic", "consumer"] {
        let topic = unique_topic("groups-listener-position");
        let group = unique_topic("g-listener-position");
        Produce::new(&topic, 2, 50).run();
        let positions = Arc::new(Mutex::new(Vec::new()));
        let mut c = consumer(&[
            ("group.id", &group),
            ("group.protocol", protocol),
            ("enable.auto.commit", "false"),
        ]);
        c.subscribe_with_listener(&[&topic], L(Arc::clone(&positions)))
            .unwrap();
        let mut got: BTreeMap<i32, usize> = BTreeMap::new();
        poll_until(&mut c, LIMIT, "partition 0's records", |recs| {
            for r in recs.iter() {
                *got.entry(r.partition()).or_default() += 1;
            }
            got.get(&0).copied().unwrap_or(0) >= 1
        });
        // Nothing of the paused partition, even after more polls.
        for _ in 0..5 {
            for r in c.poll(Duration::from_millis(200)).unwrap().iter() {
                *got.entry(r.partition()).or_default() += 1;
            }
        }
        assert_eq!(
            got.get(&1),
            None,
            "{protocol}: partition 1 was paused in the listener"
        );
        let mut seen = positions.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (TopicPartition::new(topic.as_str(), 0), 0),
                (TopicPartition::new(topic.as_str(), 1), 0)
            ],
            "{protocol}: position answered inside on_partitions_assigned"
        );
        let p1 = TopicPartition::new(topic.as_str(), 1);
        c.resume(std::slice::from_ref(&p1)).unwrap();
        poll_until(&mut c, LIMIT, "partition 1 after resume", |recs| {
            for r in recs.iter() {
                *got.entry(r.partition()).or_default() += 1;
            }
            got.get(&1).copied().unwrap_or(0) >= 1
        });
        c.close().unwrap();
    }
}

#[test]
fn a_static_member_fenced_by_another_with_its_instance_id_loses_its_partitions_and_says_so_once() {
    use kafka_consumer::{Consumer, ErrorKind, RebalanceListener, TopicPartition};
    use std::sync::{Arc, Mutex};

    struct Lost(Arc<Mutex<Vec<TopicPartition>>>);
    impl RebalanceListener for Lost {
        fn on_partitions_lost(&mut self, _: &mut Consumer, parts: &[TopicPartition]) {
            self.0.lock().unwrap().extend(parts.iter().cloned());
        }
    }

    let topic = unique_topic("groups-fenced-static");
    let group = unique_topic("g-fenced-static");
    Produce::new(&topic, 2, 10).run();
    let settings = [
        ("group.id", group.as_str()),
        ("group.instance.id", "the-only-one"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ];
    let lost = Arc::new(Mutex::new(Vec::new()));
    let mut a = consumer(&settings);
    a.subscribe_with_listener(&[&topic], Lost(Arc::clone(&lost)))
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    while a.assignment().len() < 2 {
        a.poll(Duration::from_millis(200)).expect("a joins");
        assert!(Instant::now() < deadline, "a got no partitions");
    }
    // b takes a's group.instance.id: the coordinator gives it a's place, and a's next
    // heartbeat is refused with FENCED_INSTANCE_ID.
    let mut b = consumer(&settings);
    b.subscribe(&[&topic]).unwrap();
    let e = loop {
        b.poll(Duration::from_millis(100)).expect("b joins");
        match a.poll(Duration::from_millis(100)) {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "a was not fenced"),
        }
    };
    assert_eq!(e.kind(), ErrorKind::GroupFatal, "{e}");
    assert_eq!(e.kafka_code(), Some(82), "FENCED_INSTANCE_ID: {e}");
    assert!(e.to_string().contains("group.instance.id"), "{e}");
    let mut lost_now = lost.lock().unwrap().clone();
    lost_now.sort();
    assert_eq!(
        lost_now,
        all_partitions(&topic, 2),
        "a's partitions are lost (not revoked) before the error"
    );
    assert!(a.assignment().is_empty());
    assert_eq!(a.group_metadata().unwrap().generation_id, -1);
    // Once: a's later polls wait out their timeout and return nothing.
    let start = Instant::now();
    assert!(a.poll(Duration::from_millis(300)).unwrap().is_empty());
    assert!(start.elapsed() >= Duration::from_millis(300));
    // b owns both partitions.
    while b.assignment().len() < 2 {
        b.poll(Duration::from_millis(200))
            .expect("b owns the partitions");
        assert!(Instant::now() < deadline, "b got no partitions");
    }
}

#[test]
fn the_listener_runs_on_the_polling_thread_and_may_commit_and_seek() {
    use kafka_consumer::{Consumer, RebalanceListener, TopicPartition};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Seen {
        assigned: Vec<TopicPartition>,
        revoked: Vec<TopicPartition>,
        threads: BTreeSet<String>,
    }
    struct L(Arc<Mutex<Seen>>);
    impl RebalanceListener for L {
        fn on_partitions_assigned(&mut self, c: &mut Consumer, parts: &[TopicPartition]) {
            let mut s = self.0.lock().unwrap();
            s.threads
                .insert(format!("{:?}", std::thread::current().id()));
            s.assigned.extend(parts.iter().cloned());
            for tp in parts {
                // Start 10 records in, whatever was committed.
                c.seek(tp, 10).expect("seek in on_partitions_assigned");
            }
            let e = c.poll(Duration::ZERO).unwrap_err();
            assert_eq!(e.kind(), kafka_consumer::ErrorKind::InvalidState);
        }
        fn on_partitions_revoked(&mut self, c: &mut Consumer, parts: &[TopicPartition]) {
            let mut s = self.0.lock().unwrap();
            s.threads
                .insert(format!("{:?}", std::thread::current().id()));
            s.revoked.extend(parts.iter().cloned());
            c.commit_sync()
                .expect("commit_sync in on_partitions_revoked");
        }
    }

    let topic = unique_topic("groups-listener");
    let group = unique_topic("g-listener");
    Produce::new(&topic, 2, 100).run();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut c = consumer(&[
        ("group.id", &group),
        ("enable.auto.commit", "false"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe_with_listener(&[&topic], L(Arc::clone(&seen)))
        .unwrap();
    let mut got = Vec::new();
    poll_until(&mut c, LIMIT, "80 records", |recs| {
        got.extend(recs.iter().map(|r| (r.partition(), r.offset())));
        got.len() >= 80
    });
    assert!(
        got.iter().all(|(_, o)| *o >= 10),
        "the seek in the callback applied"
    );
    assert_eq!(c.assignment().len(), 2);
    let meta = c.group_metadata().expect("group metadata");
    assert!(
        meta.generation_id >= 1 && !meta.member_id.is_empty(),
        "{meta:?}"
    );
    let e = c
        .assign(&[TopicPartition::new(topic.as_str(), 0)])
        .unwrap_err();
    assert_eq!(e.kind(), kafka_consumer::ErrorKind::InvalidState);

    c.unsubscribe().unwrap();
    assert!(c.assignment().is_empty());
    let s = seen.lock().unwrap();
    assert_eq!(s.assigned.len(), 2);
    assert_eq!(s.revoked.len(), 2, "unsubscribe revokes what was owned");
    let me = format!("{:?}", std::thread::current().id());
    assert_eq!(
        s.threads,
        BTreeSet::from([me]),
        "callbacks ran on the polling thread"
    );
    drop(s);
    // The commit made in on_partitions_revoked is the group's.
    let committed = c
        .committed(&[
            TopicPartition::new(topic.as_str(), 0),
            TopicPartition::new(topic.as_str(), 1),
        ])
        .unwrap();
    assert!(
        committed
            .values()
            .all(|o| o.as_ref().is_some_and(|o| o.offset == 50)),
        "{committed:?}"
    );
}

#[test]
fn auto_commit_commits_what_poll_returned_and_close_leaves_the_group() {
    let topic = unique_topic("groups-auto");
    let group = unique_topic("g-auto");
    Produce::new(&topic, 1, 30).run();
    let mut c = consumer(&[
        ("group.id", &group),
        ("auto.commit.interval.ms", "200"),
        ("max.poll.records", "10"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe(&[&topic]).unwrap();
    let mut n = 0;
    poll_until(&mut c, LIMIT, "the first 10 records", |recs| {
        n += recs.len();
        n >= 10
    });
    assert_eq!(n, 10);
    // The auto-commit comes from a later poll and never goes past what poll returned.
    std::thread::sleep(Duration::from_millis(300));
    let tp = kafka_consumer::TopicPartition::new(topic.as_str(), 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A poll with no time left returns what is buffered (up to 10 more records) and
        // auto-commits what earlier polls returned.
        let before = n;
        n += c.poll(Duration::ZERO).unwrap().len();
        let committed = c.committed(std::slice::from_ref(&tp)).unwrap()[&tp]
            .as_ref()
            .map(|o| o.offset);
        if let Some(o) = committed {
            assert!(
                o as usize <= before,
                "committed {o} while poll had returned {before}"
            );
            if o >= 10 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no auto-commit");
        std::thread::sleep(Duration::from_millis(250));
    }
    c.close().unwrap();
    // close committed everything returned, and left: another member takes over at once.
    let java = JavaMember::start(&options(&group, &topic, "range"));
    java.wait_owned(
        "the Java member gets the partition",
        Duration::from_secs(20),
        |o| o.len() == 1,
    );
    produce(&topic, 1, 30, 1);
    java.wait_records(31 - n, LIMIT);
    let first = java.records().first().map(|r| r.1);
    assert_eq!(
        first,
        Some(n as i64),
        "the Java member starts after what we returned"
    );
}

#[test]
fn a_regex_subscription_picks_up_a_topic_created_after_subscribing() {
    let prefix = unique_topic("groups-regex");
    let group = unique_topic("g-regex");
    let t1 = format!("{prefix}-a");
    Produce::new(&t1, 1, 5).run();
    let mut c = consumer(&[
        ("group.id", &group),
        ("metadata.max.age.ms", "1000"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe_regex(&format!("{}-.*", regex_escape(&prefix)))
        .unwrap();
    let mut topics = BTreeSet::new();
    poll_until(&mut c, LIMIT, "records of the first topic", |recs| {
        topics.extend(recs.iter().map(|r| r.topic().to_owned()));
        !topics.is_empty()
    });
    let t2 = format!("{prefix}-b");
    Produce::new(&t2, 1, 5).run();
    poll_until(&mut c, LIMIT, "records of the new topic", |recs| {
        topics.extend(recs.iter().map(|r| r.topic().to_owned()));
        topics.contains(&t2)
    });
    let sub = c.subscription().unwrap();
    assert_eq!(sub, vec![t1.clone(), t2.clone()]);
    c.close().unwrap();
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[test]
fn a_panicking_listener_is_an_error_from_poll_and_the_member_goes_on() {
    use kafka_consumer::{Consumer, ErrorKind, RebalanceListener, TopicPartition};

    struct Panics;
    impl RebalanceListener for Panics {
        fn on_partitions_assigned(&mut self, _: &mut Consumer, parts: &[TopicPartition]) {
            if !parts.is_empty() {
                panic!("assigned {} partitions and refused them", parts.len());
            }
        }
    }
    let topic = unique_topic("groups-panic");
    let group = unique_topic("g-panic");
    Produce::new(&topic, 2, 20).run();
    let mut c = consumer(&[
        ("group.id", &group),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe_with_listener(&[&topic], Panics).unwrap();
    let deadline = Instant::now() + LIMIT;
    let e = loop {
        match c.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(r) => {
                assert!(r.is_empty(), "no record before the callback ran");
                assert!(Instant::now() < deadline, "no error from poll");
            }
        }
    };
    assert_eq!(e.kind(), ErrorKind::Listener, "{e}");
    assert!(e.to_string().contains("refused them"), "{e}");
    // The rebalance went on as if the callback had returned: the partitions are assigned
    // and their records arrive.
    let mut n = 0;
    poll_until(&mut c, LIMIT, "20 records after the panic", |recs| {
        n += recs.len();
        n >= 20
    });
    assert_eq!(c.assignment().len(), 2);
    c.close().unwrap();
}

#[test]
fn a_stable_member_s_io_thread_is_idle_between_heartbeats_even_when_the_user_does_not_poll() {
    let cfg = kafka_consumer::ConsumerConfig::new(bootstrap())
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(500));
    let mut c = idle_between_heartbeats("groups-idle", cfg);
    assert_eq!(c.group_metadata().map(|m| m.generation_id > 0), Some(true));
    c.close().unwrap();
}

#[test]
fn a_stable_kip848_member_s_io_thread_is_idle_between_heartbeats() {
    let cfg = kafka_consumer::ConsumerConfig::new(bootstrap())
        .group_protocol(kafka_consumer::GroupProtocol::Consumer);
    let mut c = idle_between_heartbeats("groups-idle-848", cfg);
    let epoch = c.group_metadata().map(|m| m.generation_id);
    assert!(epoch.is_some_and(|e| e > 0), "member epoch {epoch:?}");
    c.close().unwrap();
}

/// A member (of `cfg`'s protocol) of a new group on a new 2-partition topic reads its 10
/// records, then does not poll for 3 s: its I/O thread, heartbeating (every 500 ms in the
/// tests) and long-polling fetches, stays under 5 % of a core, and it is still a member
/// with both partitions. Returns the consumer, to be closed by the caller.
fn idle_between_heartbeats(
    name: &str,
    cfg: kafka_consumer::ConsumerConfig,
) -> kafka_consumer::Consumer {
    let topic = unique_topic(name);
    let group = unique_topic(&format!("g-{name}"));
    Produce::new(&topic, 2, 10).run();
    let cfg = cfg
        .group_id(&group)
        .auto_offset_reset(kafka_consumer::OffsetReset::Earliest);
    let (mut c, io) = IoThread::of(cfg);
    c.subscribe(&[&topic]).unwrap();
    let mut n = 0;
    poll_until(&mut c, LIMIT, "the 10 records", |recs| {
        n += recs.len();
        n >= 10
    });
    let busy = io.busy_fraction_over(Duration::from_secs(3));
    assert!(
        busy < 0.05,
        "the I/O thread used {:.1} % of a core",
        busy * 100.0
    );
    assert_eq!(c.assignment().len(), 2);
    c
}

// ----- a member of another client that sends garbage -------------------------------------

/// A group member spoken by hand on one connection to the broker (the test broker is its
/// own group coordinator): JoinGroup, SyncGroup, Heartbeat and LeaveGroup at the newest
/// versions Kafka 3.9 and 4.x share.
struct RawMember {
    stream: std::net::TcpStream,
    correlation: i32,
}

impl RawMember {
    fn connect() -> RawMember {
        let stream = std::net::TcpStream::connect(bootstrap()).expect("connecting to the broker");
        stream.set_read_timeout(Some(LIMIT)).expect("read timeout");
        RawMember {
            stream,
            correlation: 0,
        }
    }

    /// Sends `req` at version `v` and reads its answer.
    fn call<A: kafka_consumer::testing::api::Api>(&mut self, req: &A, v: i16) -> A::Response {
        use kafka_consumer::testing::frame::{decode_response, encode_request, frame_len};
        use std::io::{Read, Write};
        self.correlation += 1;
        let frame = encode_request(req, v, self.correlation, "raw-member");
        self.stream.write_all(&frame).expect("sending a request");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("an answer");
        let n = frame_len(&size).expect("a frame size").expect("four bytes");
        let mut body = vec![0u8; n];
        self.stream
            .read_exact(&mut body)
            .expect("the answer's body");
        decode_response::<A>(&body, v).expect("a well-formed answer")
    }
}

/// Polls `c` (errors fail the test) until `done` holds, at most [`LIMIT`].
fn poll_until_it(
    c: &mut kafka_consumer::Consumer,
    what: &str,
    done: impl Fn(&kafka_consumer::Consumer) -> bool,
) {
    let deadline = Instant::now() + LIMIT;
    while !done(c) {
        c.poll(Duration::from_millis(100)).expect("poll");
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
    }
}

/// Another client joins a group our consumer leads with a subscription that does not decode
/// (a negative version): our leader assigns it nothing, as an assignment it can decode, and
/// keeps every partition itself; the group completes the rebalance, nobody gets an error.
#[test]
fn a_member_whose_subscription_does_not_decode_gets_an_empty_assignment_from_our_leader() {
    use kafka_consumer::testing::api::join_group::{JoinGroupRequest, JoinGroupRequestProtocol};
    use kafka_consumer::testing::api::leave_group::{LeaveGroupRequest, MemberIdentity};
    use kafka_consumer::testing::api::sync_group::SyncGroupRequest;
    use kafka_consumer::testing::consumer_protocol::ConsumerProtocolAssignment;
    use kafka_consumer::testing::message::Bytes;

    let topic = unique_topic("groups-garbage");
    let group = unique_topic("g-garbage");
    Produce::new(&topic, 3, 3).run();
    let mut c = consumer(&[
        ("group.id", &group),
        ("partition.assignment.strategy", "range"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ]);
    c.subscribe(&[&topic]).unwrap();
    poll_until_it(&mut c, "ours alone owns the topic", |c| {
        c.assignment().len() == 3
    });

    // The other member joins on a thread of its own: its JoinGroup is answered only once
    // our leader (polled below) has rejoined, and its SyncGroup once the leader assigned.
    let g = group.clone();
    let other = std::thread::spawn(move || {
        let mut m = RawMember::connect();
        let mut join = JoinGroupRequest {
            group_id: g.clone(),
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 60_000,
            member_id: String::new(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: Bytes(vec![0xff, 0xff]),
            }],
            reason: None,
        };
        let first = m.call(&join, 9);
        assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED: {first:?}");
        join.member_id = first.member_id;
        let joined = m.call(&join, 9);
        assert_eq!(joined.error_code, 0, "{joined:?}");
        let sync = SyncGroupRequest {
            group_id: g.clone(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: joined.protocol_name.clone(),
            assignments: Vec::new(),
        };
        let synced = m.call(&sync, 5);
        assert_eq!(synced.error_code, 0, "{synced:?}");
        (m, joined, synced)
    });
    poll_until_it(&mut c, "the other member synced", |_| other.is_finished());
    let (mut m, joined, synced) = other.join().expect("the other member's thread");
    assert_ne!(joined.leader, joined.member_id, "ours leads");
    assert!(
        joined.members.is_empty(),
        "only the leader sees the members"
    );
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    let theirs = ConsumerProtocolAssignment::decode(&synced.assignment.0)
        .expect("an assignment the other member can decode");
    assert_eq!(
        theirs,
        ConsumerProtocolAssignment::default(),
        "nothing for it"
    );
    // Ours has every partition again (range, eager: it gave them up to rejoin) and stays
    // stable beside the other member: no rebalance after rebalance, no error.
    poll_until_it(&mut c, "ours owns the topic again", |c| {
        c.assignment().len() == 3
    });
    let generation = c.group_metadata().map(|g| g.generation_id);
    assert_eq!(generation, Some(joined.generation_id));
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        c.poll(Duration::from_millis(100)).expect("poll");
    }
    assert_eq!(c.assignment().len(), 3);
    assert_eq!(c.group_metadata().map(|g| g.generation_id), generation);

    let leave = LeaveGroupRequest {
        group_id: group.clone(),
        member_id: String::new(),
        members: vec![MemberIdentity {
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            reason: Some("test over".into()),
        }],
    };
    let left = m.call(&leave, 5);
    assert_eq!(left.error_code, 0, "{left:?}");
    c.close().unwrap();
}
