//! Faults a real broker will not produce on demand, provoked with a small fake broker on
//! 127.0.0.1: hostile lengths, malformed responses, corrupt record batches, a connection
//! that dies mid-response. The consumer must report a clear error, never panic or
//! allocate from a length field, and recover when the broker behaves again.
//!
//! The real-broker behaviour is covered by `tests/consume.rs`; this file only adds faults.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_consumer::testing::api::api_versions::{
    ApiVersion, ApiVersionsRequest, ApiVersionsResponse,
};
use kafka_consumer::testing::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_consumer::testing::api::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
};
use kafka_consumer::testing::frame::encode_response;
use kafka_consumer::testing::records::testing::{encode_batch, BatchSpec, RecordSpec};
use kafka_consumer::testing::wire::Writer;
use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind, OffsetReset, TopicPartition};

/// One request as the fake broker saw it.
struct Req {
    key: i16,
    version: i16,
    corr: i32,
    /// The fake broker's own port (for Metadata answers).
    port: u16,
}

/// What the fake broker does with a request.
enum Reply {
    Send(Vec<u8>),
    /// Write these bytes, then drop the connection.
    SendAndClose(Vec<u8>),
    /// Never answer (the connection stays open).
    Hang,
    Close,
}

type Handler = dyn Fn(&Req) -> Reply + Send + Sync;

/// A fake broker: answers ApiVersions itself and everything else through `handler`.
fn fake_broker(handler: Arc<Handler>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let conns = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            conns.fetch_add(1, Ordering::SeqCst);
            let handler = Arc::clone(&handler);
            std::thread::spawn(move || serve(stream, port, &*handler));
        }
    });
    port
}

