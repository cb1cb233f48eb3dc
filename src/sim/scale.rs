//! Rigs that drive the sans-IO paths of one consumer over a very large assignment (the
//! 100,000 partitions a real test broker here cannot hold) against the simulated brokers,
//! for `tests/scale_sim.rs`, which times each step with a real clock (nothing here reads
//! one) and checks what it did. Each rig sets its stage up in `new`, untimed: brokers 1 to
//! 3 leading the partitions of topic `t` in turn, a cluster that knows them, links that are
//! ready. Each step is one method that does what the I/O loop does for it (hand answers
//! to a component and drain what it says, or poll the requests it builds); the simulated
//! brokers' own work (building answers) happens in separate, untimed methods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::buffer::{Budget, FrameBuf};
use crate::cluster::{Cluster, Interest, Leader};
use crate::fetch::fetcher::{FetchEvent, Fetcher, SeekTo};
use crate::group::commit::{CommitConfig, CommitEvent, Commits, Committed};
use crate::group::coordinator::Coordinator;
use crate::group::kip848::{Kip848Config, Kip848Member};
use crate::group::member::{CallbackKind, Member, MemberEvent, Subscription};
use crate::link::{Transmit, Versions};
use crate::protocol::api::consumer_group_heartbeat::{
    Assignment, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use crate::protocol::api::fetch::FetchRequest;
use crate::protocol::api::list_offsets::ListOffsetsRequest;
use crate::protocol::api::offset_commit::OffsetCommitRequest;
use crate::protocol::api::Api;
use crate::protocol::message::Uuid;
use crate::types::{CallId, LeaderEpoch, NodeId, OffsetReset, PositionEpoch, TopicPartition};

use super::{
    bootstrap_route, budget, cluster_config, encode_fetch, fetch_config, jitter, known_cluster,
    request, response, retry_backoff, Net, SimBroker,
};

/// The API versions the simulated brokers advertise (as `sim::all_versions`).
const ALL_VERSIONS: [(i16, i16, i16); 12] = [
    (1, 4, 18),
    (2, 1, 11),
    (3, 1, 13),
    (8, 2, 9),
    (9, 1, 9),
    (10, 0, 6),
    (11, 0, 9),
    (12, 0, 4),
    (13, 0, 5),
    (14, 0, 5),
    (18, 0, 4),
    (23, 2, 4),
];

/// The topic every rig's partitions belong to.
const TOPIC: &str = "t";

/// Brokers 1 to 3 and topic `t` of `partitions` partitions led in turn, with `log_end`
/// records each.
fn brokers(partitions: i32, log_end: i64) -> SimBroker {
    let leaders: Vec<i32> = (0..partitions).map(|p| 1 + p % 3).collect();
    let mut b = SimBroker::new(&[1, 2, 3]).topic(TOPIC, &leaders, log_end);
    b.coordinator = 2;
    b
}

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, partition)
}

// ----- metadata ------------------------------------------------------------------------------

/// A Metadata answer for every partition, parsed and applied by the cluster.
pub struct MetadataPath {
    net: Net,
    cluster: Cluster,
    request: Transmit,
    answer: Vec<u8>,
    partitions: i32,
}

impl MetadataPath {
    /// A cluster interested in topic `t` of `partitions` partitions, its first Metadata
    /// request out, and the brokers' answer to it.
    pub fn new(partitions: i32) -> MetadataPath {
        let mut net = Net::new();
        let mut cluster = Cluster::new(cluster_config());
        cluster.set_interest(Interest::Assignment, [Arc::from(TOPIC)]);
        net.ready(bootstrap_route(0));
        let now = net.now();
        let request = cluster
            .poll_transmit(now, &mut net.links)
            .expect("a first refresh is due");
        let answer = brokers(partitions, 0).answer(&request);
        MetadataPath {
            net,
            cluster,
            request,
            answer,
            partitions,
        }
    }

    /// The answer's size in bytes.
    pub fn answer_bytes(&self) -> usize {
        self.answer.len()
    }

