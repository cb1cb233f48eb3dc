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
