//! The classic member's way into a generation (Java's `AbstractCoordinator.joinGroup` and
//! `ConsumerCoordinator.onLeaderElected`): JoinGroup, the leader's assignment (after
//! waiting for partition counts when the metadata lacks some), SyncGroup, and applying the
//! assignment it returns. Both requests travel on the join lane.
//!
//! The leader reads the other members' subscriptions as Java's `ConsumerProtocol` does
//! (a newer version by the prefix it knows). Where Java's leader fails the rebalance on one
//! it cannot read (`onLeaderElected` throws from `poll`, and again in every rebalance while
//! that member stays), ours assigns that member nothing (an empty assignment, which any
//! client decodes), logs a warning naming it, and assigns the rest as usual: one broken
//! client does not stop the whole group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ClassicMember, Leading, State, Sync, Then};
use crate::cluster::Cluster;
use crate::error::{Error, ErrorKind};
use crate::group::assignor::{MemberSubscription, PartitionInfo, RebalanceProtocol};
use crate::group::coordinator::Coordinator;
use crate::group::member::{member_transmit, millis, CallbackKind, Subscription};
use crate::link::{Lane, Links, Transmit};
use crate::protocol::api::join_group::{
    JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse,
};
use crate::protocol::api::sync_group::{
    SyncGroupRequest, SyncGroupRequestAssignment, SyncGroupResponse,
};
use crate::protocol::consumer_protocol::{
    self as cp, is_empty_payload, ConsumerProtocolAssignment, ConsumerProtocolSubscription,
    PROTOCOL_TYPE,
};
use crate::protocol::error_code::ErrorCode;
use crate::protocol::message::Bytes;
use crate::protocol::wire::DecodeError;
use crate::types::{GenerationId, Identity, MemberId, MetadataGeneration, TopicPartition};

/// Java's `JOIN_GROUP_TIMEOUT_LAPSE`: JoinGroup (and SyncGroup) may take the rebalance
/// timeout, and this much more.
const JOIN_TIMEOUT_LAPSE: Duration = Duration::from_secs(5);

/// The longest rejoin reason sent (Java's `JoinGroupRequest.maybeTruncateReason`).
const MAX_REASON_LEN: usize = 255;

impl ClassicMember {
    pub(super) fn poll_join(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &Cluster,
    ) -> Option<Transmit> {
        if self.needs_join_prepare || self.core.poll_expired() {
            return None;
        }
        if self.not_before.is_some_and(|t| now < t) {
            return None;
        }
        if let Some(g) = self.pattern_wait {
            if cluster.generation() <= g {
                return None;
            }
            self.pattern_wait = None;
        }
        if coordinator.node().is_none() {
            if let Some(e) = coordinator.fatal() {
                let e = e.clone();
                self.core.report(format!("coordinator: {e}"), e);
            }
            return None;
        }
        let (route, v) = self.link::<JoinGroupRequest>(now, links, coordinator, Lane::Join)?;
        if v.get() < 5 {
            if let Some(inst) = &self.cfg.instance_id {
                let msg = format!(
                    "group {}: group.instance.id={inst} (static membership) needs JoinGroup v5 \
                     or later; {} supports up to v{v}: unset group.instance.id or upgrade the \
                     brokers",
                    self.core.group(),
                    route.peer
                );
                self.fatal(Error::unsupported(msg));
                return None;
            }
        }
        let req = self.join_request();
        let id = self.core.take_id();
        self.joined_topics = Some(self.topics.clone());
        self.rejoin_needed = false;
        self.not_before = None;
        log::info!(
            "group {}: (re-)joining with member id {:?}, generation {}: {}",
            self.core.group(),
            self.member_id,
            self.generation,
            if self.rejoin_reason.is_empty() {
                "first join"
            } else {
                &self.rejoin_reason
            }
        );
        self.transition(State::AwaitJoin { id, route }, "JoinGroup sent");
        Some(member_transmit(route, &req, v, id, self.join_timeout()))
    }

    fn join_timeout(&self) -> Duration {
        self.cfg.request_timeout.max(
            self.cfg
                .rebalance_timeout
                .saturating_add(JOIN_TIMEOUT_LAPSE),
        )
    }

