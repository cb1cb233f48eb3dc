//! Throughput benchmark contender "ours" (see `benches/README.md`, run by `scripts/bench.sh`):
//! reads a whole topic from the beginning and prints one JSON line.
//!
//! ```text
//! cargo build --release --example perf_consume
//! target/release/examples/perf_consume BOOTSTRAP TOPIC EXPECTED_RECORDS [--no-crc] [--tls-info]
//!     [--subscribe classic|consumer [--group ID]] [--set KEY=VALUE]...
//! ```
//!
//! Assigns every partition of TOPIC (`partitions_for`), seeks to the beginning and polls
//! until EXPECTED_RECORDS records have arrived, then prints
//! `{"records":N,"bytes":B,"elapsed_s":S}` on stdout: B is the sum of the value lengths,
//! S runs from just before the first `poll` to the poll that returned the last record
//! (`"first_record_s"`: from the same start to the poll that returned the first one).
//!
//! `--subscribe classic|consumer` reads through the group path instead: `subscribe` to
//! TOPIC as the only member of a fresh group (`--group ID`, default one named after the
//! process id and the time) with that `group.protocol`, `auto.offset.reset=earliest` (the
//! fresh group has no commits) and `enable.auto.commit=false`; same fetch settings. S
//! still starts just before the first `poll`, so it includes joining the group; the JSON
//! line adds `"join_s"` (from that start to `on_partitions_assigned`) and `"group"`.
//! Fetch settings are the Java client's defaults, spelled out so that every contender of
//! the benchmark uses the same ones. `--no-crc` sets `check.crcs=false`; `--set KEY=VALUE`
//! sets any other consumer property (for experiments, e.g. `--set fetch.buffer.bytes=33554432`).
//!
//! `--tls-info` adds `"tls":"PROVIDER; VERSION, SUITE"` to the JSON line (or `"tls":""` over
//! plain TCP): the crypto provider this build chose and what the first TLS connection
//! negotiated, taken from the crate's debug log messages by a minimal logger that passes
//! nothing else on. The benchmark's `--tls` mode uses it to record which provider ran.
//! (The example build itself gets the dev-dependency's features, `tls-graviola` among them;
//! `benches/ours-tls/` builds this file with exactly one provider.)
//!
//! Exits 1 (after printing the JSON line with what it got) if no record arrives for 60 s.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_consumer::{Consumer, ConsumerConfig, RebalanceListener, TopicPartition};

