//! Commits in manual-assignment mode against the real broker: `commit_sync`,
//! `commit_async`, `committed`, and committed offsets positioning newly assigned partitions.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use kafka_consumer::{ErrorKind, OffsetAndMetadata, TopicPartition};

#[test]
fn commit_sync_then_a_new_consumer_of_the_group_resumes_after_the_commit() {
    let topic = unique_topic("commit-resume");
    let group = unique_topic("group");
    Produce::new(&topic, 2, 1_000).run();
    let parts = all_partitions(&topic, 2);

    let mut c = consumer(&[("group.id", &group)]);
    c.assign(&parts).unwrap();
    let mut got = 0;
    poll_until(&mut c, Duration::from_secs(30), "300 records", |r| {
        got += r.len();
        got >= 300
    });
    let consumed = c.consumed_offsets();
    assert_eq!(consumed.len(), 2, "{consumed:?}");
    c.commit_sync().unwrap();
    let committed = c.committed(&parts).unwrap();
    for tp in &parts {
        let want = consumed[tp].offset;
        assert_eq!(committed[tp].as_ref().map(|o| o.offset), Some(want), "{tp}");
    }
    let total: i64 = consumed.values().map(|o| o.offset).sum();
    c.close().unwrap();

    // A new consumer of the same group starts where the commit left off: it reads exactly
    // the records after the committed offsets.
    let mut d = consumer(&[("group.id", &group)]);
    d.assign(&parts).unwrap();
    let mut rest = 0i64;
    poll_until(&mut d, Duration::from_secs(30), "the rest", |r| {
        for rec in r {
            let tp = TopicPartition::new(rec.topic(), rec.partition());
            assert!(
                rec.offset() >= consumed[&tp].offset,
                "{tp} read {} again",
                rec.offset()
            );
        }
        rest += r.len() as i64;
        rest >= 1_000 - total
    });
    assert_eq!(rest, 1_000 - total);
}

#[test]
fn commit_async_reports_to_its_callback_on_a_later_poll_and_metadata_is_kept() {
    let topic = unique_topic("commit-async");
    let group = unique_topic("group");
    Produce::new(&topic, 1, 10).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let mut c = consumer(&[("group.id", &group)]);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let seen: Arc<Mutex<Vec<(i64, bool)>>> = Arc::default();
    let mut offsets = HashMap::new();
    offsets.insert(
        tp.clone(),
        OffsetAndMetadata {
            offset: 7,
            leader_epoch: None,
            metadata: "checkpoint-7".into(),
        },
    );
    let s = Arc::clone(&seen);
    c.commit_offsets_async(
        offsets,
        Some(Box::new(move |o, r| {
            s.lock()
                .unwrap()
                .push((o.values().next().unwrap().offset, r.is_ok()));
        })),
    )
    .unwrap();
    assert!(seen.lock().unwrap().is_empty(), "never before a later poll");
    poll_until(&mut c, Duration::from_secs(30), "the callback", |_| {
        !seen.lock().unwrap().is_empty()
    });
    assert_eq!(*seen.lock().unwrap(), vec![(7, true)]);
    let committed = c.committed(std::slice::from_ref(&tp)).unwrap();
    let o = committed[&tp].as_ref().unwrap();
    assert_eq!((o.offset, o.metadata.as_str()), (7, "checkpoint-7"));
}

#[test]
fn without_a_group_id_commits_are_a_clear_error() {
    let mut c = consumer(&[]);
    let e = c.commit_sync().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("group.id"), "{e}");
    let e = c.committed(&[TopicPartition::new("t", 0)]).unwrap_err();
    assert!(e.to_string().contains("group.id"), "{e}");
}

/// What the Java consumer's `committed()` says for partitions 0..n of `topic` in `group`:
/// per partition, `None` or the offset and metadata.
fn java_committed(group: &str, topic: &str, n: i32) -> Vec<Option<(i64, String)>> {
    let out = admin(
        "committed",
        &[
            ("--group", group),
            ("--topic", topic),
            ("--partitions", &n.to_string()),
        ],
    );
    let mut seen = vec![None; n as usize];
    let mut lines = 0;
    for line in out.lines().filter(|l| l.starts_with("committed ")) {
        lines += 1;
        let mut f = line.splitn(4, ' ');
        f.next();
        let p: usize = f.next().unwrap().parse().unwrap();
        seen[p] = match f.next().unwrap() {
            "none" => None,
            o => Some((o.parse().unwrap(), f.next().unwrap_or("").to_owned())),
        };
    }
    assert_eq!(lines, n, "Java printed:\n{out}");
    seen
}