    /// Whether this member has a `client.rack` (an empty one counts as none, as in Java).
    pub(super) fn has_rack(&self) -> bool {
        self.cfg
            .client_rack
            .as_deref()
            .is_some_and(|r| !r.is_empty())
    }

    pub(super) fn join_request(&self) -> JoinGroupRequest {
        let topics: Vec<String> = self.topics.iter().cloned().collect();
        let owned = match self.protocol {
            RebalanceProtocol::Cooperative => to_wire(&self.owned),
            RebalanceProtocol::Eager => Vec::new(),
        };
        let protocols = self
            .cfg
            .assignors
            .iter()
            .map(|a| {
                let sub = ConsumerProtocolSubscription {
                    topics: topics.clone(),
                    user_data: a.subscription_user_data(self.generation.0).map(Bytes),
                    owned_partitions: owned.clone(),
                    generation_id: self.generation.0,
                    rack_id: self.cfg.client_rack.clone(),
                };
                JoinGroupRequestProtocol {
                    name: a.name().to_owned(),
                    metadata: Bytes(sub.encode()),
                }
            })
            .collect();
        let mut reason = self.rejoin_reason.clone();
        if reason.len() > MAX_REASON_LEN {
            let mut cut = MAX_REASON_LEN;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
        }
        JoinGroupRequest {
            group_id: self.core.group_id().to_owned(),
            session_timeout_ms: millis(self.cfg.session_timeout),
            rebalance_timeout_ms: millis(self.cfg.rebalance_timeout),
            member_id: self.member_id.as_str().to_owned(),
            group_instance_id: self.cfg.instance_id.clone(),
            protocol_type: PROTOCOL_TYPE.to_owned(),
            protocols,
            reason: Some(reason),
        }
    }

    pub(super) fn on_join(
        &mut self,
        resp: JoinGroupResponse,
        now: Instant,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) {
        let code = ErrorCode::from_code(resp.error_code);
        match code {
            ErrorCode::None => {
                if let Some(pt) = resp
                    .protocol_type
                    .as_deref()
                    .filter(|p| *p != PROTOCOL_TYPE)
                {
                    let msg = format!(
                        "group {}: the group's protocol type is {pt:?}, not \"consumer\": \
                         group.id names a group of another kind of client",
                        self.core.group()
                    );
                    self.fatal(Error::broker(ErrorCode::INCONSISTENT_GROUP_PROTOCOL, msg));
                    return;
                }
                self.joined(resp, now, cluster);
            }
            ErrorCode::MEMBER_ID_REQUIRED => {
                log::info!(
                    "group {}: the coordinator gave member id {}; joining again with it",
                    self.core.group(),
                    resp.member_id
                );
                self.member_id = MemberId::new(resp.member_id);
                self.generation = GenerationId::UNKNOWN;
                self.core.set_identity(self.reset_identity());
                self.joining_with_given_id = true;
                self.retry_join(now, true, "need to re-join with the given member id");
            }
            ErrorCode::UNKNOWN_MEMBER_ID => {
                self.reset("JoinGroup: UNKNOWN_MEMBER_ID", true);
                self.retry_join(now, true, "rebalance failed due to UNKNOWN_MEMBER_ID");
            }
            ErrorCode::REBALANCE_IN_PROGRESS => {
                self.retry_join(now, false, "rebalance failed due to REBALANCE_IN_PROGRESS");
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                coordinator.mark_unknown(&format!("JoinGroup: {code}"), now);
                self.retry_join(now, false, "the coordinator moved");
            }
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS => {
                self.retry_join(now, false, "the coordinator is loading the group");
            }
            ErrorCode::INCONSISTENT_GROUP_PROTOCOL
            | ErrorCode::INVALID_SESSION_TIMEOUT
            | ErrorCode::INVALID_GROUP_ID
            | ErrorCode::GROUP_AUTHORIZATION_FAILED
            | ErrorCode::GROUP_MAX_SIZE_REACHED
            | ErrorCode::FENCED_INSTANCE_ID
            | ErrorCode::UNSUPPORTED_VERSION => {
                let msg = self.fatal_message("JoinGroup", code);
                self.fatal(Error::broker(code, msg));
            }
            c => {
                let msg = format!("group {}: JoinGroup failed; retrying", self.core.group());
                self.core
                    .report(format!("JoinGroup {c}"), Error::broker(c, msg));
                self.retry_join(now, false, "rebalance failed");
            }
        }
    }

