//! A simulated KIP-848 group coordinator for the consumer member's tests: it answers
//! ConsumerGroupHeartbeat for several members (one per simulated client) the way Kafka's
//! `GroupMetadataManager` and `CurrentAssignmentBuilder` do, within what a member needs
//! (protocol reference 1.4):
//!
//! - the group epoch is bumped when a member joins or leaves (or is removed), when a
//!   subscription changes and when the topics change; each bump recomputes the target
//!   assignment at once with a sticky, uniform-ish assignor over topic ids;
//! - a member converges towards its target one heartbeat at a time: partitions it must give
//!   up wait (UNREVOKED_PARTITIONS, epoch kept) until a heartbeat's TopicPartitions omits
//!   them (null means "still owned"); partitions another member still holds are withheld
//!   (UNRELEASED_PARTITIONS) and handed over by a later heartbeat once released;
//! - epoch validation: above the member's epoch is FENCED_MEMBER_EPOCH, below it only its
//!   previous epoch with owned partitions within its assignment is accepted (a lost
//!   answer); an unknown member is UNKNOWN_MEMBER_ID;
//! - joining (epoch 0) must be a full request (rebalance timeout, TopicPartitions=[] and a
//!   subscription), else INVALID_REQUEST; at v0 an empty member id gets one from the
//!   coordinator; a rejoin with a known member id gets the member's state back (as after
//!   KAFKA-19233; `fence_rejoins` plays the older brokers, which fence it);
//! - leaving with -1 removes the member; a static member's -2 keeps it (and its
//!   assignment) for a new incarnation with the same instance id, which otherwise gets
//!   UNRELEASED_INSTANCE_ID;
//! - sessions expire after `session_timeout` without a heartbeat, and a revocation not
//!   acknowledged within the member's rebalance timeout removes it;
//! - the Assignment goes in the answer when the request was full or the member's assigned
//!   partitions changed in this heartbeat;
//! - `inject` answers a client's next heartbeat with any error instead.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::group::member::TopicPattern;
use crate::link::Transmit;
use crate::protocol::api::consumer_group_heartbeat::{
    Assignment, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicPartitions,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
};
use crate::protocol::error_code::ErrorCode;
use crate::protocol::message::Uuid;
use crate::sim::{request, response, SimBroker};

use super::{Answer, SimCoordinator};

/// Partitions by topic id.
pub(crate) type Parts = BTreeMap<Uuid, BTreeSet<i32>>;

/// The coordinator's states of a member (`MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

/// One member as the coordinator holds it.
#[derive(Debug, Clone)]
pub(crate) struct SimMember {
    pub client: usize,
    pub instance_id: Option<String>,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: SimState,
    pub names: BTreeSet<String>,
    pub regex: Option<String>,
    pub rebalance_timeout: Duration,
    pub last_seen: Instant,
    /// The partitions the member may use now.
    pub assigned: Parts,
    /// The partitions it must give up and has not yet acknowledged.
    pub pending_revocation: Parts,
    revoke_deadline: Option<Instant>,
}

impl SimMember {
    /// What the coordinator counts the member as owning.
    pub fn holds(&self) -> Parts {
        let mut h = self.assigned.clone();
        for (t, ps) in &self.pending_revocation {
            h.entry(*t).or_default().extend(ps);
        }
        h
    }
}

type Failure = (ErrorCode, Option<String>);

