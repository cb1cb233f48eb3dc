//! Consumes a topic and prints the consumer's metrics in the Prometheus text exposition
//! format, each under its Java client name (`records-consumed-rate` in
//! `consumer-fetch-manager-metrics` becomes
//! `kafka_consumer_fetch_manager_records_consumed_rate{client_id="..."}`), per-broker
//! figures with a `node_id` label and per-partition lag and lead with `topic` and
//! `partition`.
//!
//! ```text
//! cargo run --release --example prometheus -- [BOOTSTRAP] [TOPIC] [--group GROUP]
//!     [--every SECONDS] [--for SECONDS]
//! ```
//!
//! Without `--group` it reads every partition of the topic from the beginning and stops
//! once each has reached the end offset it had at the start; with `--group` it subscribes
//! as a member of GROUP and runs for `--for` seconds (default 30). It prints the metrics
//! once at the end, and also every `--every` seconds if given. To be scraped, serve the
//! same text from an HTTP endpoint (the `text/plain; version=0.0.4` content type), or write
//! it to a file that node_exporter's textfile collector reads.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use kafka_consumer::{Consumer, ConsumerConfig, Metric, MetricKind, OffsetReset};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mut positional = Vec::new();
    let mut k = 0;
    while k < args.len() {
        if args[k].starts_with("--") {
            k += 2;
        } else {
            positional.push(args[k].as_str());
            k += 1;
        }
    }
    let bootstrap = positional.first().copied().unwrap_or("127.0.0.1:19092");
    let topic = positional.get(1).copied().unwrap_or("sample");
    let group = option("--group");
    let every = option("--every")
        .and_then(|s| s.parse::<f64>().ok())
        .map(Duration::from_secs_f64);
    let run_for = Duration::from_secs_f64(
        option("--for")
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(30.0),
    );

    let mut config = ConsumerConfig::new(bootstrap)
        .client_id("prometheus-example")
        .auto_offset_reset(OffsetReset::Earliest);
    if let Some(g) = &group {
        config = config.group_id(g);
    }
    let mut consumer = Consumer::new(config)?;
    let partitions = consumer.partitions_for(topic)?;
    let end = if group.is_some() {
        consumer.subscribe(&[topic])?;
        None
    } else {
        let end = consumer.end_offsets(&partitions)?;
        consumer.assign(&partitions)?;
        consumer.seek_to_beginning(&partitions)?;
        Some(end)
    };

    let started = Instant::now();
    let mut next_print = every.map(|e| started + e);
    loop {
        let done = match &end {
            Some(end) => {
                let mut caught_up = true;
                for tp in &partitions {
                    caught_up &= consumer.position(tp)? >= end[tp];
                }
                caught_up
            }
            None => started.elapsed() >= run_for,
        };
        if done {
            break;
        }
        for r in &consumer.poll(Duration::from_millis(200))? {
            // A real application processes the record here.
            let _ = r.value();
        }
        if let (Some(at), Some(e)) = (next_print, every) {
            if Instant::now() >= at {
                print!("{}", exposition(&mut consumer));
                next_print = Some(at + e);
            }
        }
    }
    print!("{}", exposition(&mut consumer));
    consumer.close()?;
    Ok(())
}

/// Every metric of `consumer` (client-wide, per broker, per partition) in the Prometheus
/// text format: one `# HELP` and `# TYPE` per metric name, then its samples.
fn exposition(consumer: &mut Consumer) -> String {
    let metrics = consumer.metrics();
    let partitions = consumer.partition_metrics();
    let all = metrics.iter().chain(metrics.iter_partitions(&partitions));
    // Samples of one name must come together: group them, in the order first seen.
    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, (Metric, Vec<Metric>)> = HashMap::new();
    for m in all {
        let name = prometheus_name(&m);
        match families.get_mut(&name) {
            Some((_, samples)) => samples.push(m),
            None => {
                order.push(name.clone());
                families.insert(name, (m.clone(), vec![m]));
            }
        }
    }
    let mut out = String::new();
    for name in &order {
        let (first, samples) = &families[name];
        let kind = match first.kind {
            MetricKind::Counter => "counter",
            _ => "gauge",
        };
        let _ = writeln!(out, "# HELP {name} {}", first.description);
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for m in samples {
            let labels: Vec<String> = m
                .tags
                .iter()
                .map(|(k, v)| format!("{}=\"{}\"", k.replace('-', "_"), escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {}", labels.join(","), value(m.value));
        }
    }
    out
}

/// `kafka_consumer_` + the Java group without `consumer-` and `-metrics` + the name, with
/// underscores: `consumer-fetch-manager-metrics` / `records-consumed-rate` becomes
/// `kafka_consumer_fetch_manager_records_consumed_rate`.
fn prometheus_name(m: &Metric) -> String {
    let group = m
        .group
        .trim_start_matches("consumer")
        .trim_end_matches("metrics")
        .trim_matches('-');
    let name = if group.is_empty() {
        format!("kafka_consumer_{}", m.name)
    } else {
        format!("kafka_consumer_{group}_{}", m.name)
    };
    name.replace('-', "_")
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value as Prometheus writes it (`NaN`, `+Inf`, `-Inf`, or the number).
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}
