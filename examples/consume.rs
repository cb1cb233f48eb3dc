//! Reads a whole topic from the beginning and prints a summary per partition.
//!
//! ```text
//! cargo run --release --example consume -- [BOOTSTRAP] [TOPIC] [--print N]
//! ```
//!
//! It stops when every partition has reached the end offset it had at the start.

use std::time::{Duration, Instant};

use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let positional: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let bootstrap = positional.first().map_or("127.0.0.1:19092", |s| s.as_str());
    let topic = positional.get(1).map_or("sample", |s| s.as_str());
    let print = args
        .iter()
        .position(|a| a == "--print")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(5);

    let config = ConsumerConfig::new(bootstrap)
        .client_id("consume-example")
        .auto_offset_reset(OffsetReset::Earliest);
    let mut consumer = Consumer::new(config)?;
    let partitions = consumer.partitions_for(topic)?;
    let end = consumer.end_offsets(&partitions)?;
    consumer.assign(&partitions)?;
    consumer.seek_to_beginning(&partitions)?;

    let started = Instant::now();
    let mut counts: Vec<u64> = vec![0; partitions.len()];
    let (mut records, mut bytes, mut printed) = (0u64, 0u64, 0usize);
    loop {
        let mut done = true;
        for tp in &partitions {
            done &= consumer.position(tp)? >= end[tp];
        }
        if done {
            break;
        }
        for r in &consumer.poll(Duration::from_millis(500))? {
            records += 1;
            bytes +=
                r.value().map_or(0, |v| v.len()) as u64 + r.key().map_or(0, |k| k.len()) as u64;
            if let Some(n) = counts.get_mut(r.partition() as usize) {
                *n += 1;
            }
            if printed < print {
                printed += 1;
                let headers: Vec<String> = r
                    .headers()
                    .map(|h| {
                        format!(
                            "{}={}",
                            h.key_str(),
                            h.value()
                                .map_or("null".into(), |v| String::from_utf8_lossy(v).into_owned())
                        )
                    })
                    .collect();
                println!(
                    "{}-{}@{} key={:?} value={:?} headers=[{}]",
                    r.topic(),
                    r.partition(),
                    r.offset(),
                    r.key().map(String::from_utf8_lossy),
                    r.value()
                        .map(|v| String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned()),
                    headers.join(", ")
                );
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!("records per partition: {counts:?}");
    println!(
        "consumed {records} records ({:.1} MB) from {topic} in {secs:.2} s: {:.0} records/s",
        bytes as f64 / 1e6,
        records as f64 / secs.max(1e-9)
    );
    consumer.close()?;
    Ok(())
}