fn offset(o: i64, metadata: &str) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset: o,
        leader_epoch: None,
        metadata: metadata.into(),
    }
}

#[test]
fn the_java_consumer_sees_our_commits_with_their_metadata_and_we_see_its_commits() {
    let topic = unique_topic("commit-java");
    let group = unique_topic("group");
    Produce::new(&topic, 3, 300).run();
    let parts = all_partitions(&topic, 3);
    let mut c = consumer(&[("group.id", &group)]);
    let ours: HashMap<TopicPartition, OffsetAndMetadata> = [
        (parts[0].clone(), offset(5, "checkpoint five")),
        (parts[1].clone(), offset(17, "")),
    ]
    .into_iter()
    .collect();
    c.commit_offsets_sync(&ours).unwrap();
    assert_eq!(
        java_committed(&group, &topic, 3),
        vec![
            Some((5, "checkpoint five".to_owned())),
            Some((17, String::new())),
            None
        ]
    );

    // Java commits partition 2; our committed() and a newly assigned partition see it.
    admin(
        "commit",
        &[
            ("--group", &group),
            ("--topic", &topic),
            ("--partition", "2"),
            ("--offset", "42"),
            ("--metadata", "from-java"),
        ],
    );
    let committed = c.committed(&parts).unwrap();
    let got = |tp: &TopicPartition| {
        committed[tp]
            .as_ref()
            .map(|o| (o.offset, o.metadata.clone()))
    };
    assert_eq!(got(&parts[0]), Some((5, "checkpoint five".to_owned())));
    assert_eq!(got(&parts[1]), Some((17, String::new())));
    assert_eq!(got(&parts[2]), Some((42, "from-java".to_owned())));
    c.assign(&parts[2..]).unwrap();
    assert_eq!(c.position(&parts[2]).unwrap(), 42);
    let mut first = None;
    poll_until(&mut c, Duration::from_secs(30), "a record", |r| {
        first = r.iter().next().map(|r| r.offset());
        first.is_some()
    });
    assert_eq!(first, Some(42));
}

#[test]
fn committing_to_a_group_with_an_active_member_fails_with_commit_failed_saying_why() {
    let topic = unique_topic("commit-member");
    Produce::new(&topic, 1, 10).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    for protocol in ["classic", "consumer"] {
        let group = unique_topic("group");
        let member = group_member(&group, &topic, protocol);
        let mut c = consumer(&[("group.id", &group)]);
        let offsets: HashMap<TopicPartition, OffsetAndMetadata> =
            [(tp.clone(), OffsetAndMetadata::new(3))]
                .into_iter()
                .collect();
        let e = c.commit_offsets_sync(&offsets).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CommitFailed, "{protocol}: {e}");
        assert!(
            e.to_string().contains("active members"),
            "{protocol}: the error says why: {e}"
        );
        // commit_async reports the same to its callback.
        let seen: Arc<Mutex<Vec<ErrorKind>>> = Arc::default();
        let s = Arc::clone(&seen);
        c.commit_offsets_async(
            offsets.clone(),
            Some(Box::new(move |_, r| {
                s.lock().unwrap().push(r.unwrap_err().kind());
            })),
        )
        .unwrap();
        poll_until(&mut c, Duration::from_secs(30), "the callback", |_| {
            !seen.lock().unwrap().is_empty()
        });
        assert_eq!(*seen.lock().unwrap(), vec![ErrorKind::CommitFailed]);
        // Once the member has left, the group is empty and the commit goes through.
        member.finish();
        c.commit_offsets_sync(&offsets).unwrap();
        let committed = c.committed(std::slice::from_ref(&tp)).unwrap();
        assert_eq!(committed[&tp].as_ref().map(|o| o.offset), Some(3));
    }
}

