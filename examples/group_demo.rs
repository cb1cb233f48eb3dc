//! Three members of one consumer group share a topic; one joins after the other, then one
//! leaves, and its partitions move to the two that stay. Prints a timeline of who owned
//! what and how many records each had processed, then checks that every record of the
//! topic was processed. `scripts/demo.sh` runs it on the local broker.
//!
//! ```text
//! cargo run --release --example group_demo -- BOOTSTRAP TOPIC EXPECTED_RECORDS [ASSIGNOR]
//! ```
//!
//! ASSIGNOR is a classic assignor (`partition.assignment.strategy`), or `consumer` for the
//! KIP-848 protocol (`group.protocol=consumer`, the broker's assignor).
//!
//! Each member "works" 50 ms per batch of at most 200 records, so that the backlog lasts
//! long enough to be shared. Commits: in `on_partitions_revoked` (what was processed) and
//! after each batch, so a partition that moves continues where it stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_consumer::{
    Consumer, ConsumerConfig, GroupProtocol, OffsetAndMetadata, OffsetReset, RebalanceListener,
    TopicPartition,
};

/// What the members tell the timeline.
struct Shared {
    start: Instant,
    names: Vec<&'static str>,
    owned: Mutex<BTreeMap<&'static str, BTreeSet<i32>>>,
    processed: Vec<AtomicU64>,
    lines: Mutex<Vec<String>>,
}

