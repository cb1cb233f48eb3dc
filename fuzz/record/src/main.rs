//! Records real Fetch response bodies from a Kafka broker into `fuzz/recorded/`, for the
//! fuzz seed corpora and the stable replay tests in `src/fuzzing.rs`. See `fuzz/README.md`.
//!
//! ```text
//! cargo run --manifest-path fuzz/record/Cargo.toml -- \
//!     --bootstrap 127.0.0.1:19092 --suffix <S> [--out fuzz/recorded]
//! ```
//!
//! It expects the topics `fuzzrec-<codec>-<S>` (codec none, gzip, snappy, lz4, zstd) and
//! `fuzzrec-txn-<S>` (committed and aborted transactions), each with 3 partitions on the
//! one broker, written by `scripts/java/TestProducer.java` (the README has the commands).
//! It speaks the protocol over a plain `TcpStream` with the library's own encoders:
//! ApiVersions, Metadata for the topic ids, then Fetch at each version. Every request's
//! correlation id is `(api_key << 16) | version`, which is how the `frame` fuzz target
//! picks the decoder of a response. Each body is checked to decode before it is written.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use kafka_consumer::fuzzing::{correlation_for, fetch_body};
use kafka_consumer::testing::api::api_versions::ApiVersionsRequest;
use kafka_consumer::testing::api::fetch::{
    FetchPartition, FetchRequest, FetchResponse, FetchTopic,
};
use kafka_consumer::testing::api::metadata::MetadataRequest;
use kafka_consumer::testing::api::Api;
use kafka_consumer::testing::frame::{decode_response, encode_request};
use kafka_consumer::testing::message::Uuid;
use kafka_consumer::testing::records::BatchIter;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// The versions recorded for every codec (capped at what broker and library speak); the
/// highest common version is always added.
const VERSIONS: [i16; 8] = [4, 7, 11, 12, 13, 15, 16, 17];
/// Per-partition byte limit: one or two small batches per partition keep recordings small.
const PARTITION_MAX_BYTES: i32 = 2048;
const CLIENT_ID: &str = "kafka-consumer-fuzz-recorder";

struct Conn {
    stream: TcpStream,
}

impl Conn {
    fn call<A: Api>(&mut self, req: &A, v: i16) -> Res<Vec<u8>> {
        let corr = correlation_for(A::KEY, v);
        self.stream
            .write_all(&encode_request(req, v, corr, CLIENT_ID))?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body)?;
        let got = i32::from_be_bytes(body[..4].try_into()?);
        if got != corr {
            return Err(format!("{}: correlation id {got}, expected {corr}", A::NAME).into());
        }
        Ok(body)
    }
}

struct Topic {
    name: String,
    id: Uuid,
    partitions: Vec<i32>,
}