/// The simulated coordinator of one KIP-848 consumer group.
#[derive(Debug)]
pub(crate) struct SimConsumerGroup {
    pub group_id: String,
    /// The topics the coordinator knows: name to (id, partition count).
    pub topics: BTreeMap<String, (Uuid, i32)>,
    pub group_epoch: i32,
    pub members: BTreeMap<String, SimMember>,
    /// Each member's target assignment.
    pub targets: BTreeMap<String, Parts>,
    statics: BTreeMap<String, String>,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Plays a broker before KAFKA-19233: a rejoin (epoch 0) with the id of a member the
    /// coordinator holds at a higher epoch is fenced.
    pub fence_rejoins: bool,
    pub assignors: Vec<&'static str>,
    /// Errors for a client's next heartbeats (client, code, message).
    inject: Vec<(usize, ErrorCode, Option<String>)>,
    next_member: u64,
    /// Members removed: member id and why (session, rebalance timeout, leave).
    pub removed: Vec<(String, &'static str)>,
    /// Heartbeats answered (with or without an error).
    pub heartbeats: usize,
    /// Answers not yet taken by the rig.
    answers: Vec<Answer>,
}

fn fail<T>(code: ErrorCode, msg: impl Into<String>) -> Result<T, Failure> {
    Err((code, Some(msg.into())))
}

pub(crate) fn sanitize(parts: &[TopicPartitions]) -> Parts {
    let mut out = Parts::new();
    for t in parts {
        out.entry(t.topic_id).or_default().extend(&t.partitions);
    }
    out.retain(|_, ps| !ps.is_empty());
    out
}

pub(crate) fn to_wire(parts: &Parts) -> Vec<TopicPartitions> {
    parts
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(id, ps)| TopicPartitions {
            topic_id: *id,
            partitions: ps.iter().copied().collect(),
        })
        .collect()
}

fn contains(parts: &Parts, t: &Uuid, p: i32) -> bool {
    parts.get(t).is_some_and(|ps| ps.contains(&p))
}

fn subset(a: &Parts, b: &Parts) -> bool {
    a.iter()
        .all(|(t, ps)| ps.iter().all(|p| contains(b, t, *p)))
}

fn intersects(a: &Parts, b: &Parts) -> bool {
    a.iter()
        .any(|(t, ps)| ps.iter().any(|p| contains(b, t, *p)))
}

impl SimConsumerGroup {
    /// An empty group `group_id` over `topics` (name, id, partitions).
    pub fn new(group_id: &str, topics: BTreeMap<String, (Uuid, i32)>) -> SimConsumerGroup {
        SimConsumerGroup {
            group_id: group_id.to_owned(),
            topics,
            group_epoch: 0,
            members: BTreeMap::new(),
            targets: BTreeMap::new(),
            statics: BTreeMap::new(),
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            fence_rejoins: false,
            assignors: vec!["uniform", "range"],
            inject: Vec::new(),
            next_member: 1,
            removed: Vec::new(),
            heartbeats: 0,
            answers: Vec::new(),
        }
    }

    /// Client `client`'s next heartbeat is answered `code` (with `message`).
    pub fn inject(&mut self, client: usize, code: ErrorCode, message: Option<&str>) {
        self.inject.push((client, code, message.map(str::to_owned)));
    }

    /// Drops the errors waiting for `client`'s heartbeats.
    pub fn clear_injections(&mut self, client: usize) {
        self.inject.retain(|(c, _, _)| *c != client);
    }

    /// The topic of id `id`.
    pub fn topic_name(&self, id: &Uuid) -> Option<&str> {
        self.topics
            .iter()
            .find(|(_, (i, _))| i == id)
            .map(|(n, _)| n.as_str())
    }

    /// The topics changed (created, grown): a new group epoch and target assignment.
    pub fn set_topics(&mut self, topics: BTreeMap<String, (Uuid, i32)>) {
        if topics != self.topics {
            self.topics = topics;
            self.bump();
        }
    }

    /// Answers the heartbeat `t` of client `client`: the response body.
    pub fn handle(&mut self, client: usize, t: &Transmit, now: Instant) -> Vec<u8> {
        let req = request::<ConsumerGroupHeartbeatRequest>(t);
        self.heartbeats += 1;
        let resp = match self.heartbeat(client, t.version.get(), &req, now) {
            Ok(r) => r,
            Err((code, msg)) => ConsumerGroupHeartbeatResponse {
                error_code: code.code(),
                error_message: msg,
                ..Default::default()
            },
        };
        self.check();
        response::<ConsumerGroupHeartbeatRequest>(t, &resp)
    }