    /// Hands the answer to the cluster: decoded and applied.
    pub fn apply(&mut self) {
        let now = self.net.now();
        let t = &self.request;
        self.cluster
            .handle_response(t.tag.id, t.version, &self.answer, now, &mut self.net.links);
    }

    /// How many partitions the cluster knows the leader of (panics on one it knows wrong).
    pub fn leaders_known(&self) -> usize {
        let mut known = 0;
        for p in 0..self.partitions {
            match self.cluster.leader(&tp(p)) {
                Leader::Known(n, e) => {
                    assert_eq!((n, e), (NodeId(1 + p % 3), LeaderEpoch(5)), "t-{p}");
                    known += 1;
                }
                other => panic!("t-{p}: {other:?}"),
            }
        }
        known
    }
}

// ----- fetching and position lookups ---------------------------------------------------------

/// Where a [`FetchPath`]'s partitions start.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// At offset 0: fetched at once.
    Offset0,
    /// At the log start: found with ListOffsets first.
    Beginning,
}

/// The fetcher over every partition, with the brokers answering it (fetch sessions on).
pub struct FetchPath {
    net: Net,
    cluster: Cluster,
    broker: SimBroker,
    fetcher: Fetcher,
    budget: Arc<Budget>,
    partitions: i32,
    /// Requests handed out and not answered yet; answers built and not delivered yet.
    requests: Vec<Transmit>,
    answers: Vec<(Transmit, Vec<u8>)>,
    /// Each partition's position as the fetcher's events told it.
    positions: BTreeMap<TopicPartition, i64>,
}

/// What a round of requests carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// How many requests.
    pub count: usize,
    /// The partitions they name (in a Fetch: those sent; in a ListOffsets: those asked).
    pub partitions: usize,
    /// The partitions Fetch requests name as forgotten.
    pub forgotten: usize,
    /// Of the Fetch requests, how many were full (session epoch 0 or none).
    pub full: usize,
}

impl FetchPath {
    /// Every partition of `t` assigned, starting at `start`; the logs hold `log_end`
    /// records each; the links are ready.
    pub fn new(partitions: i32, log_end: i64, start: Start) -> FetchPath {
        let mut net = Net::new();
        let mut broker = brokers(partitions, log_end);
        broker.sessions = true;
        broker.max_records = 1;
        let cluster = known_cluster(&mut net, &broker, &[TOPIC]);
        for n in 1..=3 {
            net.ready(super::fetch_route(n));
            net.ready(super::control_route(n));
        }
        let (budget, _) = budget(1 << 30);
        let fetcher = Fetcher::new(
            fetch_config(OffsetReset::Earliest),
            Arc::clone(&budget),
            jitter(5),
        );
        let mut path = FetchPath {
            net,
            cluster,
            broker,
            fetcher,
            budget,
            partitions,
            requests: Vec::new(),
            answers: Vec::new(),
            positions: BTreeMap::new(),
        };
        let to = match start {
            Start::Offset0 => SeekTo::Offset(0),
            Start::Beginning => SeekTo::Beginning,
        };
        let list = (0..partitions)
            .map(|p| (tp(p), PositionEpoch(1), to))
            .collect();
        path.fetcher.assign(list, &mut path.cluster);
        path
    }

    /// One round of the I/O loop for the fetcher: the requests it hands out (kept for the
    /// brokers), and what they carry.
    pub fn round(&mut self) -> Requests {
        let now = self.net.now();
        self.net.links.begin_round();
        let mut out = Requests::default();
        while let Some(t) = self
            .fetcher
            .poll_transmit(now, &mut self.net.links, &mut self.cluster)
        {
            self.net.sent(&t);
            out.count += 1;
            if t.api_key == FetchRequest::KEY {
                let (req, asked) = self.broker.fetch_request(&t);
                out.partitions += asked.len();
                out.forgotten += self.broker.forgotten(&t, &req).len();
                out.full += usize::from(req.session_epoch <= 0);
            } else {
                let req = request::<ListOffsetsRequest>(&t);
                out.partitions += req.topics.iter().map(|t| t.partitions.len()).sum::<usize>();
            }
            self.requests.push(t);
        }
        out
    }

