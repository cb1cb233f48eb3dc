//! A simulated classic group coordinator for the member's tests: it answers JoinGroup,
//! SyncGroup, Heartbeat and LeaveGroup for several members (one per simulated client) the
//! way Kafka's classic group coordinator does, within what a consumer group needs:
//!
//! - a new dynamic member gets MEMBER_ID_REQUIRED (v4+) with its id, and counts as pending
//!   until it joins with it (a rebalance waits for pending members too);
//! - a rebalance (PreparingRebalance) waits until every known member has rejoined, or the
//!   rebalance timeout, which drops the laggards; the answers are held until then;
//! - the protocol is the one every member supports that most members prefer (Kafka's vote);
//!   the leader stays the leader while it is a member, and only it gets the member list;
//! - SyncGroup waits (CompletingRebalance) for the leader's assignments;
//! - a follower rejoining a stable group with unchanged metadata gets the current
//!   generation at once; a static member rejoining with an empty member id replaces its
//!   old id (which is fenced), at once and with `skip_assignment` for a returning leader
//!   when the group is stable and its protocol stays the same;
//! - heartbeats: REBALANCE_IN_PROGRESS while preparing, ILLEGAL_GENERATION for another
//!   generation, UNKNOWN_MEMBER_ID for an unknown member, FENCED_INSTANCE_ID for a replaced
//!   static member; sessions expire after the member's session timeout without a request
//!   (a member with a held JoinGroup or SyncGroup stays alive);
//! - a foreign member ([`SimGroup::add_foreign`]) stands for a client the rig does not run
//!   (another implementation, or one sending garbage): it offers the metadata the test
//!   gives, is ready for every rebalance at once, never leads, never expires, and keeps
//!   whatever assignment the leader sends it for the test to read
//!   ([`SimGroup::assignment_of`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::link::{Route, Transmit};
use crate::protocol::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::protocol::api::join_group::{
    JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember,
};
use crate::protocol::api::leave_group::{LeaveGroupRequest, LeaveGroupResponse, MemberResponse};
use crate::protocol::api::sync_group::{SyncGroupRequest, SyncGroupResponse};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::encode_response;
use crate::protocol::message::Bytes;
use crate::sim::request;
use crate::sim::SimBroker;
use crate::types::{ApiVersion, RequestId};

use super::{Answer, SimCoordinator};

/// The classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

/// Where the answer to a request goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub client: usize,
    pub route: Route,
    pub id: RequestId,
    pub version: ApiVersion,
}

impl Held {
    pub fn of(client: usize, t: &Transmit) -> Held {
        Held {
            client,
            route: t.route,
            id: t.tag.id,
            version: t.version,
        }
    }
}

/// The encoded answer `resp` to `h`.
pub(crate) fn reply<A: Api>(h: Held, resp: &A::Response) -> Answer {
    Answer {
        client: h.client,
        route: h.route,
        id: h.id,
        version: h.version,
        body: encode_response::<A>(resp, h.version.get(), 1)[4..].to_vec(),
    }
}

#[derive(Debug)]
struct SimMember {
    instance_id: Option<String>,
    protocols: Vec<(String, Vec<u8>)>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    last_seen: Instant,
    join: Option<Held>,
    sync: Option<Held>,
    assignment: Vec<u8>,
    /// A member of a client the rig does not run (see [`SimGroup::add_foreign`]).
    foreign: bool,
}

impl SimMember {
    fn alive_until(&self) -> Option<Instant> {
        (!self.foreign && self.join.is_none() && self.sync.is_none())
            .then(|| self.last_seen + self.session_timeout)
    }

    /// Whether the member has rejoined the rebalance under way.
    fn rejoined(&self) -> bool {
        self.foreign || self.join.is_some()
    }
}

/// One completed rebalance: generation, leader, protocol, members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Completed {
    pub generation: i32,
    pub leader: String,
    pub protocol: String,
    pub members: Vec<String>,
}