impl Shared {
    fn note(&self, who: &'static str, what: &str) {
        let t = self.start.elapsed().as_secs_f64();
        let owned = self.owned.lock().unwrap();
        let mut cols = String::new();
        for (i, name) in self.names.iter().enumerate() {
            let parts = owned.get(name).map_or_else(String::new, |s| {
                s.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            let n = self.processed[i].load(Ordering::Relaxed);
            cols.push_str(&format!(
                "  {:<13} {:>7}",
                if parts.is_empty() {
                    "-".to_owned()
                } else {
                    parts
                },
                n
            ));
        }
        let line = format!("{t:6.2} s  {who} {what:<24}{cols}");
        println!("{line}");
        self.lines.lock().unwrap().push(line);
    }
}

struct Member {
    name: &'static str,
    shared: Arc<Shared>,
}

fn numbers(partitions: &[TopicPartition]) -> String {
    let v: Vec<String> = partitions
        .iter()
        .map(|tp| tp.partition().to_string())
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

impl RebalanceListener for Member {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let offsets: HashMap<TopicPartition, OffsetAndMetadata> = consumer
            .consumed_offsets()
            .into_iter()
            .filter(|(tp, _)| partitions.contains(tp))
            .collect();
        if let Err(e) = consumer.commit_offsets_sync(&offsets) {
            eprintln!("{}: commit on revoke failed: {e}", self.name);
        }
        {
            let mut owned = self.shared.owned.lock().unwrap();
            let mine = owned.entry(self.name).or_default();
            for tp in partitions {
                mine.remove(&tp.partition());
            }
        }
        if !partitions.is_empty() {
            self.shared
                .note(self.name, &format!("revoked {}", numbers(partitions)));
        }
    }

    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        {
            let mut owned = self.shared.owned.lock().unwrap();
            owned
                .entry(self.name)
                .or_default()
                .extend(partitions.iter().map(|tp| tp.partition()));
        }
        if !partitions.is_empty() {
            self.shared
                .note(self.name, &format!("assigned {}", numbers(partitions)));
        }
    }

    fn on_partitions_lost(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        {
            let mut owned = self.shared.owned.lock().unwrap();
            let mine = owned.entry(self.name).or_default();
            for tp in partitions {
                mine.remove(&tp.partition());
            }
        }
        self.shared
            .note(self.name, &format!("lost {}", numbers(partitions)));
    }
}

fn main() -> kafka_consumer::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: group_demo BOOTSTRAP TOPIC EXPECTED_RECORDS [ASSIGNOR]");
        std::process::exit(2);
    }
    let (bootstrap, topic) = (args[0].clone(), args[1].clone());
    let expected: u64 = args[2].parse().expect("EXPECTED_RECORDS is a number");
    let assignor = args.get(3).cloned();
    let group = format!("demo-{}", std::process::id());
    let names = vec!["A", "B", "C"];
    let shared = Arc::new(Shared {
        start: Instant::now(),
        names: names.clone(),
        owned: Mutex::new(BTreeMap::new()),
        processed: names.iter().map(|_| AtomicU64::new(0)).collect(),
        lines: Mutex::new(Vec::new()),
    });
    println!(
        "group {group}, topic {topic}, assignor {}; columns: partitions owned, records processed",
        assignor
            .as_deref()
            .unwrap_or("default (range, cooperative-sticky)")
    );
    println!(
        "{:>8}  {:<26}{}",
        "time",
        "event",
        names
            .iter()
            .map(|n| format!("  {n:<13} {:>7}", "records"))
            .collect::<String>()
    );

    // Per member: when it starts, and when it leaves (None: at the end).
    let plan = [
        ("A", Duration::ZERO, None),
        ("B", Duration::from_millis(1500), None),
        (
            "C",
            Duration::from_millis(3000),
            Some(Duration::from_millis(6000)),
        ),
    ];
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, (name, start_at, leave_at)) in plan.into_iter().enumerate() {
        let (bootstrap, topic, group, assignor) = (
            bootstrap.clone(),
            topic.clone(),
            group.clone(),
            assignor.clone(),
        );
        let shared = Arc::clone(&shared);
        let done = Arc::clone(&done);
        threads.push(std::thread::spawn(move || -> kafka_consumer::Result<()> {
            std::thread::sleep(start_at);
            let mut config = ConsumerConfig::new(&bootstrap)
                .group_id(&group)
                .client_id(name)
                .auto_offset_reset(OffsetReset::Earliest)
                .enable_auto_commit(false)
                .max_poll_records(200);
            match assignor.as_deref() {
                // The KIP-848 protocol: the broker assigns, and owns the session timing.
                Some("consumer") => config = config.group_protocol(GroupProtocol::Consumer),
                a => {
                    config = config
                        .session_timeout(Duration::from_secs(10))
                        .heartbeat_interval(Duration::from_secs(1));
                    if let Some(a) = a {
                        config = config.partition_assignment_strategy(&[a]);
                    }
                }
            }
            let mut consumer = Consumer::new(config)?;
            shared.note(name, "joins");
            consumer.subscribe_with_listener(
                &[topic.as_str()],
                Member {
                    name,
                    shared: Arc::clone(&shared),
                },
            )?;
            while !done.load(Ordering::Relaxed) {
                if leave_at.is_some_and(|t| shared.start.elapsed() >= t) {
                    break;
                }
                let records = consumer.poll(Duration::from_millis(100))?;
                if records.is_empty() {
                    continue;
                }
                std::thread::sleep(Duration::from_millis(50)); // the work
                shared.processed[i].fetch_add(records.len() as u64, Ordering::Relaxed);
                consumer.commit_async(None)?;
            }
            shared.note(name, "leaves (close)");
            consumer.close()
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let total: u64 = shared
            .processed
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum();
        if total >= expected || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("member thread")?;
    }
    let total: u64 = shared
        .processed
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .sum();
    let per: Vec<String> = names
        .iter()
        .zip(&shared.processed)
        .map(|(n, c)| format!("{n} {}", c.load(Ordering::Relaxed)))
        .collect();
    println!(
        "processed {total} records of {expected} ({}); {}",
        per.join(", "),
        if total == expected {
            "each exactly once"
        } else if total > expected {
            "some twice (a member left before its commit)"
        } else {
            "SOME MISSING"
        }
    );
    if total < expected {
        std::process::exit(1);
    }
    Ok(())
}