    /// The brokers build their answers to the requests out (untimed). Fetch answers list,
    /// as a broker's incremental ones do, only the partitions with news (records, an
    /// error, a new high watermark), or every partition of a full request.
    pub fn brokers_answer(&mut self) {
        for t in std::mem::take(&mut self.requests) {
            let body = if t.api_key == FetchRequest::KEY {
                let full = request::<FetchRequest>(&t).session_epoch <= 0;
                let mut a = self.broker.fetch(&t);
                if !full {
                    a.parts.retain(|p| {
                        p.error_code != 0 || !p.records.is_empty() || p.high_watermark > 0
                    });
                }
                encode_fetch(t.version.get(), &a)
            } else {
                self.broker.answer(&t)
            };
            self.answers.push((t, body));
        }
    }

    /// Hands the answers built to the fetcher and drains its events; returns how many
    /// partitions got a new position (records, or a position found).
    pub fn deliver(&mut self) -> usize {
        let now = self.net.now();
        for (t, body) in std::mem::take(&mut self.answers) {
            self.net.answered(t.route);
            self.fetcher.handle_response(
                t.tag.id,
                t.version,
                FrameBuf::from_vec(body),
                now,
                &mut self.net.links,
                &mut self.cluster,
            );
        }
        let mut moved = 0;
        while let Some(e) = self.fetcher.poll_event() {
            match e {
                FetchEvent::Chunk(c) => {
                    moved += 1;
                    self.positions.insert(c.tp.clone(), c.next_offset);
                }
                FetchEvent::End { .. } => {}
                FetchEvent::Error(e, _) => panic!("fetch error: {e}"),
                FetchEvent::Truncated { tp, .. } => panic!("{tp} truncated"),
            }
        }
        moved
    }

    /// `records` more records in each of `partitions` (the brokers' logs grow).
    pub fn produce(&mut self, partitions: &[i32], records: i64) {
        for p in partitions {
            self.broker.part(&tp(*p)).log_end += records;
        }
    }

    /// Time passes (a long poll waits `fetch.max.wait.ms`).
    pub fn advance(&mut self, d: Duration) {
        self.net.clock.advance(d);
    }

    /// The position each partition's events moved it to, if any.
    pub fn position(&self, partition: i32) -> Option<i64> {
        self.positions.get(&tp(partition)).copied()
    }

    /// How many partitions have a position from the fetcher's events.
    pub fn positioned(&self) -> usize {
        self.positions.len()
    }

    /// The partitions assigned.
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// Drops the fetcher (for a caller that measures what it held).
    pub fn drop_fetcher(&mut self) {
        self.fetcher = Fetcher::new(
            fetch_config(OffsetReset::Earliest),
            Arc::clone(&self.budget),
            jitter(6),
        );
    }

    /// Drops the cluster's metadata (for a caller that measures what it held).
    pub fn drop_cluster(&mut self) {
        self.cluster = Cluster::new(cluster_config());
    }
}

// ----- commits and committed offsets ---------------------------------------------------------

/// Commits and committed-offset lookups with the group's coordinator, and a fetcher whose
/// partitions start from their committed offsets.
pub struct CommitPath {
    net: Net,
    cluster: Cluster,
    broker: SimBroker,
    coordinator: Coordinator,
    commits: Commits,
    fetcher: Fetcher,
    partitions: i32,
    request: Option<Transmit>,
    answer: Option<(Transmit, Vec<u8>)>,
    /// Positions the fetcher reported, and commits answered.
    positions: BTreeMap<TopicPartition, i64>,
    committed: Vec<(u64, bool)>,
}