    /// JoinGroup succeeded: the new generation. The leader assigns (perhaps after waiting
    /// for partition counts); everyone else asks for its assignment.
    fn joined(&mut self, resp: JoinGroupResponse, now: Instant, cluster: &mut Cluster) {
        self.generation = GenerationId(resp.generation_id);
        self.member_id = MemberId::new(resp.member_id.clone());
        self.protocol_name = resp.protocol_name.clone();
        self.session_alive = Some(now);
        self.heartbeat_due = Some(now + self.cfg.heartbeat_interval);
        self.heartbeat_retry.succeeded();
        let leader = !resp.member_id.is_empty() && resp.leader == resp.member_id;
        log::info!(
            "group {}: joined generation {} as member {} ({}), protocol {:?}",
            self.core.group(),
            resp.generation_id,
            resp.member_id,
            if leader {
                "leader"
            } else if resp.leader.is_empty() {
                "no leader: the coordinator assigns"
            } else {
                "follower"
            },
            resp.protocol_name
        );
        let protocol = match resp.protocol_name.as_deref() {
            Some(p) if self.cfg.assignors.iter().any(|a| a.name() == p) => p.to_owned(),
            other => {
                let offered = self.assignor_names();
                let msg = format!(
                    "group {}: the coordinator chose assignor {other:?}, which \
                     partition.assignment.strategy ({offered}) does not name; rejoining",
                    self.core.group()
                );
                self.core
                    .report("JoinGroup protocol".into(), protocol_error(msg));
                self.retry_join(now, false, "the coordinator chose an unknown protocol");
                return;
            }
        };
        if !leader {
            self.transition(
                State::AwaitSync(Sync {
                    protocol,
                    assignments: Vec::new(),
                    snapshot: None,
                    sent: None,
                }),
                "joined as a follower",
            );
            return;
        }
        // A member whose subscription does not decode (another client's bug, or garbage)
        // gets nothing: the rest of the group is assigned as if it subscribed to nothing.
        // (Java's leader throws the SchemaException from its poll and rejoins, and fails
        // the same way in every rebalance while that member is in the group.)
        let mut members = Vec::with_capacity(resp.members.len());
        let mut undecodable = Vec::new();
        for m in &resp.members {
            match ConsumerProtocolSubscription::decode(&m.metadata.0) {
                Ok(s) => members.push(MemberSubscription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    topics: s.topics,
                    owned_partitions: from_wire(&s.owned_partitions).into_iter().collect(),
                    generation: s.generation_id,
                    rack: s.rack_id,
                    user_data: s.user_data.map(|b| b.0),
                }),
                Err(e) => {
                    log::warn!(
                        "{}",
                        undecodable_subscription(
                            self.core.group(),
                            self.generation,
                            &m.member_id,
                            m.group_instance_id.as_deref(),
                            &m.metadata.0,
                            &e
                        )
                    );
                    undecodable.push(m.member_id.clone());
                }
            }
        }
        // The leader watches every topic the group subscribes to.
        self.group_topics = members.iter().flat_map(|m| m.topics.clone()).collect();
        self.interest_dirty = true;
        self.sync_cluster(cluster);
        if resp.skip_assignment {
            log::info!(
                "group {}: skipping the assignment as the returning static leader of \
                 generation {}",
                self.core.group(),
                self.generation
            );
            self.transition(
                State::AwaitSync(Sync {
                    protocol,
                    assignments: Vec::new(),
                    snapshot: None,
                    sent: None,
                }),
                "leader skips the assignment",
            );
            return;
        }
        let leading = Leading {
            protocol,
            members,
            undecodable,
        };
        if self.counts_known(cluster) {
            let sync = self.assign(leading, cluster);
            self.transition(State::AwaitSync(sync), "leader assigned");
        } else {
            cluster.request_update();
            let seen = cluster.generation();
            self.transition(
                State::AwaitMetadata {
                    leading,
                    since: now,
                    seen,
                },
                "leader waits for partition counts",
            );
        }
    }

    fn counts_known(&self, cluster: &Cluster) -> bool {
        self.group_topics
            .iter()
            .all(|t| cluster.partition_count(t).is_some())
    }

    /// The leader, waiting for partition counts: assigns once the metadata is newer, every
    /// count is known, or `request.timeout.ms` passed (topics still unknown are skipped).
    pub(super) fn check_metadata(&mut self, now: Instant, cluster: &Cluster) {
        let State::AwaitMetadata { since, seen, .. } = &self.state else {
            return;
        };
        let ready = cluster.generation() > *seen
            || now >= *since + self.cfg.request_timeout
            || self.counts_known(cluster);
        if !ready {
            return;
        }
        // Keep the state's kind (for the transition check) while taking its contents.
        let placeholder = State::AwaitMetadata {
            leading: Leading {
                protocol: String::new(),
                members: Vec::new(),
                undecodable: Vec::new(),
            },
            since: now,
            seen: MetadataGeneration(0),
        };
        let State::AwaitMetadata { leading, .. } = std::mem::replace(&mut self.state, placeholder)
        else {
            unreachable!("checked above");
        };
        let sync = self.assign(leading, cluster);
        self.transition(State::AwaitSync(sync), "leader assigned");
    }

    /// Runs the chosen assignor over the group's subscriptions and what the metadata knows.
    fn assign(&mut self, leading: Leading, cluster: &Cluster) -> Sync {
        let Leading {
            protocol,
            members,
            undecodable,
        } = leading;
        let mut topics: BTreeMap<String, Vec<PartitionInfo>> = BTreeMap::new();
        let mut snapshot = BTreeMap::new();
        let racks = self.has_rack();
        for t in &self.group_topics {
            snapshot.insert(t.clone(), TopicSnapshot::of(cluster, t, racks));
            if let Some(infos) = partition_infos(cluster, t) {
                topics.insert(t.clone(), infos);
            }
        }
        let unknown: Vec<&String> = snapshot
            .iter()
            .filter(|(_, s)| s.count.is_none())
            .map(|(t, _)| t)
            .collect();
        if !unknown.is_empty() {
            log::warn!(
                "group {}: assigning without topics the metadata does not describe: {}",
                self.core.group(),
                some_of(&unknown, MAX_LOGGED_TOPICS)
            );
        }
        let assignor = self
            .cfg
            .assignors
            .iter()
            .find(|a| a.name() == protocol)
            .expect("the protocol was checked against the assignors");
        let mut result = assignor.assign(&topics, &members);
        // An empty assignment, which every client decodes, rather than none (which the
        // member would take as "rejoin", and so would start the next rebalance at once).
        for id in undecodable {
            result.entry(id).or_default();
        }
        log::info!(
            "group {}: leader of generation {} assigned with {protocol}: {result:?}",
            self.core.group(),
            self.generation
        );
        let assignments = result
            .into_iter()
            .map(|(member_id, parts)| {
                let set: BTreeSet<TopicPartition> = parts.into_iter().collect();
                SyncGroupRequestAssignment {
                    member_id,
                    assignment: Bytes(
                        ConsumerProtocolAssignment {
                            assigned_partitions: to_wire(&set),
                            user_data: None,
                        }
                        .encode(),
                    ),
                }
            })
            .collect();
        Sync {
            protocol,
            assignments,
            snapshot: Some(snapshot),
            sent: None,
        }
    }

    pub(super) fn poll_sync(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) -> Option<Transmit> {
        let (route, v) = self.link::<SyncGroupRequest>(now, links, coordinator, Lane::Join)?;
        let id = self.core.take_id();
        let timeout = self.join_timeout();
        let (group_id, generation, member_id) = (
            self.core.group_id().to_owned(),
            self.generation.0,
            self.member_id.as_str().to_owned(),
        );
        let instance = self.cfg.instance_id.clone();
        let State::AwaitSync(sync) = &mut self.state else {
            return None;
        };
        let req = SyncGroupRequest {
            group_id,
            generation_id: generation,
            member_id,
            group_instance_id: instance,
            protocol_type: Some(PROTOCOL_TYPE.to_owned()),
            protocol_name: Some(sync.protocol.clone()),
            assignments: sync.assignments.clone(),
        };
        sync.sent = Some((id, route));
        log::debug!(
            "group {}: SyncGroup for generation {} ({} assignments)",
            self.core.group(),
            generation,
            req.assignments.len()
        );
        Some(member_transmit(route, &req, v, id, timeout))
    }

    pub(super) fn on_sync(
        &mut self,
        resp: SyncGroupResponse,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        let code = ErrorCode::from_code(resp.error_code);
        match code {
            ErrorCode::None => {
                let State::AwaitSync(sync) = &self.state else {
                    return;
                };
                let ours = sync.protocol.clone();
                if let Some(pt) = resp
                    .protocol_type
                    .as_deref()
                    .filter(|p| *p != PROTOCOL_TYPE)
                {
                    let msg = format!(
                        "group {}: SyncGroup answered for protocol type {pt:?}, not \"consumer\"",
                        self.core.group()
                    );
                    self.fatal(Error::broker(ErrorCode::INCONSISTENT_GROUP_PROTOCOL, msg));
                    return;
                }
                if let Some(p) = resp.protocol_name.as_deref().filter(|p| *p != ours) {
                    let msg = format!(
                        "group {}: SyncGroup answered for assignor {p:?}, JoinGroup chose {ours:?}",
                        self.core.group()
                    );
                    self.fatal(Error::broker(ErrorCode::INCONSISTENT_GROUP_PROTOCOL, msg));
                    return;
                }
                self.synced(&resp.assignment.0, now);
            }
            ErrorCode::REBALANCE_IN_PROGRESS => {
                self.retry_join(now, true, "the group began another rebalance");
            }
            ErrorCode::UNKNOWN_MEMBER_ID => {
                self.reset("SyncGroup: UNKNOWN_MEMBER_ID", true);
                self.retry_join(now, true, "rebalance failed due to UNKNOWN_MEMBER_ID");
            }
            ErrorCode::ILLEGAL_GENERATION => {
                self.reset("SyncGroup: ILLEGAL_GENERATION", false);
                self.retry_join(now, true, "rebalance failed due to ILLEGAL_GENERATION");
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                coordinator.mark_unknown(&format!("SyncGroup: {code}"), now);
                self.retry_join(now, false, "the coordinator moved");
            }
            ErrorCode::FENCED_INSTANCE_ID
            | ErrorCode::GROUP_AUTHORIZATION_FAILED
            | ErrorCode::INCONSISTENT_GROUP_PROTOCOL
            | ErrorCode::INVALID_GROUP_ID
            | ErrorCode::UNSUPPORTED_VERSION => {
                let msg = self.fatal_message("SyncGroup", code);
                self.fatal(Error::broker(code, msg));
            }
            c => {
                if !c.is_retriable() {
                    let msg = format!("group {}: SyncGroup failed; rejoining", self.core.group());
                    self.core
                        .report(format!("SyncGroup {c}"), Error::broker(c, msg));
                }
                self.retry_join(now, false, "rebalance failed");
            }
        }
    }

    /// SyncGroup succeeded: the generation is complete; apply the assignment.
    fn synced(&mut self, payload: &[u8], now: Instant) {
        self.session_alive = Some(now);
        self.core.set_identity(Identity::classic(
            self.generation,
            self.member_id.clone(),
            self.cfg.instance_id.clone(),
        ));
        let assignment = match ConsumerProtocolAssignment::decode(payload) {
            Ok(a) => a,
            Err(e) => {
                let what = if is_empty_payload(&e) {
                    "an empty assignment (the leader sent none for this member)".to_owned()
                } else {
                    format!("a malformed assignment ({e})")
                };
                let msg = format!(
                    "group {}: SyncGroup of generation {} returned {what}; rejoining",
                    self.core.group(),
                    self.generation
                );
                self.core
                    .report("SyncGroup assignment".into(), Error::decode(e, msg));
                self.retry_join(now, false, "invalid assignment");
                return;
            }
        };
        let assigned = from_wire(&assignment.assigned_partitions);
        let foreign: Vec<&TopicPartition> = assigned
            .iter()
            .filter(|tp| !self.subscribed_to(tp.topic()))
            .collect();
        if !foreign.is_empty() {
            log::warn!(
                "group {}: received assignment {foreign:?} does not match the current \
                 subscription; the subscription has likely changed since the member joined: \
                 rejoining with the current subscription",
                self.core.group()
            );
            self.needs_join_prepare = true;
            self.retry_join(
                now,
                true,
                "received assignment does not match the current subscription",
            );
            return;
        }
        self.join_retry.succeeded();
        self.core.recovered();
        self.needs_join_prepare = true;
        let State::AwaitSync(sync) = &mut self.state else {
            return;
        };
        match sync.snapshot.take() {
            Some(s) => self.assignment_snapshot = Some(s),
            None => {
                self.assignment_snapshot = None;
                if !self.group_topics.is_empty() {
                    self.group_topics.clear();
                    self.interest_dirty = true;
                }
            }
        }
        let added: BTreeSet<TopicPartition> = assigned.difference(&self.owned).cloned().collect();
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&assigned).cloned().collect();
        log::info!(
            "group {}: generation {}: assigned {:?}, owned {:?}, added {:?}, revoked {:?}",
            self.core.group(),
            self.generation,
            assigned,
            self.owned,
            added,
            revoked
        );
        if self.protocol == RebalanceProtocol::Cooperative && !revoked.is_empty() {
            self.rejoin_needed = true;
            self.rejoin_reason = "need to revoke partitions and re-join".to_owned();
            let keep: BTreeSet<TopicPartition> =
                self.owned.intersection(&assigned).cloned().collect();
            self.emit(
                CallbackKind::Revoked,
                revoked,
                keep,
                Then::Assign {
                    added,
                    owned: assigned,
                },
            );
        } else {
            self.emit(CallbackKind::Assigned, added, assigned, Then::Rest);
        }
    }

    /// Whether the subscription covers `topic` (a pattern: whether it matches).
    fn subscribed_to(&self, topic: &str) -> bool {
        match &self.subscription {
            Some(Subscription::Topics(t)) => t.contains(topic),
            Some(Subscription::Pattern(p)) => p.matches(topic),
            None => false,
        }
    }

    /// A JoinGroup or SyncGroup answer that does not decode: reported, and the member
    /// rejoins.
    pub(super) fn malformed(&mut self, api: &str, e: DecodeError, now: Instant) {
        let msg = format!("group {}: malformed {api} response", self.core.group());
        self.core
            .report(format!("{api} malformed"), Error::decode(e, msg));
        self.retry_join(now, false, &format!("malformed {api} response"));
    }

    /// A rejoin after a failed or refused step: `immediate` is Java's "retry at once",
    /// which repeats only after a backoff.
    pub(super) fn retry_join(&mut self, now: Instant, immediate: bool, reason: &str) {
        let first = self.join_retry.failures() == 0;
        let delay = self
            .join_retry
            .failed(&self.cfg.retry_backoff, &mut *self.jitter);
        self.not_before = if immediate && first {
            None
        } else {
            Some(now + delay)
        };
        self.rejoin_reason = reason.to_owned();
        if !matches!(
            self.state,
            State::NeedJoin | State::AwaitCallback { .. } | State::Fatal | State::Unsubscribed
        ) {
            self.transition(State::NeedJoin, reason);
        }
    }
}