fn main() -> Res<()> {
    let mut bootstrap = "127.0.0.1:19092".to_owned();
    let mut suffix = None;
    let mut out = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../recorded"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().ok_or(format!("missing value for {a}"))?;
        match a.as_str() {
            "--bootstrap" => bootstrap = v,
            "--suffix" => suffix = Some(v),
            "--out" => out = PathBuf::from(v),
            _ => return Err(format!("unknown option {a}").into()),
        }
    }
    let suffix = suffix.ok_or("--suffix is required")?;
    std::fs::create_dir_all(&out)?;

    let stream = TcpStream::connect(&bootstrap)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut conn = Conn { stream };

    // ApiVersions v3: the broker's Fetch and Metadata ranges.
    let req = ApiVersionsRequest {
        client_software_name: "kafka-consumer-fuzz-recorder".into(),
        client_software_version: "0".into(),
    };
    let body = conn.call(&req, 3)?;
    let versions = decode_response::<ApiVersionsRequest>(&body, 3)?;
    let range = |key: i16| {
        versions
            .api_keys
            .iter()
            .find(|k| k.api_key == key)
            .map(|k| (k.min_version, k.max_version))
    };
    let (fmin, fmax) = range(FetchRequest::KEY).ok_or("broker offers no Fetch")?;
    let fetch_max = fmax.min(FetchRequest::MAX_VERSION);
    let (_, mmax) = range(MetadataRequest::KEY).ok_or("broker offers no Metadata")?;
    let mv = mmax.min(MetadataRequest::MAX_VERSION);
    eprintln!("broker Fetch v{fmin}..=v{fmax}, recording up to v{fetch_max}; Metadata v{mv}");

    // Metadata: topic ids and partitions.
    let names: Vec<String> = CODECS
        .iter()
        .chain(&["txn"])
        .map(|c| format!("fuzzrec-{c}-{suffix}"))
        .collect();
    let body = conn.call(&MetadataRequest::for_topics(names.clone()), mv)?;
    let md = decode_response::<MetadataRequest>(&body, mv)?;
    let mut topics = Vec::new();
    for name in &names {
        let t = md
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some(name))
            .ok_or(format!("topic {name} missing"))?;
        if t.error_code != 0 {
            return Err(format!("topic {name}: error {}", t.error_code).into());
        }
        topics.push(Topic {
            name: name.clone(),
            id: t.topic_id,
            partitions: t.partitions.iter().map(|p| p.partition_index).collect(),
        });
    }

    let mut versions: Vec<i16> = VERSIONS
        .iter()
        .copied()
        .filter(|v| (fmin..=fetch_max).contains(v))
        .collect();
    if !versions.contains(&fetch_max) {
        versions.push(fetch_max);
    }
    let mut total = 0;
    // Full fetches of every codec's topic at every version.
    for (codec, topic) in CODECS.iter().zip(&topics) {
        for &v in &versions {
            let req = fetch_request(topic, &[], 0, PARTITION_MAX_BYTES, 0, -1);
            let (body, _) = fetch(&mut conn, &req, v)?;
            total += write(&out, v, codec, &body)?;
        }
    }
    // read_committed over committed and aborted transactions.
    let txn = &topics[CODECS.len()];
    for &v in &[4, 12, 13, fetch_max] {
        let req = fetch_request(txn, &[], 1, 1 << 20, 0, -1);
        let (body, resp) = fetch(&mut conn, &req, v)?;
        let aborted: usize = resp
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| p.aborted_transactions.as_ref().map(Vec::len))
            .sum();
        if aborted == 0 {
            return Err(format!("v{v}: no aborted transactions listed").into());
        }
        total += write(&out, v, "txn-read-committed", &body)?;
    }
    // An incremental fetch session: a full fetch that opens the session (epoch 0), then
    // the next fetch in it (epoch 1) from where the first one stopped.
    for (codec, v) in [("lz4", 7), ("zstd", 12), ("gzip", 13), ("none", fetch_max)] {
        let topic = &topics[CODECS.iter().position(|c| *c == codec).unwrap()];
        let req = fetch_request(topic, &[], 0, PARTITION_MAX_BYTES, 0, 0);
        let (first_body, first) = fetch(&mut conn, &req, v)?;
        if first.session_id == 0 {
            return Err(format!("v{v}: the broker opened no fetch session").into());
        }
        let mut next = Vec::new();
        for p in first.responses.iter().flat_map(|t| &t.partitions) {
            let set = &first_body[p.records.start..][..p.records.len];
            let offset = BatchIter::new(set, true)
                .filter_map(Result::ok)
                .map(|b| b.header.next_offset())
                .last()
                .unwrap_or(0);
            next.push((p.partition_index, offset));
        }
        let req = fetch_request(topic, &next, 0, PARTITION_MAX_BYTES, first.session_id, 1);
        let (body, resp) = fetch(&mut conn, &req, v)?;
        if resp.session_id != first.session_id {
            return Err(format!("v{v}: the incremental fetch left the session").into());
        }
        total += write(&out, v, &format!("incremental-{codec}"), &body)?;
    }
    eprintln!("wrote {total} bytes to {}", out.display());
    Ok(())
}

/// A Fetch of every partition of `topic`, from the offsets in `from` (0 for the others).
fn fetch_request(
    topic: &Topic,
    from: &[(i32, i64)],
    isolation_level: i8,
    partition_max_bytes: i32,
    session_id: i32,
    session_epoch: i32,
) -> FetchRequest {
    let partitions = topic
        .partitions
        .iter()
        .map(|&p| FetchPartition {
            partition: p,
            fetch_offset: from.iter().find(|f| f.0 == p).map_or(0, |f| f.1),
            partition_max_bytes,
            ..Default::default()
        })
        .collect();
    FetchRequest {
        replica_id: -1,
        max_wait_ms: 200,
        min_bytes: 1,
        max_bytes: 1 << 20,
        isolation_level,
        session_id,
        session_epoch,
        topics: vec![FetchTopic {
            topic: topic.name.clone(),
            topic_id: topic.id,
            partitions,
        }],
        ..Default::default()
    }
}

/// Sends a Fetch and checks that its answer decodes, records included, without error.
fn fetch(conn: &mut Conn, req: &FetchRequest, v: i16) -> Res<(Vec<u8>, FetchResponse)> {
    let body = conn.call(req, v)?;
    let d = fetch_body(&body, v, true).map_err(|e| format!("Fetch v{v}: {e}"))?;
    if d.response.error_code != 0 {
        return Err(format!("Fetch v{v}: error {}", d.response.error_code).into());
    }
    for p in d.response.responses.iter().flat_map(|t| &t.partitions) {
        if p.error_code != 0 {
            return Err(format!("Fetch v{v}: partition error {}", p.error_code).into());
        }
    }
    if d.records.errors != 0 || d.records.records == 0 {
        return Err(format!("Fetch v{v}: records {:?}", d.records).into());
    }
    Ok((body, d.response))
}

fn write(out: &std::path::Path, v: i16, what: &str, body: &[u8]) -> Res<usize> {
    let path = out.join(format!("fetch-v{v}-{what}.bin"));
    std::fs::write(&path, body)?;
    eprintln!("{}: {} bytes", path.display(), body.len());
    Ok(body.len())
}