#[test]
fn commit_async_callbacks_run_in_commit_order_on_later_polls() {
    let topic = unique_topic("commit-order");
    let group = unique_topic("group");
    Produce::new(&topic, 2, 10).run();
    let parts = all_partitions(&topic, 2);
    let mut c = consumer(&[("group.id", &group)]);
    let order: Arc<Mutex<Vec<(i64, bool)>>> = Arc::default();
    for n in 1..=20i64 {
        let offsets: HashMap<TopicPartition, OffsetAndMetadata> = parts
            .iter()
            .map(|tp| (tp.clone(), OffsetAndMetadata::new(n)))
            .collect();
        let o = Arc::clone(&order);
        c.commit_offsets_async(
            offsets,
            Some(Box::new(move |offsets, r| {
                let n = offsets.values().next().unwrap().offset;
                o.lock().unwrap().push((n, r.is_ok()));
            })),
        )
        .unwrap();
    }
    assert!(
        order.lock().unwrap().is_empty(),
        "callbacks run only in poll"
    );
    poll_until(&mut c, Duration::from_secs(30), "all callbacks", |_| {
        order.lock().unwrap().len() >= 20
    });
    assert_eq!(
        *order.lock().unwrap(),
        (1..=20).map(|n| (n, true)).collect::<Vec<_>>()
    );
    // The last commit won.
    let committed = c.committed(&parts).unwrap();
    for tp in &parts {
        assert_eq!(committed[tp].as_ref().map(|o| o.offset), Some(20), "{tp}");
    }
}

#[test]
fn with_a_group_and_nothing_committed_a_partition_starts_from_auto_offset_reset() {
    let topic = unique_topic("commit-none");
    let group = unique_topic("group");
    Produce::new(&topic, 1, 100).run();
    let tp = TopicPartition::new(topic.as_str(), 0);
    let one = std::slice::from_ref(&tp);

    let mut earliest = consumer(&[("group.id", &group), ("auto.offset.reset", "earliest")]);
    earliest.assign(one).unwrap();
    assert_eq!(earliest.position(&tp).unwrap(), 0);

    let mut latest = consumer(&[("group.id", &group), ("auto.offset.reset", "latest")]);
    latest.assign(one).unwrap();
    assert_eq!(latest.position(&tp).unwrap(), 100);

    let mut none = consumer(&[("group.id", &group), ("auto.offset.reset", "none")]);
    none.assign(one).unwrap();
    let e = none.poll(Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoOffset, "{e}");
    assert_eq!(e.partition(), Some(&tp));
    // Nothing was committed by looking.
    assert_eq!(none.committed(one).unwrap()[&tp], None);
}

/// What a group member does when its partitions are handed over: consume, commit, give
/// the partitions up, then take some of them back. The re-assigned partitions start at
/// the commit and their records arrive (the fetch session must fetch them again).
#[test]
fn partitions_given_up_and_assigned_again_resume_from_their_commit() {
    for (gap, poll_records, consume_all) in
        [(0, "7", false), (300, "500", false), (2000, "500", true)]
    {
        given_up_and_assigned_again(gap, poll_records, consume_all);
    }
}

fn given_up_and_assigned_again(gap_ms: u64, max_poll_records: &str, consume_all: bool) {
    let topic = unique_topic("commit-reassign");
    let group = unique_topic("group");
    Produce::new(&topic, 4, 400).run();
    let parts = all_partitions(&topic, 4);

    let mut c = consumer(&[("group.id", &group), ("max.poll.records", max_poll_records)]);
    c.assign(&parts).unwrap();
    let mut seen: HashMap<TopicPartition, i64> = HashMap::new();
    let mut n = 0;
    poll_until(
        &mut c,
        Duration::from_secs(30),
        "some of every partition",
        |r| {
            for rec in r {
                seen.insert(
                    TopicPartition::new(rec.topic(), rec.partition()),
                    rec.offset(),
                );
            }
            n += r.len();
            seen.len() == 4 && (!consume_all || n == 400)
        },
    );
    c.commit_sync().unwrap();
    let consumed = c.consumed_offsets();
    c.assign(&[]).unwrap();
    let until = std::time::Instant::now() + Duration::from_millis(gap_ms);
    while std::time::Instant::now() < until {
        assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
    }

    let again = &parts[1..3];
    c.assign(again).unwrap();
    let mut total: i64 = again.iter().map(|tp| 100 - consumed[tp].offset).sum();
    if consume_all {
        Produce {
            start: 400,
            ..Produce::new(&topic, 4, 40)
        }
        .run();
        total += 20;
    }
    let mut rest = 0i64;
    let what = format!("the rest of two partitions (gap {gap_ms} ms, max.poll.records {max_poll_records}, all {consume_all})");
    poll_until(&mut c, Duration::from_secs(20), &what, |r| {
        for rec in r {
            let tp = TopicPartition::new(rec.topic(), rec.partition());
            assert!(again.contains(&tp), "{tp} is not assigned");
            assert!(
                rec.offset() >= consumed[&tp].offset,
                "{tp} read {} again",
                rec.offset()
            );
        }
        rest += r.len() as i64;
        rest >= total
    });
    assert_eq!(rest, total);
}