impl CommitPath {
    /// Every partition of `t` assigned to a fetcher of a group, waiting for its committed
    /// offset; the group has `committed` committed for each; the coordinator is broker 2.
    pub fn new(partitions: i32, committed: i64) -> CommitPath {
        let mut net = Net::new();
        let mut broker = brokers(partitions, committed + 10);
        broker.committed = (0..partitions).map(|p| (tp(p), committed)).collect();
        let cluster = known_cluster(&mut net, &broker, &[TOPIC]);
        let mut cfg = fetch_config(OffsetReset::Earliest);
        cfg.use_committed = true;
        let (budget, _) = budget(1 << 30);
        let mut fetcher = Fetcher::new(cfg, budget, jitter(7));
        let mut cluster = cluster;
        let list = (0..partitions)
            .map(|p| (tp(p), PositionEpoch(1), SeekTo::Default))
            .collect();
        fetcher.assign(list, &mut cluster);
        CommitPath {
            net,
            cluster,
            broker,
            coordinator: Coordinator::new("g", retry_backoff(), Duration::from_secs(30), jitter(8)),
            commits: Commits::new(
                CommitConfig {
                    request_timeout: Duration::from_secs(30),
                    retry_backoff: retry_backoff(),
                    require_stable: false,
                },
                jitter(9),
            ),
            fetcher,
            partitions,
            request: None,
            answer: None,
            positions: BTreeMap::new(),
            committed: Vec::new(),
        }
    }

    /// Rounds of the loop until the commits hand out a request (the coordinator found in
    /// between); it is kept for the brokers. Returns how many partitions it names.
    fn until_request(&mut self) -> usize {
        for _ in 0..8 {
            let now = self.net.now();
            self.net.links.begin_round();
            self.coordinator.begin_round();
            if let Some(t) =
                self.commits
                    .poll_transmit(now, &mut self.net.links, &mut self.coordinator)
            {
                self.net.sent(&t);
                let n = match t.api_key {
                    OffsetCommitRequest::KEY => SimBroker::commit_request(&t).len(),
                    _ => self.broker.offset_fetch_request(&t).len(),
                };
                self.request = Some(t);
                return n;
            }
            if let Some(t) =
                self.coordinator
                    .poll_transmit(now, &mut self.net.links, &mut self.cluster)
            {
                self.net.sent(&t);
                let body = self.broker.answer(&t);
                self.net.answered(t.route);
                self.coordinator.handle_response(
                    t.tag.id,
                    t.version,
                    &body,
                    now,
                    &mut self.net.links,
                    &mut self.cluster,
                );
            }
            self.net.connect_wanted();
        }
        panic!("no request from the commits");
    }

    /// Finds the coordinator and readies its link (untimed set-up for the timed steps).
    pub fn find_coordinator(&mut self) {
        self.commits.fetch(
            CallId(0),
            vec![tp(0)],
            self.net.now() + Duration::from_secs(60),
        );
        self.until_request();
        self.brokers_answer();
        self.deliver();
    }

    /// The fetcher's partitions that wait for their committed offsets are handed to the
    /// commits, which build the OffsetFetch (kept for the brokers). Returns how many
    /// partitions it names.
    pub fn fetch_positions(&mut self) -> usize {
        let now = self.net.now();
        let wanted = self.fetcher.take_committed_wanted(now);
        self.commits.fetch_positions(wanted);
        self.until_request()
    }

    /// Commits offset `offset` of every partition (commit `id`); the OffsetCommit is built
    /// and kept for the brokers. Returns how many partitions it names.
    pub fn commit_all(&mut self, id: u64, offset: i64) -> usize {
        let offsets = (0..self.partitions)
            .map(|p| {
                (
                    tp(p),
                    Committed {
                        offset,
                        leader_epoch: LeaderEpoch(5),
                        metadata: None,
                    },
                )
            })
            .collect();
        let deadline = self.net.now() + Duration::from_secs(60);
        self.commits.commit(CallId(id), offsets, deadline);
        self.until_request()
    }

    /// The brokers build the answer to the request out (untimed).
    pub fn brokers_answer(&mut self) {
        let t = self.request.take().expect("a request out");
        let body = self.broker.answer(&t);
        self.answer = Some((t, body));
    }