/// What the leader's assignment used of one topic's metadata (Java's `MetadataSnapshot`):
/// a change rebalances the group. Its partition count, and, when the leader has a
/// `client.rack` (rack-aware assignors may have used them), each partition's replica racks
/// (`None` for a replica without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopicSnapshot {
    pub count: Option<i32>,
    racks: Vec<Box<[Option<String>]>>,
}

impl TopicSnapshot {
    pub(super) fn of(cluster: &Cluster, topic: &str, racks: bool) -> TopicSnapshot {
        let per_partition = match cluster.replicas(topic) {
            Some(parts) if racks => parts
                .into_iter()
                .map(|(_, replicas)| {
                    let mut r: Vec<Option<String>> = replicas
                        .iter()
                        .map(|&n| cluster.broker(n).and_then(|b| b.rack.clone()))
                        .collect();
                    r.sort();
                    r.dedup();
                    r.into_boxed_slice()
                })
                .collect(),
            _ => Vec::new(),
        };
        TopicSnapshot {
            count: cluster.partition_count(topic),
            racks: per_partition,
        }
    }
}

/// What the assignors get to know of `topic`'s partitions: each one's number and the racks
/// of its replicas (a replica whose broker has no rack, or is not listed, adds none), as
/// Java's `Cluster.partitionsForTopic` hands them to its assignors.
fn partition_infos(cluster: &Cluster, topic: &str) -> Option<Vec<PartitionInfo>> {
    let parts = cluster.replicas(topic)?;
    Some(
        parts
            .into_iter()
            .map(|(partition, replicas)| PartitionInfo {
                partition,
                replica_racks: replicas
                    .iter()
                    .filter_map(|&n| cluster.broker(n)?.rack.clone())
                    .collect(),
            })
            .collect(),
    )
}