    /// Expires sessions and unacknowledged revocations.
    pub fn tick(&mut self, now: Instant) {
        let timeout = self.session_timeout;
        let gone: Vec<(String, &'static str)> = self
            .members
            .iter()
            .filter_map(|(id, m)| {
                if m.last_seen + timeout <= now {
                    Some((id.clone(), "session expired"))
                } else if m.revoke_deadline.is_some_and(|d| d <= now) {
                    Some((
                        id.clone(),
                        "revocation not acknowledged in the rebalance timeout",
                    ))
                } else {
                    None
                }
            })
            .collect();
        let any = !gone.is_empty();
        for (id, why) in gone {
            self.remove(&id, why);
        }
        if any {
            self.bump();
        }
    }

    /// The next instant `tick` has something to do.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| [Some(m.last_seen + self.session_timeout), m.revoke_deadline])
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// No partition is held by two members (assigned or awaiting revocation).
    pub fn check(&self) {
        let mut owner: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
        for (id, m) in &self.members {
            for (t, ps) in m.holds() {
                for p in ps {
                    if let Some(other) = owner.insert((t, p), id) {
                        panic!("coordinator: partition {t:?}/{p} held by {other} and {id}");
                    }
                }
            }
        }
    }

    fn heartbeat(
        &mut self,
        client: usize,
        v: i16,
        req: &ConsumerGroupHeartbeatRequest,
        now: Instant,
    ) -> Result<ConsumerGroupHeartbeatResponse, Failure> {
        if let Some(k) = self.inject.iter().position(|(c, _, _)| *c == client) {
            let (_, code, msg) = self.inject.remove(k);
            return Err((code, msg));
        }
        let invalid = ErrorCode::INVALID_REQUEST;
        let epoch = req.member_epoch;
        if req.group_id != self.group_id {
            return fail(invalid, "GroupId can't be empty.");
        }
        if req.instance_id.as_deref() == Some("") || req.rack_id.as_deref() == Some("") {
            return fail(invalid, "InstanceId and RackId can't be empty.");
        }
        if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            return fail(invalid, "MemberEpoch is invalid.");
        }
        if req.member_id.is_empty() && (v >= 1 || epoch != 0) {
            return fail(invalid, "MemberId can't be empty.");
        }
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH && req.instance_id.is_none() {
            return fail(invalid, "InstanceId can't be null when leaving with -2.");
        }
        if epoch == 0 {
            if req.rebalance_timeout_ms < 0 {
                return fail(
                    invalid,
                    "RebalanceTimeoutMs must be provided in first request.",
                );
            }
            if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
                return fail(invalid, "TopicPartitions must be empty when (re-)joining.");
            }
            let regex = req
                .subscribed_topic_regex
                .as_deref()
                .is_some_and(|r| !r.is_empty());
            if req.subscribed_topic_names.is_none() && !regex {
                return fail(
                    invalid,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        if let Some(a) = &req.server_assignor {
            if !self.assignors.contains(&a.as_str()) {
                let msg = format!(
                    "ServerAssignor {a} is not supported. Supported assignors: {}.",
                    self.assignors.join(", ")
                );
                return fail(ErrorCode::UNSUPPORTED_ASSIGNOR, msg);
            }
        }
        if let Some(r) = req
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            if TopicPattern::new(r).is_err() {
                return fail(
                    ErrorCode::INVALID_REGULAR_EXPRESSION,
                    format!("Invalid regex {r}."),
                );
            }
        }
        if epoch < 0 {
            return self.leave(req);
        }
        let owned = req.topic_partitions.as_deref().map(sanitize);
        let (id, mut changed) = if epoch == 0 {
            self.join(client, req, now)?
        } else {
            self.validate(req, owned.as_ref())?;
            (req.member_id.clone(), false)
        };
        let m = self.members.get_mut(&id).expect("a member");
        m.last_seen = now;
        if req.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms as u64);
        }
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            changed |= names != m.names;
            m.names = names;
        }
        if let Some(r) = &req.subscribed_topic_regex {
            let r = (!r.is_empty()).then(|| r.clone());
            changed |= r != m.regex;
            m.regex = r;
        }
        let before = m.assigned.clone();
        if changed {
            self.bump();
        }
        self.reconcile(&id, owned.as_ref(), now);
        let full = epoch == 0
            || (req.rebalance_timeout_ms >= 0
                && req.subscribed_topic_names.is_some()
                && req.topic_partitions.is_some());
        let m = &self.members[&id];
        Ok(ConsumerGroupHeartbeatResponse {
            member_id: Some(id.clone()),
            member_epoch: m.epoch,
            heartbeat_interval_ms: self.heartbeat_interval.as_millis() as i32,
            assignment: (full || m.assigned != before).then(|| Assignment {
                topic_partitions: to_wire(&m.assigned),
            }),
            ..Default::default()
        })
    }

    /// A heartbeat with epoch > 0: the member and its epoch must be known.
    fn validate(
        &self,
        req: &ConsumerGroupHeartbeatRequest,
        owned: Option<&Parts>,
    ) -> Result<(), Failure> {
        let id = &req.member_id;
        let Some(m) = self.members.get(id) else {
            return fail(
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("Member {id} is not a member of group {}.", self.group_id),
            );
        };
        if let Some(i) = &req.instance_id {
            if self.statics.get(i) != Some(id) {
                return fail(
                    ErrorCode::FENCED_INSTANCE_ID,
                    format!("{i} is used by another member."),
                );
            }
        }
        let e = req.member_epoch;
        let lost_answer = e == m.previous_epoch && owned.is_some_and(|o| subset(o, &m.assigned));
        if e > m.epoch || (e < m.epoch && !lost_answer) {
            return fail(
                ErrorCode::FENCED_MEMBER_EPOCH,
                format!("The member epoch {e} does not match {}.", m.epoch),
            );
        }
        Ok(())
    }

    /// A heartbeat with epoch 0: a new member, a static member's new incarnation, or a
    /// known member rejoining. Returns the member id, and whether it is new.
    fn join(
        &mut self,
        client: usize,
        req: &ConsumerGroupHeartbeatRequest,
        now: Instant,
    ) -> Result<(String, bool), Failure> {
        let id = if req.member_id.is_empty() {
            let n = self.next_member;
            self.next_member += 1;
            format!("server-id-{n}")
        } else {
            req.member_id.clone()
        };
        let mut replaced = None;
        if let Some(inst) = &req.instance_id {
            if let Some(old) = self.statics.get(inst).filter(|old| **old != id) {
                if self.members[old].epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                    return fail(
                        ErrorCode::UNRELEASED_INSTANCE_ID,
                        format!("Static member with instance id {inst} is not released yet."),
                    );
                }
                replaced = Some(old.clone());
            }
        }
        if let Some(old) = replaced {
            // The new incarnation takes the old one's place and assignment.
            let mut m = self.members.remove(&old).expect("static member");
            if let Some(t) = self.targets.remove(&old) {
                self.targets.insert(id.clone(), t);
            }
            m.client = client;
            m.epoch = 0;
            m.previous_epoch = 0;
            m.state = SimState::Stable;
            self.statics
                .insert(req.instance_id.clone().expect("static"), id.clone());
            self.members.insert(id.clone(), m);
            return Ok((id, false));
        }
        if let Some(m) = self.members.get_mut(&id) {
            if self.fence_rejoins && m.epoch > 0 && m.previous_epoch != 0 {
                return fail(
                    ErrorCode::FENCED_MEMBER_EPOCH,
                    format!(
                        "Member {id} rejoined with epoch 0 while at epoch {}.",
                        m.epoch
                    ),
                );
            }
            // KAFKA-19233: the member gets its state back.
            m.client = client;
            if m.epoch < 0 {
                m.epoch = 0;
            }
            return Ok((id, false));
        }
        if let Some(inst) = &req.instance_id {
            self.statics.insert(inst.clone(), id.clone());
        }
        self.members.insert(
            id.clone(),
            SimMember {
                client,
                instance_id: req.instance_id.clone(),
                epoch: 0,
                previous_epoch: -1,
                state: SimState::Stable,
                names: BTreeSet::new(),
                regex: None,
                rebalance_timeout: Duration::ZERO,
                last_seen: now,
                assigned: Parts::new(),
                pending_revocation: Parts::new(),
                revoke_deadline: None,
            },
        );
        Ok((id, true))
    }

    fn leave(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse, Failure> {
        let id = &req.member_id;
        let Some(m) = self.members.get_mut(id) else {
            return fail(
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("Member {id} is not a member of group {}.", self.group_id),
            );
        };
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            // Kept, with its assignment, for the next incarnation (or the session timeout).
            m.epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
            m.pending_revocation.clear();
            m.revoke_deadline = None;
        } else {
            self.remove(id, "left");
            self.bump();
        }
        Ok(ConsumerGroupHeartbeatResponse {
            member_id: Some(id.clone()),
            member_epoch: req.member_epoch,
            ..Default::default()
        })
    }

    fn remove(&mut self, id: &str, why: &'static str) {
        if let Some(m) = self.members.remove(id) {
            if let Some(i) = &m.instance_id {
                if self.statics.get(i).is_some_and(|x| x == id) {
                    self.statics.remove(i);
                }
            }
            self.targets.remove(id);
            self.removed.push((id.to_owned(), why));
        }
    }

    /// The topics `m` subscribes to that the coordinator knows.
    fn subscribed(&self, m: &SimMember) -> BTreeSet<String> {
        let pattern = m.regex.as_deref().and_then(|r| TopicPattern::new(r).ok());
        self.topics
            .keys()
            .filter(|t| m.names.contains(*t) || pattern.as_ref().is_some_and(|p| p.matches(t)))
            .cloned()
            .collect()
    }

    /// A new group epoch: recomputes the target assignment (sticky: a partition stays with
    /// its member while that member subscribes to it and is under its quota). Ties go to
    /// the lowest client, not member id (those are random), so that a run repeats.
    fn bump(&mut self) {
        self.group_epoch += 1;
        let subs: BTreeMap<String, BTreeSet<String>> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), self.subscribed(m)))
            .collect();
        let parts: Vec<(String, Uuid, i32)> = self
            .topics
            .iter()
            .filter(|(t, _)| subs.values().any(|s| s.contains(*t)))
            .flat_map(|(t, (id, n))| (0..*n).map(move |p| (t.clone(), *id, p)))
            .collect();
        let takers = subs.values().filter(|s| !s.is_empty()).count().max(1);
        let quota = parts.len().div_ceil(takers);
        let mut load: BTreeMap<&str, usize> = subs.keys().map(|k| (k.as_str(), 0)).collect();
        let mut targets: BTreeMap<String, Parts> =
            subs.keys().map(|k| (k.clone(), Parts::new())).collect();
        let mut rest = Vec::new();
        for (topic, tid, p) in &parts {
            let keep = self
                .targets
                .iter()
                .find(|(_, t)| contains(t, tid, *p))
                .map(|(m, _)| m.as_str())
                .filter(|m| subs.get(*m).is_some_and(|s| s.contains(topic)))
                .filter(|m| load[*m] < quota);
            match keep {
                Some(m) => {
                    *load.get_mut(m).expect("member") += 1;
                    targets
                        .get_mut(m)
                        .expect("member")
                        .entry(*tid)
                        .or_default()
                        .insert(*p);
                }
                None => rest.push((topic, *tid, *p)),
            }
        }
        for (topic, tid, p) in rest {
            let best = subs
                .iter()
                .filter(|(_, s)| s.contains(topic))
                .map(|(m, _)| m.as_str())
                .min_by_key(|m| (load[*m], self.members[*m].client, *m));
            if let Some(m) = best {
                *load.get_mut(m).expect("member") += 1;
                targets
                    .get_mut(m)
                    .expect("member")
                    .entry(tid)
                    .or_default()
                    .insert(p);
            }
        }
        self.targets = targets;
    }

    /// Moves member `id` towards its target (`CurrentAssignmentBuilder`); `owned` is what
    /// its heartbeat reported (None: unchanged, so still owning what awaits revocation).
    fn reconcile(&mut self, id: &str, owned: Option<&Parts>, now: Instant) {
        let target_epoch = self.group_epoch;
        let m = self.members[id].clone();
        let owns_revoked = |pending: &Parts| owned.is_none_or(|o| intersects(pending, o));
        match m.state {
            SimState::Stable if m.epoch == target_epoch => return,
            SimState::UnrevokedPartitions if owns_revoked(&m.pending_revocation) => return,
            _ => {}
        }
        let target = self.targets.get(id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<(Uuid, i32)> = self
            .members
            .iter()
            .filter(|(other, _)| other.as_str() != id)
            .flat_map(|(_, o)| o.holds())
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t, p)))
            .collect();
        let mut assigned = Parts::new();
        let mut revoking = Parts::new();
        for (t, ps) in &m.assigned {
            for p in ps {
                let to = if contains(&target, t, *p) {
                    &mut assigned
                } else {
                    &mut revoking
                };
                to.entry(*t).or_default().insert(*p);
            }
        }
        let mut adding = Parts::new();
        let mut unreleased = false;
        for (t, ps) in &target {
            for p in ps {
                if contains(&assigned, t, *p) {
                    continue;
                }
                if held_by_others.contains(&(*t, *p)) {
                    unreleased = true;
                } else {
                    adding.entry(*t).or_default().insert(*p);
                }
            }
        }
        let m = self.members.get_mut(id).expect("a member");
        if !revoking.is_empty() && owns_revoked(&revoking) {
            m.state = SimState::UnrevokedPartitions;
            m.assigned = assigned;
            m.pending_revocation = revoking;
            if m.revoke_deadline.is_none() {
                m.revoke_deadline = Some(now + m.rebalance_timeout);
            }
            return;
        }
        for (t, ps) in adding {
            assigned.entry(t).or_default().extend(ps);
        }
        m.state = if unreleased {
            SimState::UnreleasedPartitions
        } else {
            SimState::Stable
        };
        if m.epoch != target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = target_epoch;
        }
        m.assigned = assigned;
        m.pending_revocation.clear();
        m.revoke_deadline = None;
    }
}

impl SimCoordinator for SimConsumerGroup {
    fn for_broker(broker: &SimBroker) -> SimConsumerGroup {
        let topics = broker
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), (t.id, t.parts.len() as i32)))
            .collect();
        SimConsumerGroup::new("g", topics)
    }

    fn handle(&mut self, client: usize, t: &Transmit, now: Instant) {
        let body = SimConsumerGroup::handle(self, client, t, now);
        self.answers.push(Answer {
            client,
            route: t.route,
            id: t.tag.id,
            version: t.version,
            body,
        });
    }

    fn tick(&mut self, now: Instant) {
        SimConsumerGroup::tick(self, now);
    }

    fn take_answers(&mut self) -> Vec<Answer> {
        std::mem::take(&mut self.answers)
    }

    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        SimConsumerGroup::next_deadline(self, now)
    }

    fn check(&self) {
        SimConsumerGroup::check(self);
    }
}