fn main() {
    if let Err(e) = run() {
        eprintln!("perf_consume: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let no_crc = args.iter().any(|a| a == "--no-crc");
    let tls_info = args.iter().any(|a| a == "--tls-info");
    if tls_info {
        TlsInfo::install();
    }
    let mut sets = Vec::new();
    let mut positional = Vec::new();
    let mut subscribe: Option<String> = None;
    let mut group: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--set" {
            let kv = it.next().ok_or("--set needs KEY=VALUE")?;
            let (k, v) = kv.split_once('=').ok_or("--set needs KEY=VALUE")?;
            sets.push((k.to_owned(), v.to_owned()));
        } else if a == "--subscribe" {
            let p = it.next().ok_or("--subscribe needs classic or consumer")?;
            if p != "classic" && p != "consumer" {
                return Err(format!("--subscribe {p}: classic or consumer").into());
            }
            subscribe = Some(p.clone());
        } else if a == "--group" {
            group = Some(it.next().ok_or("--group needs an id")?.clone());
        } else if !a.starts_with("--") {
            positional.push(a);
        }
    }
    if positional.len() != 3 {
        return Err(
            "usage: perf_consume BOOTSTRAP TOPIC EXPECTED_RECORDS [--no-crc] [--tls-info] \
             [--subscribe classic|consumer [--group ID]] [--set KEY=VALUE]..."
                .into(),
        );
    }
    let (bootstrap, topic) = (positional[0].as_str(), positional[1].as_str());
    let expected: u64 = positional[2].parse()?;

    let config = ConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "perf-consume"),
        ("auto.offset.reset", "earliest"),
        ("check.crcs", if no_crc { "false" } else { "true" }),
        ("fetch.min.bytes", "1"),
        ("fetch.max.bytes", "52428800"),
        ("max.partition.fetch.bytes", "1048576"),
        ("fetch.max.wait.ms", "500"),
    ])?;
    let mut config = config;
    if let Some(protocol) = &subscribe {
        let group = group.clone().unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("perf-consume-{}-{nanos}", std::process::id())
        });
        config = config
            .set("group.id", &group)?
            .set("group.protocol", protocol)?
            .set("enable.auto.commit", "false")?;
    }
    for (k, v) in &sets {
        config = config.set(k, v)?;
    }
    let mut consumer = Consumer::new(config)?;
    let assigned_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    if subscribe.is_some() {
        consumer.subscribe_with_listener(
            &[topic],
            JoinClock {
                at: assigned_at.clone(),
            },
        )?;
    } else {
        let partitions = consumer.partitions_for(topic)?;
        if partitions.is_empty() {
            return Err(format!("topic {topic} has no partitions").into());
        }
        consumer.assign(&partitions)?;
        consumer.seek_to_beginning(&partitions)?;
    }

    let idle_limit = Duration::from_secs(60);
    let (mut records, mut bytes) = (0u64, 0u64);
    let started = Instant::now();
    let mut last_record = started;
    let mut first_record = None;
    while records < expected {
        let batch = consumer.poll(Duration::from_millis(100))?;
        if batch.is_empty() {
            if last_record.elapsed() > idle_limit {
                break;
            }
            continue;
        }
        for r in &batch {
            records += 1;
            bytes += r.value().map_or(0, |v| v.len()) as u64;
        }
        last_record = Instant::now();
        first_record.get_or_insert(last_record);
    }
    // On success this is the poll that returned the last record.
    let elapsed = last_record.duration_since(started).as_secs_f64();
    let tls = if tls_info {
        format!(
            ",\"tls\":\"{}\"",
            TlsInfo::summary().replace(['"', '\\'], "'")
        )
    } else {
        String::new()
    };
    let group = match (&subscribe, consumer.group_metadata()) {
        (Some(_), Some(g)) => {
            let join = assigned_at
                .lock()
                .unwrap()
                .map_or(-1.0, |at| at.duration_since(started).as_secs_f64());
            format!(",\"join_s\":{join:.6},\"group\":\"{}\"", g.group_id)
        }
        _ => String::new(),
    };
    let first = first_record.map_or(-1.0, |t| t.duration_since(started).as_secs_f64());
    println!(
        "{{\"records\":{records},\"bytes\":{bytes},\"elapsed_s\":{elapsed:.6},\
         \"first_record_s\":{first:.6}{group}{tls}}}"
    );
    consumer.close()?;
    if records < expected {
        return Err(format!(
            "got {records} of {expected} records from {topic}: none for {}s",
            idle_limit.as_secs()
        )
        .into());
    }
    Ok(())
}

/// `--subscribe`: notes when the group first gave this member partitions.
struct JoinClock {
    at: Arc<Mutex<Option<Instant>>>,
}

impl RebalanceListener for JoinClock {
    fn on_partitions_assigned(&mut self, _: &mut Consumer, partitions: &[TopicPartition]) {
        if !partitions.is_empty() {
            self.at.lock().unwrap().get_or_insert_with(Instant::now);
        }
    }
}

/// `--tls-info`: keeps the crate's debug messages that name the TLS crypto provider and the
/// first negotiated session (module `kafka_consumer::io::tls`), drops everything else.
struct TlsInfo {
    provider: Mutex<Option<String>>,
    session: Mutex<Option<String>>,
}

static TLS_INFO: TlsInfo = TlsInfo {
    provider: Mutex::new(None),
    session: Mutex::new(None),
};

impl TlsInfo {
    fn install() {
        if log::set_logger(&TLS_INFO).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
    }

    /// `"PROVIDER; VERSION, SUITE"`, or `""` if no TLS connection was made.
    fn summary() -> String {
        let provider = TLS_INFO.provider.lock().unwrap().clone();
        let session = TLS_INFO.session.lock().unwrap().clone();
        match (provider, session) {
            (None, None) => String::new(),
            (p, s) => format!(
                "{}; {}",
                p.as_deref().unwrap_or("?"),
                s.as_deref().unwrap_or("?")
            ),
        }
    }
}

impl log::Log for TlsInfo {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Debug && m.target().starts_with("kafka_consumer::io::tls")
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = r.args().to_string();
        // "TLS: crypto provider NAME" and "TLS with HOST: Some(VERSION), Some(SUITE)".
        if let Some(name) = msg.strip_prefix("TLS: crypto provider ") {
            self.provider
                .lock()
                .unwrap()
                .get_or_insert_with(|| name.to_owned());
        } else if let Some(rest) = msg.strip_prefix("TLS with ") {
            if let Some((_, session)) = rest.split_once(": ") {
                let session = session.replace("Some(", "").replace(')', "");
                self.session.lock().unwrap().get_or_insert(session);
            }
        }
    }

    fn flush(&self) {}
}