/// Partitions in the consumer protocol's form: one entry per topic, partitions sorted.
pub(super) fn to_wire(parts: &BTreeSet<TopicPartition>) -> Vec<cp::TopicPartition> {
    let mut out: Vec<cp::TopicPartition> = Vec::new();
    for tp in parts {
        match out.last_mut() {
            Some(last) if last.topic == tp.topic() => last.partitions.push(tp.partition()),
            _ => out.push(cp::TopicPartition {
                topic: tp.topic().to_owned(),
                partitions: vec![tp.partition()],
            }),
        }
    }
    out
}

pub(super) fn from_wire(parts: &[cp::TopicPartition]) -> BTreeSet<TopicPartition> {
    let mut out = BTreeSet::new();
    for t in parts {
        let name: Arc<str> = Arc::from(t.topic.as_str());
        for p in &t.partitions {
            out.insert(TopicPartition::new(Arc::clone(&name), *p));
        }
    }
    out
}

/// A problem with what the group's members or coordinator sent.
pub(super) fn protocol_error(message: String) -> Error {
    Error::new(ErrorKind::Protocol, message)
}

/// The most topic names a log line lists.
pub(super) const MAX_LOGGED_TOPICS: usize = 20;

/// `items` for a log line: all of them if there are at most `max`, else the first `max`
/// and how many more.
pub(super) fn some_of<T: std::fmt::Debug>(items: &[T], max: usize) -> String {
    if items.len() <= max {
        return format!("{items:?}");
    }
    format!("{:?} and {} more", &items[..max], items.len() - max)
}

/// The leader's warning about member `member_id`, whose subscription `metadata` did not
/// decode (`e`): names the member and what was wrong (the version it claims, the size),
/// never the bytes. Ids come from other clients: quoted, control characters escaped.
pub(super) fn undecodable_subscription(
    group: &str,
    generation: GenerationId,
    member_id: &str,
    instance_id: Option<&str>,
    metadata: &[u8],
    e: &DecodeError,
) -> String {
    let what = if is_empty_payload(e) {
        "is empty".to_owned()
    } else {
        let version = match metadata {
            [a, b, ..] => format!("version {}", i16::from_be_bytes([*a, *b])),
            _ => "no version".to_owned(),
        };
        format!("does not decode ({e}; {version}, {} bytes)", metadata.len())
    };
    let instance = instance_id.map_or(String::new(), |i| format!(" (group.instance.id {i:?})"));
    format!(
        "group {group}: generation {generation}: member {member_id:?}{instance}: its \
         subscription {what}; assigning it nothing and the other members as usual"
    )
}