fn serve(mut s: TcpStream, port: u16, handler: &Handler) {
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        let key = i16::from_be_bytes([body[0], body[1]]);
        let version = i16::from_be_bytes([body[2], body[3]]);
        let corr = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
        let reply = if key == 18 {
            Reply::Send(api_versions(version, corr))
        } else {
            handler(&Req {
                key,
                version,
                corr,
                port,
            })
        };
        match reply {
            Reply::Send(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::SendAndClose(bytes) => {
                let _ = s.write_all(&bytes);
                return;
            }
            Reply::Close => return,
            Reply::Hang => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

fn api_versions(version: i16, corr: i32) -> Vec<u8> {
    let range = |api_key, min_version, max_version| ApiVersion {
        api_key,
        min_version,
        max_version,
    };
    let resp = ApiVersionsResponse {
        error_code: 0,
        // Deliberately old, non-flexible versions: Fetch v7 (sessions, names), Metadata v8.
        api_keys: vec![
            range(18, 0, 3),
            range(3, 1, 8),
            range(2, 1, 5),
            range(1, 4, 7),
        ],
        throttle_time_ms: 0,
    };
    encode_response::<ApiVersionsRequest>(&resp, version, corr)
}

fn metadata(r: &Req) -> Vec<u8> {
    let (version, corr, port) = (r.version, r.corr, r.port);
    let resp = MetadataResponse {
        brokers: vec![MetadataResponseBroker {
            node_id: 0,
            host: "127.0.0.1".into(),
            port: port as i32,
            rack: None,
        }],
        controller_id: 0,
        topics: vec![MetadataResponseTopic {
            name: Some("t".into()),
            partitions: vec![MetadataResponsePartition {
                partition_index: 0,
                leader_id: 0,
                leader_epoch: 0,
                replica_nodes: vec![0],
                isr_nodes: vec![0],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    encode_response::<MetadataRequest>(&resp, version, corr)
}

fn list_offsets(r: &Req, offset: i64) -> Vec<u8> {
    let (version, corr) = (r.version, r.corr);
    let resp = ListOffsetsResponse {
        throttle_time_ms: 0,
        topics: vec![ListOffsetsTopicResponse {
            name: "t".into(),
            partitions: vec![ListOffsetsPartitionResponse {
                partition_index: 0,
                error_code: 0,
                timestamp: -1,
                offset,
                leader_epoch: 0,
            }],
        }],
    };
    encode_response::<ListOffsetsRequest>(&resp, version, corr)
}

/// A Fetch v7 response for partition t-0 carrying `records` (hand-encoded: the crate's
/// own encoder never writes record sets).
fn fetch_v7(corr: i32, records: &[u8]) -> Vec<u8> {
    fetch_v7_error(corr, 0, records)
}

fn fetch_v7_error(corr: i32, error: i16, records: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    let at = w.reserve_i32();
    w.i32(corr);
    w.i32(0); // throttle
    w.i16(0); // error
    w.i32(0); // session id: none
    w.i32(1); // topics
    w.string("t", false);
    w.i32(1); // partitions
    w.i32(0); // partition
    w.i16(error);
    w.i64(1_000); // high watermark
    w.i64(1_000); // last stable offset
    w.i64(0); // log start offset
    w.i32(-1); // aborted transactions: null
    w.nullable_bytes(Some(records), false);
    let len = (w.len() - 4) as i32;
    w.patch_i32(at, len);
    w.into_inner()
}

fn batch(base: i64, n: i32) -> Vec<u8> {
    let values: Vec<String> = (0..n).map(|i| format!("v{}", base + i as i64)).collect();
    let recs: Vec<RecordSpec<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i32, 0, None, Some(v.as_bytes()), &[][..]))
        .collect();
    encode_batch(&BatchSpec {
        base_offset: base,
        records: &recs,
        ..BatchSpec::default()
    })
}

fn consumer(port: u16) -> Consumer {
    let cfg = ConsumerConfig::new(&format!("127.0.0.1:{port}"))
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(5))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .retry_backoff(Duration::from_millis(50));
    Consumer::new(cfg).expect("consumer")
}

#[test]
fn a_malformed_metadata_response_is_a_protocol_error_not_a_panic() {
    let port = fake_broker(Arc::new(|r: &Req| match r.key {
        3 => {
            // A topics array that claims two billion entries in a 20-byte frame.
            let mut w = Writer::new();
            w.i32(16);
            w.i32(r.corr);
            w.i32(0); // brokers: empty
            w.i32(i32::MAX); // topics: hostile count
            w.i32(0);
            Reply::Send(w.into_inner())
        }
        _ => Reply::Close,
    }));
    let mut c = consumer(port);
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("Metadata"), "{e}");
    // The consumer is still alive and answers again.
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol);
}

#[test]
fn a_frame_claiming_two_gigabytes_closes_the_connection_without_allocating_it() {
    let port = fake_broker(Arc::new(|r: &Req| match r.key {
        3 => Reply::Send(vec![0x7f, 0xff, 0xff, 0xf0, 0, 0, 0, 1]),
        _ => Reply::Close,
    }));
    let mut c = consumer(port);
    let e = c.partitions_for("t").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
}

#[test]
fn a_corrupt_batch_is_an_error_naming_the_partition_after_the_good_records() {
    let port = fake_broker(Arc::new(|r: &Req| match r.key {
        3 => Reply::Send(metadata(r)),
        2 => Reply::Send(list_offsets(r, 0)),
        1 => {
            let mut set = batch(0, 3);
            let mut bad = batch(3, 3);
            let n = bad.len();
            bad[n - 1] ^= 0x55;
            set.extend(bad);
            Reply::Send(fetch_v7(r.corr, &set))
        }
        _ => Reply::Close,
    }));
    let mut c = consumer(port);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match c.poll(Duration::from_secs(5)) {
            Ok(recs) => {
                assert!(!recs.is_empty(), "timed out before the error");
                got.extend(recs.iter().map(|r| r.offset()));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        got,
        vec![0, 1, 2],
        "records before the corrupt batch arrive first"
    );
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.partition(), Some(&tp));
    assert!(err.to_string().contains("t-0"), "{err}");
    // The position stays at the corrupt batch, as in the Java client.
    assert_eq!(c.position(&tp).unwrap(), 3);
}

#[test]
fn a_connection_that_dies_mid_response_is_reconnected_and_nothing_is_lost() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let f2 = Arc::clone(&fetches);
    let port = fake_broker(Arc::new(move |r: &Req| match r.key {
        3 => Reply::Send(metadata(r)),
        2 => Reply::Send(list_offsets(r, 0)),
        1 => {
            let full = fetch_v7(r.corr, &batch(0, 5));
            if f2.fetch_add(1, Ordering::SeqCst) == 0 {
                // The first fetch: half a response, then the connection drops.
                Reply::SendAndClose(full[..full.len() / 2].to_vec())
            } else {
                Reply::Send(full)
            }
        }
        _ => Reply::Close,
    }));
    let mut c = consumer(port);
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        let recs = c.poll(Duration::from_secs(10)).expect("poll");
        assert!(!recs.is_empty(), "no records after the reconnect");
        got.extend(
            recs.iter()
                .map(|r| (r.offset(), r.value().map(<[u8]>::to_vec))),
        );
    }
    let want: Vec<(i64, Option<Vec<u8>>)> = (0..5)
        .map(|i| (i, Some(format!("v{i}").into_bytes())))
        .collect();
    assert_eq!(got, want);
    assert!(
        fetches.load(Ordering::SeqCst) >= 2,
        "the first fetch failed and was retried"
    );
}

#[test]
fn not_leader_refreshes_metadata_and_the_fetch_is_retried() {
    let metadata_calls = Arc::new(AtomicUsize::new(0));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (m2, f2) = (Arc::clone(&metadata_calls), Arc::clone(&fetches));
    let port = fake_broker(Arc::new(move |r: &Req| match r.key {
        3 => {
            m2.fetch_add(1, Ordering::SeqCst);
            Reply::Send(metadata(r))
        }
        2 => Reply::Send(list_offsets(r, 0)),
        1 => {
            if f2.fetch_add(1, Ordering::SeqCst) == 0 {
                // NOT_LEADER_OR_FOLLOWER
                Reply::Send(fetch_v7_error(r.corr, 6, &[]))
            } else {
                Reply::Send(fetch_v7(r.corr, &batch(0, 3)))
            }
        }
        _ => Reply::Close,
    }));
    let mut c = consumer(port);
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let recs = c.poll(Duration::from_secs(10)).unwrap();
    let offsets: Vec<i64> = recs.iter().map(|r| r.offset()).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert!(
        metadata_calls.load(Ordering::SeqCst) >= 2,
        "metadata was refreshed after the error"
    );
}

#[test]
fn a_fetch_without_an_answer_times_out_and_is_retried_on_a_new_connection() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let f2 = Arc::clone(&fetches);
    let port = fake_broker(Arc::new(move |r: &Req| match r.key {
        3 => Reply::Send(metadata(r)),
        2 => Reply::Send(list_offsets(r, 0)),
        1 if f2.fetch_add(1, Ordering::SeqCst) == 0 => Reply::Hang,
        1 => Reply::Send(fetch_v7(r.corr, &batch(0, 2))),
        _ => Reply::Close,
    }));
    let cfg = ConsumerConfig::new(&format!("127.0.0.1:{port}"))
        .auto_offset_reset(OffsetReset::Earliest)
        .request_timeout(Duration::from_millis(800))
        .fetch_max_wait(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    let mut c = Consumer::new(cfg).unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let recs = c.poll(Duration::from_secs(10)).unwrap();
    assert_eq!(
        recs.len(),
        2,
        "records arrive after the timed-out fetch is retried"
    );
    assert!(fetches.load(Ordering::SeqCst) >= 2);
}
