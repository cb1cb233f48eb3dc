//! Throughput benchmark contender "rdkafka" (see `benches/README.md`, run by
//! `scripts/bench.sh`): librdkafka's consumer, through the `rdkafka` crate's `BaseConsumer`,
//! reads a whole topic from the beginning and prints one JSON line.
//!
//! ```text
//! rdkafka-perf-consume BOOTSTRAP TOPIC EXPECTED_RECORDS [--no-crc] [-X key=value]...
//! rdkafka-perf-consume --version
//! ```
//!
//! Assigns every partition of TOPIC at `Offset::Beginning` and polls until
//! EXPECTED_RECORDS records have arrived, then prints `{"records":N,"bytes":B,"elapsed_s":S}`:
//! B is the sum of the value lengths, S runs from just before the first `poll` to the poll
//! that returned the last record. `check.crcs=true` unless `--no-crc` (librdkafka's own
//! default is false); `-X key=value` sets any other librdkafka property. `--version` prints the librdkafka version and its builtin features.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

fn main() {
    if let Err(e) = run() {
        eprintln!("rdkafka-perf-consume: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version") {
        let (num, s) = rdkafka::util::get_rdkafka_version();
        let features = ClientConfig::new().create_native_config()?.get("builtin.features")?;
        println!(
            "{{\"librdkafka\":\"{s}\",\"version_int\":\"0x{num:08x}\",\"rdkafka_crate\":\"0.39.0\",\"builtin_features\":\"{features}\"}}"
        );
        return Ok(());
    }
    let no_crc = args.iter().any(|a| a == "--no-crc");
    // -X key=value: extra librdkafka properties (applied last).
    let mut extra = Vec::new();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-X" {
            let kv = it.next().ok_or("-X needs key=value")?;
            let (k, v) = kv.split_once('=').ok_or("-X needs key=value")?;
            extra.push((k.to_owned(), v.to_owned()));
        } else if !a.starts_with('-') {
            positional.push(a);
        }
    }
    if positional.len() != 3 {
        return Err("usage: rdkafka-perf-consume BOOTSTRAP TOPIC EXPECTED_RECORDS [--no-crc] [-X key=value]...".into());
    }
    let (bootstrap, topic) = (positional[0].as_str(), positional[1].as_str());
    let expected: u64 = positional[2].parse()?;

    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "rdkafka-perf-consume")
        // Required by librdkafka even without subscribe(); nothing is committed.
        .set("group.id", format!("rdkafka-perf-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("check.crcs", if no_crc { "false" } else { "true" })
        .set("fetch.min.bytes", "1")
        .set("fetch.max.bytes", "52428800")
        .set("fetch.message.max.bytes", "1048576")
        .set("fetch.wait.max.ms", "500");
    for (k, v) in &extra {
        config.set(k, v);
    }
    let consumer: BaseConsumer = config.create()?;

    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30))?;
    let mut tpl = TopicPartitionList::new();
    for t in metadata.topics() {
        if let Some(err) = t.error() {
            return Err(format!("metadata for {topic}: {err:?}").into());
        }
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)?;
        }
    }
    if tpl.count() == 0 {
        return Err(format!("topic {topic} has no partitions").into());
    }
    consumer.assign(&tpl)?;

    let idle_limit = Duration::from_secs(60);
    let (mut records, mut bytes) = (0u64, 0u64);
    // No clock read per message: `idle_since` is only advanced on empty polls.
    let (mut idle_since, mut got_any) = (Instant::now(), false);
    let started = Instant::now();
    while records < expected {
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if got_any {
                    (idle_since, got_any) = (Instant::now(), false);
                } else if idle_since.elapsed() > idle_limit {
                    break;
                }
            }
            Some(Err(e)) => return Err(format!("poll: {e}").into()),
            Some(Ok(m)) => {
                records += 1;
                bytes += m.payload().map_or(0, |v| v.len()) as u64;
                got_any = true;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!("{{\"records\":{records},\"bytes\":{bytes},\"elapsed_s\":{elapsed:.6}}}");
    if records < expected {
        return Err(format!(
            "got {records} of {expected} records from {topic}: none for {}s",
            idle_limit.as_secs()
        )
        .into());
    }
    Ok(())
}
