//! A consumer group member with at-least-once processing: it commits only what it has
//! processed, after each batch and in `on_partitions_revoked`, so a partition that moves to
//! another member continues where this one stopped.
//!
//! ```text
//! cargo run --release --example group_consumer -- 127.0.0.1:19092 my-group topic1,topic2
//! ```
//!
//! Run it in several terminals with the same group: the partitions are shared between the
//! running copies, and move when one stops (Ctrl-C kills it: its partitions move after
//! `session.timeout.ms`; stdin closing (Ctrl-D) makes it leave at once).

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use kafka_consumer::{
    Consumer, ConsumerConfig, OffsetAndMetadata, OffsetReset, RebalanceListener, TopicPartition,
};

/// Commits the processed offsets of partitions before they go to another member.
struct CommitOnRevoke;

impl RebalanceListener for CommitOnRevoke {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        // `consumed_offsets` holds, per partition, the offset after the last record `poll`
        // returned. This program processes each batch before it polls again, so that is
        // what it has processed.
        let offsets: HashMap<TopicPartition, OffsetAndMetadata> = consumer
            .consumed_offsets()
            .into_iter()
            .filter(|(tp, _)| partitions.contains(tp))
            .collect();
        match consumer.commit_offsets_sync(&offsets) {
            Ok(()) => eprintln!(
                "revoked {partitions:?}; committed {} offsets",
                offsets.len()
            ),
            Err(e) => eprintln!("revoked {partitions:?}; commit failed: {e}"),
        }
    }

    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        eprintln!("assigned {partitions:?}");
    }

    fn on_partitions_lost(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        // Another member may own them already: committing would fail, and must not be tried.
        eprintln!("lost {partitions:?}");
    }
}

fn main() -> kafka_consumer::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, group, topics] = args.as_slice() else {
        eprintln!("usage: group_consumer BOOTSTRAP GROUP TOPIC[,TOPIC...]");
        std::process::exit(2);
    };
    let config = ConsumerConfig::new(bootstrap)
        .group_id(group)
        .auto_offset_reset(OffsetReset::Earliest)
        // This program commits itself, after processing.
        .enable_auto_commit(false);
    let mut consumer = Consumer::new(config)?;
    let topics: Vec<&str> = topics.split(',').collect();
    consumer.subscribe_with_listener(&topics, CommitOnRevoke)?;

    // Stop (and leave the group) when stdin closes.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        let _ = stop_tx.send(());
    });

    let mut processed = 0u64;
    while stop_rx.try_recv().is_err() {
        let records = consumer.poll(Duration::from_millis(500))?;
        if records.is_empty() {
            continue;
        }
        for r in &records {
            // Process the record (here: count it).
            let _ = (r.key(), r.value());
            processed += 1;
        }
        println!("{processed} records processed");
        // Commit what was processed; a failure is retried by the next commit.
        consumer.commit_async(Some(Box::new(|_, result| {
            if let Err(e) = result {
                eprintln!("commit failed: {e}");
            }
        })))?;
    }
    // Revokes (committing in the listener) and leaves the group.
    consumer.close()
}