    /// Hands the answer to the commits and what they say on: committed offsets to the
    /// fetcher (as the group component does), commits answered to the caller's list.
    pub fn deliver(&mut self) {
        let now = self.net.now();
        let (t, body) = self.answer.take().expect("an answer built");
        self.net.answered(t.route);
        self.commits.handle_response(
            t.tag.id,
            t.version,
            &body,
            now,
            &mut self.net.links,
            &mut self.coordinator,
        );
        while let Some(e) = self.commits.poll_event() {
            match e {
                CommitEvent::Positions { found, failed } => {
                    assert!(failed.is_empty(), "{} lookups failed", failed.len());
                    for (tp, epoch, c) in found {
                        self.fetcher.apply_committed(&tp, epoch, c);
                    }
                }
                CommitEvent::Committed { id, result } => {
                    self.committed.push((id.0, result.is_ok()));
                }
                CommitEvent::Offsets { .. } => {}
                CommitEvent::Error(e) => panic!("commits: {e}"),
            }
        }
        while let Some(e) = self.fetcher.poll_event() {
            if let FetchEvent::Chunk(c) = e {
                self.positions.insert(c.tp.clone(), c.next_offset);
            }
        }
    }

    /// How many partitions the fetcher positioned at `offset` (and none elsewhere).
    pub fn positioned_at(&self, offset: i64) -> usize {
        assert!(self.positions.values().all(|o| *o == offset));
        self.positions.len()
    }

    /// The commits answered so far: `(id, succeeded)`.
    pub fn committed(&self) -> &[(u64, bool)] {
        &self.committed
    }

    /// How many partitions the brokers hold `offset` committed for.
    pub fn stored_at(&self, offset: i64) -> usize {
        self.broker
            .committed
            .values()
            .filter(|o| **o == offset)
            .count()
    }
}

// ----- KIP-848 reconciliation ----------------------------------------------------------------

/// A KIP-848 member reconciling the assignments a heartbeat answer gives it, with the user
/// thread answering every callback at once.
pub struct Kip848Path {
    net: Net,
    cluster: Cluster,
    broker: SimBroker,
    coordinator: Coordinator,
    member: Kip848Member,
    topic_id: Uuid,
    heartbeat: Option<Transmit>,
    answer: Option<(Transmit, Vec<u8>)>,
    epoch: i32,
    /// The callbacks run so far: kind and how many partitions.
    callbacks: Vec<(CallbackKind, usize)>,
}

impl Kip848Path {
    /// A member subscribed to topic `t` of `partitions` partitions, its first heartbeat
    /// out (the coordinator found).
    pub fn new(partitions: i32) -> Kip848Path {
        let mut net = Net::new();
        let broker = brokers(partitions, 0);
        let cluster = known_cluster(&mut net, &broker, &[TOPIC]);
        let topic_id = cluster.topic_id(TOPIC);
        // The coordinator's group link, speaking ConsumerGroupHeartbeat too.
        let mut versions: Vec<(i16, i16, i16)> = ALL_VERSIONS.to_vec();
        versions.push((68, 0, 1));
        net.links.on_ready(
            super::group_route(broker.coordinator),
            Versions::new(versions),
        );
        let member = Kip848Member::new(
            Kip848Config {
                instance_id: None,
                max_poll_interval: Duration::from_secs(300),
                remote_assignor: None,
                client_rack: None,
                retry_backoff: retry_backoff(),
                request_timeout: Duration::from_secs(30),
                member_id_seed: [7; 16],
            },
            jitter(10),
        );
        let mut path = Kip848Path {
            net,
            cluster,
            broker,
            coordinator: Coordinator::new(
                "g",
                retry_backoff(),
                Duration::from_secs(30),
                jitter(11),
            ),
            member,
            topic_id,
            heartbeat: None,
            answer: None,
            epoch: 0,
            callbacks: Vec::new(),
        };
        let now = path.net.now();
        let topics: BTreeSet<String> = [TOPIC.to_owned()].into();
        path.member.subscribe(Subscription::Topics(topics), now);
        path.until_heartbeat();
        path
    }