/// The simulated coordinator of one classic consumer group.
#[derive(Debug)]
pub(crate) struct SimGroup {
    pub state: GroupState,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    members: BTreeMap<String, SimMember>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they expire.
    pending: BTreeMap<String, Instant>,
    /// Static members: instance id to member id.
    statics: BTreeMap<String, String>,
    rebalance_deadline: Option<Instant>,
    sync_deadline: Option<Instant>,
    next_member: u64,
    replies: Vec<Answer>,
    /// Every completed rebalance.
    pub completed: Vec<Completed>,
}

impl SimGroup {
    /// An empty group.
    pub fn new() -> SimGroup {
        SimGroup {
            state: GroupState::Empty,
            generation: 0,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            statics: BTreeMap::new(),
            rebalance_deadline: None,
            sync_deadline: None,
            next_member: 1,
            replies: Vec::new(),
            completed: Vec::new(),
        }
    }

    /// The member ids, sorted.
    pub fn member_ids(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// Answers ready to go out.
    pub fn take_replies(&mut self) -> Vec<Answer> {
        std::mem::take(&mut self.replies)
    }

    /// Adds member `id` of a client the rig does not run, offering `protocols` (name and
    /// metadata, as a JoinGroup would): a rebalance begins, and it is ready for this one
    /// and every later one at once.
    pub fn add_foreign(&mut self, id: &str, protocols: Vec<(String, Vec<u8>)>, now: Instant) {
        let m = SimMember {
            instance_id: None,
            protocols,
            session_timeout: Duration::from_secs(45),
            rebalance_timeout: Duration::from_secs(300),
            last_seen: now,
            join: None,
            sync: None,
            assignment: Vec::new(),
            foreign: true,
        };
        self.members.insert(id.to_owned(), m);
        self.prepare_rebalance(now);
        self.check_join_complete(now);
    }

    /// The assignment the leader sent member `id` in the current generation (empty if
    /// none); `None` if it is not a member.
    pub fn assignment_of(&self, id: &str) -> Option<&[u8]> {
        self.members.get(id).map(|m| m.assignment.as_slice())
    }

    /// Client `client`'s links closed: its held requests will never be answered.
    pub fn disconnect(&mut self, client: usize) {
        for m in self.members.values_mut() {
            if m.join.is_some_and(|h| h.client == client) {
                m.join = None;
            }
            if m.sync.is_some_and(|h| h.client == client) {
                m.sync = None;
            }
        }
    }

    /// Handles request `t` of client `client`.
    pub fn handle(&mut self, client: usize, t: &Transmit, now: Instant) {
        let h = Held::of(client, t);
        match t.api_key {
            JoinGroupRequest::KEY => self.join(h, request::<JoinGroupRequest>(t), now),
            SyncGroupRequest::KEY => self.sync(h, request::<SyncGroupRequest>(t), now),
            HeartbeatRequest::KEY => self.heartbeat(h, request::<HeartbeatRequest>(t), now),
            LeaveGroupRequest::KEY => self.leave(h, request::<LeaveGroupRequest>(t), now),
            k => panic!("the simulated group coordinator does not speak api {k}"),
        }
    }

    /// Expires sessions, pending member ids and rebalance deadlines.
    pub fn tick(&mut self, now: Instant) {
        self.pending.retain(|_, until| *until > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.alive_until().is_some_and(|t| t <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        if !expired.is_empty() {
            self.prepare_rebalance(now);
        }
        match self.state {
            GroupState::PreparingRebalance if self.rebalance_deadline.is_some_and(|t| t <= now) => {
                self.complete_join(now)
            }
            GroupState::PreparingRebalance => self.check_join_complete(now),
            GroupState::CompletingRebalance if self.sync_deadline.is_some_and(|t| t <= now) => {
                let laggards: Vec<String> = self
                    .members
                    .iter()
                    .filter(|(_, m)| m.sync.is_none() && !m.foreign)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in &laggards {
                    self.remove(id);
                }
                self.prepare_rebalance(now);
                self.check_join_complete(now);
            }
            _ => {}
        }
    }

    /// The next instant `tick` has something to do.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        self.members
            .values()
            .filter_map(SimMember::alive_until)
            .chain(self.pending.values().copied())
            .chain(self.rebalance_deadline)
            .chain(self.sync_deadline)
            .filter(|t| *t > now)
            .min()
    }

    fn new_id(&mut self, client: usize, instance: Option<&str>) -> String {
        let n = self.next_member;
        self.next_member += 1;
        match instance {
            Some(i) => format!("{i}-{n:03}"),
            None => format!("c{client}-{n:03}"),
        }
    }

    fn remove(&mut self, id: &str) -> bool {
        let Some(m) = self.members.remove(id) else {
            return false;
        };
        if let Some(i) = &m.instance_id {
            if self.statics.get(i).is_some_and(|x| x == id) {
                self.statics.remove(i);
            }
        }
        true
    }

    fn join_error(h: Held, code: ErrorCode, member_id: &str) -> Answer {
        let resp = JoinGroupResponse {
            error_code: code.code(),
            generation_id: -1,
            member_id: member_id.to_owned(),
            ..Default::default()
        };
        reply::<JoinGroupRequest>(h, &resp)
    }

    fn join(&mut self, h: Held, req: JoinGroupRequest, now: Instant) {
        let protocols: Vec<(String, Vec<u8>)> = req
            .protocols
            .iter()
            .map(|p| (p.name.clone(), p.metadata.0.clone()))
            .collect();
        if req.protocol_type != "consumer" || protocols.is_empty() {
            let r = Self::join_error(h, ErrorCode::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
            self.replies.push(r);
            return;
        }
        let compatible = self
            .members
            .iter()
            .filter(|(id, _)| **id != req.member_id)
            .all(|(_, m)| {
                m.protocols
                    .iter()
                    .any(|(n, _)| protocols.iter().any(|(p, _)| p == n))
            })
            && self.common_protocols(Some(&protocols)).is_some();
        if !compatible {
            let r = Self::join_error(h, ErrorCode::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
            self.replies.push(r);
            return;
        }
        let session_timeout = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
        let rebalance_timeout = if req.rebalance_timeout_ms < 0 {
            session_timeout
        } else {
            Duration::from_millis(req.rebalance_timeout_ms as u64)
        };
        let fresh = |join: Option<Held>| SimMember {
            instance_id: req.group_instance_id.clone(),
            protocols: protocols.clone(),
            session_timeout,
            rebalance_timeout,
            last_seen: now,
            join,
            sync: None,
            assignment: Vec::new(),
            foreign: false,
        };
        // Static members.
        if let Some(inst) = req.group_instance_id.clone() {
            match self.statics.get(&inst).cloned() {
                Some(old) if req.member_id.is_empty() => {
                    let new_id = self.new_id(h.client, Some(&inst));
                    let mut m = self.members.remove(&old).expect("static member");
                    if let Some(held) = m.join.take() {
                        let r = Self::join_error(held, ErrorCode::FENCED_INSTANCE_ID, &old);
                        self.replies.push(r);
                    }
                    if let Some(held) = m.sync.take() {
                        let r = Self::sync_error(held, ErrorCode::FENCED_INSTANCE_ID);
                        self.replies.push(r);
                    }
                    let was_leader = self.leader.as_deref() == Some(old.as_str());
                    if was_leader {
                        self.leader = Some(new_id.clone());
                    }
                    m.protocols = protocols.clone();
                    m.last_seen = now;
                    m.session_timeout = session_timeout;
                    m.rebalance_timeout = rebalance_timeout;
                    self.statics.insert(inst, new_id.clone());
                    self.members.insert(new_id.clone(), m);
                    // Kafka: a stable group whose protocol stays the same hands the
                    // returning static member its place at once.
                    let same_protocol = self.protocol.as_ref() == Some(&self.select_protocol());
                    if self.state == GroupState::Stable && same_protocol {
                        let resp = self.join_answer(&new_id, was_leader, was_leader);
                        self.replies.push(reply::<JoinGroupRequest>(h, &resp));
                        return;
                    }
                    self.members.get_mut(&new_id).expect("inserted").join = Some(h);
                    self.prepare_rebalance(now);
                    self.check_join_complete(now);
                    return;
                }
                Some(old) if old != req.member_id => {
                    self.replies.push(Self::join_error(
                        h,
                        ErrorCode::FENCED_INSTANCE_ID,
                        &req.member_id,
                    ));
                    return;
                }
                Some(_) => {}
                None if req.member_id.is_empty() => {
                    let new_id = self.new_id(h.client, Some(&inst));
                    self.statics.insert(inst, new_id.clone());
                    self.members.insert(new_id, fresh(Some(h)));
                    self.prepare_rebalance(now);
                    self.check_join_complete(now);
                    return;
                }
                None => {}
            }
        }
        if req.member_id.is_empty() {
            let new_id = self.new_id(h.client, None);
            if h.version >= ApiVersion(4) {
                self.pending.insert(new_id.clone(), now + session_timeout);
                self.replies
                    .push(Self::join_error(h, ErrorCode::MEMBER_ID_REQUIRED, &new_id));
            } else {
                self.members.insert(new_id, fresh(Some(h)));
                self.prepare_rebalance(now);
                self.check_join_complete(now);
            }
            return;
        }
        let id = req.member_id.clone();
        if self.pending.remove(&id).is_some() {
            self.members.insert(id, fresh(Some(h)));
            self.prepare_rebalance(now);
            self.check_join_complete(now);
            return;
        }
        let leader = self.leader.clone();
        let state = self.state;
        let Some(m) = self.members.get_mut(&id) else {
            self.replies
                .push(Self::join_error(h, ErrorCode::UNKNOWN_MEMBER_ID, &id));
            return;
        };
        let changed = m.protocols != protocols;
        m.protocols = protocols;
        m.last_seen = now;
        m.session_timeout = session_timeout;
        m.rebalance_timeout = rebalance_timeout;
        if state == GroupState::Stable && !changed && leader.as_deref() != Some(id.as_str()) {
            let resp = self.join_answer(&id, false, false);
            self.replies.push(reply::<JoinGroupRequest>(h, &resp));
            return;
        }
        m.join = Some(h);
        self.prepare_rebalance(now);
        self.check_join_complete(now);
    }

    /// A JoinGroup answer for `id` in the current generation.
    fn join_answer(&self, id: &str, with_members: bool, skip: bool) -> JoinGroupResponse {
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if with_members {
            self.members
                .iter()
                .map(|(mid, m)| JoinGroupResponseMember {
                    member_id: mid.clone(),
                    group_instance_id: m.instance_id.clone(),
                    metadata: Bytes(
                        m.protocols
                            .iter()
                            .find(|(n, _)| *n == protocol)
                            .map(|(_, b)| b.clone())
                            .unwrap_or_default(),
                    ),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinGroupResponse {
            throttle_time_ms: 0,
            error_code: 0,
            generation_id: self.generation,
            protocol_type: Some("consumer".to_owned()),
            protocol_name: Some(protocol),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment: skip,
            member_id: id.to_owned(),
            members,
        }
    }

    /// The protocols every member (and `extra`, a joining member's) supports, in the
    /// first member's order of preference.
    fn common_protocols(&self, extra: Option<&[(String, Vec<u8>)]>) -> Option<Vec<String>> {
        let lists: Vec<Vec<&str>> = self
            .members
            .values()
            .map(|m| m.protocols.iter().map(|(n, _)| n.as_str()).collect())
            .chain(extra.map(|e| e.iter().map(|(n, _)| n.as_str()).collect()))
            .collect();
        let first = lists.first()?;
        let common: Vec<String> = first
            .iter()
            .filter(|n| lists.iter().all(|l| l.contains(n)))
            .map(|n| (*n).to_owned())
            .collect();
        (!common.is_empty()).then_some(common)
    }

    /// Kafka's vote: each member votes for its most preferred common protocol.
    fn select_protocol(&self) -> String {
        let common = self
            .common_protocols(None)
            .expect("members agree on a protocol");
        let mut votes: Vec<(usize, &String)> = common.iter().map(|c| (0, c)).collect();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| common.contains(n)) {
                if let Some(v) = votes.iter_mut().find(|(_, c)| *c == n) {
                    v.0 += 1;
                }
            }
        }
        let best = votes.iter().map(|(v, _)| *v).max().unwrap_or(0);
        votes
            .into_iter()
            .find(|(v, _)| *v == best)
            .map(|(_, c)| c.clone())
            .expect("a protocol")
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            let held: Vec<Held> = self
                .members
                .values_mut()
                .filter_map(|m| m.sync.take())
                .collect();
            for h in held {
                let resp = SyncGroupResponse {
                    error_code: ErrorCode::REBALANCE_IN_PROGRESS.code(),
                    ..Default::default()
                };
                self.replies.push(reply::<SyncGroupRequest>(h, &resp));
            }
        }
        self.sync_deadline = None;
        if self.state != GroupState::PreparingRebalance {
            self.state = GroupState::PreparingRebalance;
            let timeout = self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or(Duration::ZERO);
            self.rebalance_deadline = Some(now + timeout);
        }
    }

    fn check_join_complete(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance
            && self.pending.is_empty()
            && self.members.values().all(SimMember::rejoined)
        {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Instant) {
        let laggards: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.rejoined())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &laggards {
            self.remove(id);
        }
        self.rebalance_deadline = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.protocol = None;
            return;
        }
        self.protocol = Some(self.select_protocol());
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            // A foreign member never leads: the tests are about ours leading.
            self.leader = self
                .members
                .iter()
                .find(|(_, m)| !m.foreign)
                .or_else(|| self.members.iter().next())
                .map(|(id, _)| id.clone());
        }
        let leader = self.leader.clone().expect("a leader");
        self.state = GroupState::CompletingRebalance;
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO);
        self.sync_deadline = Some(now + timeout);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in &ids {
            let resp = self.join_answer(id, *id == leader, false);
            let m = self.members.get_mut(id).expect("member");
            m.last_seen = now;
            m.assignment.clear();
            if m.foreign {
                continue;
            }
            let h = m.join.take().expect("joined");
            self.replies.push(reply::<JoinGroupRequest>(h, &resp));
        }
        self.completed.push(Completed {
            generation: self.generation,
            leader,
            protocol: self.protocol.clone().unwrap_or_default(),
            members: ids,
        });
    }

    fn sync_error(h: Held, code: ErrorCode) -> Answer {
        let resp = SyncGroupResponse {
            error_code: code.code(),
            ..Default::default()
        };
        reply::<SyncGroupRequest>(h, &resp)
    }

    fn sync(&mut self, h: Held, req: SyncGroupRequest, now: Instant) {
        let id = req.member_id.clone();
        if !self.members.contains_key(&id) {
            self.replies
                .push(Self::sync_error(h, ErrorCode::UNKNOWN_MEMBER_ID));
            return;
        }
        if req.generation_id != self.generation {
            self.replies
                .push(Self::sync_error(h, ErrorCode::ILLEGAL_GENERATION));
            return;
        }
        if h.version >= ApiVersion(5)
            && (req.protocol_type.as_deref() != Some("consumer")
                || req.protocol_name != self.protocol)
        {
            self.replies
                .push(Self::sync_error(h, ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
            return;
        }
        match self.state {
            GroupState::Empty => self
                .replies
                .push(Self::sync_error(h, ErrorCode::UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => self
                .replies
                .push(Self::sync_error(h, ErrorCode::REBALANCE_IN_PROGRESS)),
            GroupState::CompletingRebalance => {
                let m = self.members.get_mut(&id).expect("checked");
                m.sync = Some(h);
                m.last_seen = now;
                if self.leader.as_deref() == Some(id.as_str()) {
                    for m in self.members.values_mut() {
                        m.assignment.clear();
                    }
                    for a in &req.assignments {
                        if let Some(m) = self.members.get_mut(&a.member_id) {
                            m.assignment = a.assignment.0.clone();
                        }
                    }
                    self.state = GroupState::Stable;
                    self.sync_deadline = None;
                    let ids: Vec<String> = self.members.keys().cloned().collect();
                    for mid in ids {
                        let m = self.members.get_mut(&mid).expect("member");
                        if let Some(h) = m.sync.take() {
                            let resp = self.sync_answer(&mid);
                            self.replies.push(reply::<SyncGroupRequest>(h, &resp));
                        }
                    }
                }
            }
            GroupState::Stable => {
                self.members.get_mut(&id).expect("checked").last_seen = now;
                let resp = self.sync_answer(&id);
                self.replies.push(reply::<SyncGroupRequest>(h, &resp));
            }
        }
    }

    fn sync_answer(&self, id: &str) -> SyncGroupResponse {
        SyncGroupResponse {
            throttle_time_ms: 0,
            error_code: 0,
            protocol_type: Some("consumer".to_owned()),
            protocol_name: self.protocol.clone(),
            assignment: Bytes(self.members[id].assignment.clone()),
        }
    }

    fn heartbeat(&mut self, h: Held, req: HeartbeatRequest, now: Instant) {
        let code = if req
            .group_instance_id
            .as_ref()
            .and_then(|i| self.statics.get(i))
            .is_some_and(|current| *current != req.member_id)
        {
            ErrorCode::FENCED_INSTANCE_ID
        } else if let Some(m) = self.members.get_mut(&req.member_id) {
            m.last_seen = now;
            match self.state {
                GroupState::Empty => ErrorCode::UNKNOWN_MEMBER_ID,
                GroupState::PreparingRebalance => ErrorCode::REBALANCE_IN_PROGRESS,
                _ if req.generation_id != self.generation => ErrorCode::ILLEGAL_GENERATION,
                _ => ErrorCode::None,
            }
        } else {
            ErrorCode::UNKNOWN_MEMBER_ID
        };
        let resp = HeartbeatResponse {
            throttle_time_ms: 0,
            error_code: code.code(),
        };
        self.replies.push(reply::<HeartbeatRequest>(h, &resp));
    }

    fn leave(&mut self, h: Held, req: LeaveGroupRequest, now: Instant) {
        let leaving: Vec<(String, Option<String>)> = if h.version >= ApiVersion(3) {
            req.members
                .iter()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
                .collect()
        } else {
            vec![(req.member_id.clone(), None)]
        };
        let mut answers = Vec::new();
        let mut removed = false;
        for (id, inst) in leaving {
            let id = match (&inst, id.is_empty()) {
                (Some(i), true) => self.statics.get(i).cloned().unwrap_or_default(),
                _ => id,
            };
            let code = if self.remove(&id) {
                removed = true;
                ErrorCode::None
            } else {
                ErrorCode::UNKNOWN_MEMBER_ID
            };
            answers.push(MemberResponse {
                member_id: id,
                group_instance_id: inst,
                error_code: code.code(),
            });
        }
        if removed {
            self.prepare_rebalance(now);
            self.check_join_complete(now);
        }
        let top = if h.version < ApiVersion(3) {
            answers.first().map_or(0, |a| a.error_code)
        } else {
            0
        };
        let resp = LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: top,
            members: answers,
        };
        self.replies.push(reply::<LeaveGroupRequest>(h, &resp));
    }
}

impl SimCoordinator for SimGroup {
    fn for_broker(_: &SimBroker) -> SimGroup {
        SimGroup::new()
    }

    fn handle(&mut self, client: usize, t: &Transmit, now: Instant) {
        SimGroup::handle(self, client, t, now);
    }

    fn tick(&mut self, now: Instant) {
        SimGroup::tick(self, now);
    }

    fn take_answers(&mut self) -> Vec<Answer> {
        self.take_replies()
    }

    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        SimGroup::next_deadline(self, now)
    }

    fn disconnect(&mut self, client: usize) {
        SimGroup::disconnect(self, client);
    }
}
