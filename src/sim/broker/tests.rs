//! Tests of the simulated broker itself: its hand-encoded Fetch answers decode at every
//! version, and it keeps fetch sessions as Kafka does.

use std::time::Duration;

use super::*;
use crate::link::{Owner, Tag};
use crate::protocol::api::fetch::{FetchPartition, FetchTopic};
use crate::protocol::frame::decode_response;
use crate::sim::fetch_route;
use crate::types::{ApiVersion, RequestId};

fn fetch_transmit(v: i16, broker: &SimBroker, session_epoch: i32) -> Transmit {
    let topic = "t";
    let req = FetchRequest {
        max_wait_ms: 500,
        min_bytes: 1,
        max_bytes: 1 << 20,
        session_epoch,
        topics: vec![FetchTopic {
            topic: topic.into(),
            topic_id: broker.topic_id(topic),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 3,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    Transmit::new(
        fetch_route(1),
        &req,
        ApiVersion(v),
        Tag {
            owner: Owner::Fetcher,
            id: RequestId(1),
        },
        Duration::from_secs(1),
    )
}

#[test]
fn the_hand_encoded_fetch_answer_decodes_at_every_version() {
    let mut b = SimBroker::new(&[1]).topic("t", &[1], 8);
    for v in FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION {
        let t = fetch_transmit(v, &b, -1);
        let mut a = b.fetch(&t);
        a.throttle_time_ms = 7;
        a.part(&tp("t", 0)).preferred_read_replica = if v >= 11 { 2 } else { -1 };
        let body = encode_fetch(v, &a);
        let resp =
            decode_response::<FetchRequest>(&body, v).unwrap_or_else(|e| panic!("v{v}: {e:?}"));
        assert_eq!(resp.throttle_time_ms, 7, "v{v}");
        assert_eq!(resp.responses.len(), 1);
        let p = &resp.responses[0].partitions[0];
        assert_eq!((p.partition_index, p.high_watermark), (0, 8), "v{v}");
        if v >= 11 {
            assert_eq!(p.preferred_read_replica, 2);
        }
        let records = &body[p.records.start..p.records.start + p.records.len];
        assert_eq!(records, &batch_with(3, 5, 0, 5)[..], "v{v}");
    }
}

#[test]
fn the_simulated_broker_keeps_fetch_sessions() {
    let mut b = SimBroker::new(&[1]).topic("t", &[1], 8);
    b.sessions = true;
    let first = b.fetch(&fetch_transmit(12, &b, 0));
    assert!(first.session_id > 0);
    let mut t = fetch_transmit(12, &b, 1);
    let mut req = request::<FetchRequest>(&t);
    req.session_id = first.session_id;
    req.topics.clear();
    t = Transmit::new(t.route, &req, ApiVersion(12), t.tag, t.timeout);
    let next = b.fetch(&t);
    assert_eq!(next.error_code, 0);
    assert_eq!(next.parts.len(), 1, "the session covers t-0");
    let again = b.fetch(&t);
    assert_eq!(
        again.error_code,
        ErrorCode::INVALID_FETCH_SESSION_EPOCH.code(),
        "epoch 1 twice"
    );
}
