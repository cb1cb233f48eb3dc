//! A fake broker on 127.0.0.1 for faults a real broker will not produce on demand: it
//! answers ApiVersions itself and every other request through a handler the test gives.
#![allow(dead_code)]

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
use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset};

/// One request as the fake broker saw it.
pub struct Req {
    pub key: i16,
    pub version: i16,
    pub corr: i32,
    /// The fake broker's own port (for Metadata answers).
    pub port: u16,
}

/// What the fake broker does with a request.
pub enum Reply {
    Send(Vec<u8>),
    /// Write these bytes, then drop the connection.
    SendAndClose(Vec<u8>),
    /// Never answer (the connection stays open).
    Hang,
    Close,
}

pub type Handler = dyn Fn(&Req) -> Reply + Send + Sync;

/// A fake broker: answers ApiVersions itself and everything else through `handler`.
pub fn fake_broker(handler: Arc<Handler>) -> u16 {
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

pub fn serve(mut s: TcpStream, port: u16, handler: &Handler) {
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

pub fn api_versions(version: i16, corr: i32) -> Vec<u8> {
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

pub fn metadata(r: &Req) -> Vec<u8> {
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

pub fn list_offsets(r: &Req, offset: i64) -> Vec<u8> {
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
pub fn fetch_v7(corr: i32, records: &[u8]) -> Vec<u8> {
    fetch_v7_error(corr, 0, records)
}

pub fn fetch_v7_error(corr: i32, error: i16, records: &[u8]) -> Vec<u8> {
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

pub fn batch(base: i64, n: i32) -> Vec<u8> {
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

pub fn consumer(port: u16) -> Consumer {
    let cfg = ConsumerConfig::new(&format!("127.0.0.1:{port}"))
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(5))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .retry_backoff(Duration::from_millis(50));
    Consumer::new(cfg).expect("consumer")
}