    /// Rounds of the loop until the member sends a heartbeat (kept for the coordinator),
    /// the coordinator found in between. Returns how many partitions it reports owned.
    fn until_heartbeat(&mut self) -> usize {
        for _ in 0..8 {
            let now = self.net.now();
            self.net.links.begin_round();
            self.coordinator.begin_round();
            if let Some(t) = self.member.poll_transmit(
                now,
                &mut self.net.links,
                &mut self.coordinator,
                &mut self.cluster,
            ) {
                self.net.sent(&t);
                let req = request::<ConsumerGroupHeartbeatRequest>(&t);
                let owned = req
                    .topic_partitions
                    .iter()
                    .flatten()
                    .map(|t| t.partitions.len())
                    .sum();
                self.heartbeat = Some(t);
                return owned;
            }
            if let Some(t) =
                self.coordinator
                    .poll_transmit(now, &mut self.net.links, &mut self.cluster)
            {
                self.net.sent(&t);
                let body = self.broker.answer(&t);
                self.net.answered(t.route);
                self.coordinator.handle_response(
                    t.tag.id,
                    t.version,
                    &body,
                    now,
                    &mut self.net.links,
                    &mut self.cluster,
                );
            }
            self.net.connect_wanted();
        }
        panic!("no heartbeat");
    }

    /// The coordinator answers the heartbeat out with a new member epoch and the target
    /// assignment `partitions` of `t` (untimed).
    pub fn coordinator_assigns(&mut self, partitions: impl IntoIterator<Item = i32>) {
        let t = self.heartbeat.take().expect("a heartbeat out");
        self.epoch += 1;
        let resp = ConsumerGroupHeartbeatResponse {
            member_id: Some(self.member.member_id().to_owned()),
            member_epoch: self.epoch,
            heartbeat_interval_ms: 3_000,
            assignment: Some(Assignment {
                topic_partitions: vec![TopicPartitions {
                    topic_id: self.topic_id,
                    partitions: partitions.into_iter().collect(),
                }],
            }),
            ..Default::default()
        };
        let body = response::<ConsumerGroupHeartbeatRequest>(&t, &resp);
        self.answer = Some((t, body));
    }

    /// Hands the answer to the member, then runs the loop and the user thread until the
    /// member acknowledges what it reconciled with its next heartbeat: every callback is
    /// answered at once. Returns how many partitions that heartbeat reports owned.
    pub fn reconcile(&mut self) -> usize {
        let (t, body) = self.answer.take().expect("an answer built");
        let now = self.net.now();
        self.net.answered(t.route);
        self.member.handle_response(
            t.tag.id,
            t.version,
            &body,
            now,
            &mut self.net.links,
            &mut self.coordinator,
            &mut self.cluster,
        );
        for _ in 0..8 {
            let mut answered = false;
            while let Some(e) = self.member.poll_event() {
                match e {
                    MemberEvent::Callback {
                        token,
                        kind,
                        partitions,
                        ..
                    } => {
                        self.callbacks.push((kind, partitions.len()));
                        self.member.callback_done(token, now);
                        answered = true;
                    }
                    MemberEvent::Error { error, .. } => panic!("member: {error}"),
                    MemberEvent::Identity(_) | MemberEvent::Left | MemberEvent::Rebalance(_) => {}
                }
            }
            let now = self.net.now();
            self.net.links.begin_round();
            if let Some(t) = self.member.poll_transmit(
                now,
                &mut self.net.links,
                &mut self.coordinator,
                &mut self.cluster,
            ) {
                self.net.sent(&t);
                let req = request::<ConsumerGroupHeartbeatRequest>(&t);
                let owned = req
                    .topic_partitions
                    .iter()
                    .flatten()
                    .map(|t| t.partitions.len())
                    .sum();
                self.heartbeat = Some(t);
                return owned;
            }
            if !answered {
                break;
            }
        }
        panic!("no acknowledging heartbeat");
    }

    /// The callbacks run so far: kind and how many partitions each had.
    pub fn callbacks(&self) -> Vec<(String, usize)> {
        self.callbacks
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect()
    }

    /// How many partitions the user thread owns now.
    pub fn owned(&self) -> usize {
        self.member.user_owned().len()
    }
}
