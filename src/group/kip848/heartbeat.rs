//! The KIP-848 member's heartbeats (Java's `ConsumerHeartbeatRequestManager`): when they
//! go, what a full or a partial one carries, and what their answers mean.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::reconcile::{sanitize, to_wire, ById};
use super::{Kip848Member, State};
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::group::member::{member_transmit, millis, Subscription};
use crate::link::{Lane, Links, Route, Transmit};
use crate::protocol::api::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use crate::protocol::error_code::ErrorCode;
use crate::types::{MemberEpoch, MemberId};

/// How often UNRELEASED_INSTANCE_ID is retried before it is fatal: right after a static
/// member's restart the broker may still hold the old incarnation for a moment.
const UNRELEASED_INSTANCE_RETRIES: u32 = 3;

/// What the last heartbeats carried: a field equal to it is sent as null (unchanged).
/// Cleared after every error and lost answer, so the next heartbeat is full.
#[derive(Debug, Default)]
pub(super) struct SentFields {
    pub rebalance_timeout: bool,
    pub rack: bool,
    pub topic_names: Option<Vec<String>>,
    pub topic_regex: Option<String>,
    pub assignor: bool,
    /// The owned partitions reported, and the version of the assignment they came from
    /// (a new version with the same partitions is reported again).
    pub owned: Option<(u64, ById)>,
}

/// The regular heartbeat in flight.
#[derive(Debug)]
pub(super) struct HeartbeatSent {
    pub id: u64,
    pub route: Route,
    pub version: i16,
    /// `joins` when it was sent.
    pub joins: u64,
    /// The epoch it carried.
    pub epoch: MemberEpoch,
}

impl Kip848Member {
    /// Whether the state sends regular heartbeats.
    pub(super) fn heartbeats_allowed(&self) -> bool {
        matches!(
            self.state,
            State::Joining | State::Reconciling | State::Acknowledging | State::Stable
        )
    }

    /// Whether the member is in the group or joining it (the poll interval applies).
    pub(super) fn in_group(&self) -> bool {
        self.heartbeats_allowed()
    }

    pub(super) fn poll_heartbeat(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) -> Option<Transmit> {
        if !self.heartbeats_allowed() || self.heartbeat.is_some() {
            return None;
        }
        if self.heartbeat_due.is_none_or(|t| now < t) {
            return None;
        }
        let node = coordinator.node()?;
        let route = Route::node(node, Lane::Group);
        let versions = links.ready(route, now)?;
        let Some(v) = versions.pick::<ConsumerGroupHeartbeatRequest>() else {
            let msg = format!(
                "group {}: the broker does not offer ConsumerGroupHeartbeat, so it does not \
                 support group.protocol=consumer (KIP-848 needs Kafka 4.0 or later with the \
                 consumer rebalance protocol enabled); use group.protocol=classic",
                self.core.group()
            );
            self.fatal(Error::unsupported(msg));
            return None;
        };
        if v == 0 && matches!(self.subscription, Some(Subscription::Pattern(_))) {
            let msg = format!(
                "group {}: the cluster does not support regular expressions resolution on \
                 ConsumerGroupHeartbeat API version 0 (it needs Kafka 4.0 or later); subscribe \
                 to topic names, or use group.protocol=classic",
                self.core.group()
            );
            self.fatal(Error::unsupported(msg));
            return None;
        }
        let req = self.heartbeat_request(v);
        let id = self.core.take_id();
        log::debug!(
            "group {} member {} epoch {}: heartbeat{}{}",
            self.core.group(),
            req.member_id,
            req.member_epoch,
            if req.rebalance_timeout_ms >= 0 {
                " (full)"
            } else {
                ""
            },
            if req.topic_partitions.is_some() {
                " with owned partitions"
            } else {
                ""
            },
        );
        self.heartbeat = Some(HeartbeatSent {
            id,
            route,
            version: v,
            joins: self.joins,
            epoch: self.epoch,
        });
        // Until the answer brings the interval (or an error a backoff).
        self.heartbeat_due = None;
        if self.state == State::Acknowledging {
            let to = if self.target_reached() {
                State::Stable
            } else {
                State::Reconciling
            };
            self.transition(to, "acknowledgement sent");
        }
        Some(member_transmit(
            route,
            &req,
            v,
            id,
            self.core.request_timeout(),
        ))
    }

    /// The heartbeat to send now at version `v`; records what it carries.
    fn heartbeat_request(&mut self, v: i16) -> ConsumerGroupHeartbeatRequest {
        let joining = self.state == State::Joining;
        let member_id = if v == 0 && !self.assigned_id {
            String::new()
        } else {
            self.member_id.as_str().to_owned()
        };
        let mut req = ConsumerGroupHeartbeatRequest {
            group_id: self.core.group_id().to_owned(),
            member_id,
            member_epoch: self.epoch.0,
            instance_id: self.cfg.instance_id.clone(),
            rack_id: None,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            subscribed_topic_regex: None,
            server_assignor: None,
            topic_partitions: None,
        };
        if joining || !self.sent.rebalance_timeout {
            req.rebalance_timeout_ms = millis(self.cfg.max_poll_interval);
            self.sent.rebalance_timeout = true;
        }
        if let Some(rack) = &self.cfg.client_rack {
            if joining || !self.sent.rack {
                req.rack_id = Some(rack.clone());
                self.sent.rack = true;
            }
        }
        let full = joining || req.rebalance_timeout_ms >= 0;
        let (names, regex): (Vec<String>, Option<String>) = match &self.subscription {
            Some(Subscription::Topics(t)) => (t.iter().cloned().collect(), None),
            Some(Subscription::Pattern(p)) => (Vec::new(), Some(p.source().to_owned())),
            None => (Vec::new(), None),
        };
        if full || self.sent.topic_names.as_ref() != Some(&names) {
            req.subscribed_topic_names = Some(names.clone());
            self.sent.topic_names = Some(names);
        }
        if v >= 1 {
            match regex {
                Some(r) if full || self.sent.topic_regex.as_ref() != Some(&r) => {
                    req.subscribed_topic_regex = Some(r.clone());
                    self.sent.topic_regex = Some(r);
                }
                None if self
                    .sent
                    .topic_regex
                    .as_ref()
                    .is_some_and(|r| !r.is_empty()) =>
                {
                    // From a pattern back to names: "" removes the regex.
                    req.subscribed_topic_regex = Some(String::new());
                    self.sent.topic_regex = Some(String::new());
                }
                _ => {}
            }
        }
        if let Some(a) = &self.cfg.remote_assignor {
            if full || !self.sent.assignor {
                req.server_assignor = Some(a.clone());
                self.sent.assignor = true;
            }
        }
        if joining {
            req.topic_partitions = Some(Vec::new());
            self.sent.owned = Some((self.owned_version, ById::new()));
        } else {
            // What a running reconciliation adds counts as owned already: a report without
            // it (a full heartbeat after an error, say) would let the coordinator take a
            // partition it moved meanwhile as revoked, and hand it over while the Assigned
            // callback takes it here.
            let mut reported = self.owned.clone();
            if let Some(r) = &self.reconciliation {
                for (id, parts) in &r.target {
                    reported.entry(*id).or_default().extend(parts);
                }
            }
            let now_owned = (self.owned_version, reported);
            if full || self.sent.owned.as_ref() != Some(&now_owned) {
                req.topic_partitions = Some(to_wire(&now_owned.1));
                self.sent.owned = Some(now_owned);
            }
        }
        req
    }

    pub(super) fn on_heartbeat(
        &mut self,
        sent: &HeartbeatSent,
        resp: ConsumerGroupHeartbeatResponse,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        if sent.joins != self.joins || !self.heartbeats_allowed() {
            log::debug!(
                "group {}: dropping the answer to a heartbeat from before a rejoin or leave",
                self.core.group()
            );
            return;
        }
        let code = ErrorCode::from_code(resp.error_code);
        if code.is_err() {
            self.heartbeat_error(code, resp.error_message.as_deref(), now, coordinator);
            return;
        }
        self.retry.succeeded();
        self.core.recovered();
        self.unreleased_retries = 0;
        self.join_fencings = 0;
        if resp.heartbeat_interval_ms > 0 {
            self.interval =
                Duration::from_millis(u64::from(resp.heartbeat_interval_ms.unsigned_abs()));
        }
        if sent.version == 0 {
            if let Some(id) = resp.member_id.as_deref().filter(|id| !id.is_empty()) {
                if self.member_id != id || !self.assigned_id {
                    self.member_id = MemberId::new(id);
                    self.assigned_id = true;
                }
            }
        }
        if resp.member_epoch < 0 {
            log::warn!(
                "group {}: ignoring a heartbeat answer with epoch {} (no leave was sent)",
                self.core.group(),
                resp.member_epoch
            );
            self.heartbeat_due = Some(now + self.interval);
            return;
        }
        if resp.member_epoch != self.epoch.0 {
            log::info!(
                "group {} member {}: epoch {} -> {} (heartbeat sent with {})",
                self.core.group(),
                self.member_id,
                self.epoch,
                resp.member_epoch,
                sent.epoch
            );
            self.epoch = MemberEpoch(resp.member_epoch);
        }
        self.update_identity();
        if let Some(a) = resp.assignment {
            let target = sanitize(&a.topic_partitions);
            if self.target.as_ref() != Some(&target) {
                self.target_version += 1;
                log::info!(
                    "group {} member {} epoch {}: new target assignment (version {}): {} \
                     partitions",
                    self.core.group(),
                    self.member_id,
                    self.epoch,
                    self.target_version,
                    target.values().map(BTreeSet::len).sum::<usize>()
                );
                self.target = Some(target);
            }
        }
        match self.state {
            State::Joining if self.epoch.in_group() => {
                if self.target_reached() {
                    self.transition(State::Stable, "joined");
                } else {
                    self.transition(State::Reconciling, "joined with a target to reconcile");
                }
            }
            State::Stable if !self.target_reached() => {
                self.transition(State::Reconciling, "new target assignment");
            }
            _ => {}
        }
        // An acknowledgement waits for no interval.
        self.heartbeat_due = Some(if self.state == State::Acknowledging {
            now
        } else {
            now + self.interval
        });
    }

    fn heartbeat_error(
        &mut self,
        code: ErrorCode,
        message: Option<&str>,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        let detail = message.map(|m| format!(": {m}")).unwrap_or_default();
        match code {
            ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => {
                self.fenced(&format!("{code}{detail}"), now);
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                coordinator.mark_unknown(&format!("ConsumerGroupHeartbeat: {code}"), now);
                self.heartbeat_failed(now);
            }
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS => self.heartbeat_failed(now),
            ErrorCode::UNRELEASED_INSTANCE_ID
                if self.unreleased_retries < UNRELEASED_INSTANCE_RETRIES =>
            {
                self.unreleased_retries += 1;
                log::warn!(
                    "group {}: group.instance.id {} is still held by an older member \
                     ({code}{detail}); retry {} of {UNRELEASED_INSTANCE_RETRIES}",
                    self.core.group(),
                    self.cfg.instance_id.as_deref().unwrap_or(""),
                    self.unreleased_retries
                );
                self.heartbeat_failed(now);
            }
            ErrorCode::TOPIC_AUTHORIZATION_FAILED => {
                let msg = format!(
                    "group {}: not authorized to describe some subscribed topics{detail}; the \
                     member keeps heartbeating and retries",
                    self.core.group()
                );
                self.core
                    .report(format!("{code}"), Error::broker(code, msg));
                self.heartbeat_failed(now);
            }
            c if c.is_retriable() => self.heartbeat_failed(now),
            c => {
                let msg = self.fatal_message(c, &detail);
                self.fatal(Error::broker(c, msg));
            }
        }
    }

    /// The heartbeat failed: the next one is full and goes after a backoff, which grows
    /// while the failures go on (also when the coordinator keeps moving or stays
    /// unavailable: resetting it there retried every `retry.backoff.ms` for as long).
    pub(super) fn heartbeat_failed(&mut self, now: Instant) {
        self.sent = SentFields::default();
        let d = self
            .retry
            .failed(&self.cfg.retry_backoff, &mut *self.jitter);
        self.heartbeat_due = Some(now + d);
    }

    /// The message of a fatal heartbeat error: names the group and what to change.
    fn fatal_message(&self, code: ErrorCode, detail: &str) -> String {
        let g = self.core.group();
        match code {
            ErrorCode::UNSUPPORTED_VERSION => format!(
                "group {g}: the broker refused ConsumerGroupHeartbeat{detail}: the \
                 cluster does not support group.protocol=consumer (KIP-848 needs Kafka 4.0 or \
                 later with the consumer rebalance protocol enabled: \
                 group.coordinator.rebalance.protocols includes consumer, feature \
                 group.version >= 1); use group.protocol=classic"
            ),
            ErrorCode::GROUP_AUTHORIZATION_FAILED => format!(
                "group {g}: not authorized to access the group (group.id={g}; check the ACLs of \
                 the consumer's principal){detail}"
            ),
            ErrorCode::UNSUPPORTED_ASSIGNOR => format!(
                "group {g}: the broker does not support group.remote.assignor={}{detail}",
                self.cfg.remote_assignor.as_deref().unwrap_or("(unset)")
            ),
            ErrorCode::INVALID_REGULAR_EXPRESSION => format!(
                "group {g}: the broker rejected the subscription's regular expression{}{detail} \
                 (it is matched server-side with RE2/J syntax against whole topic names)",
                match &self.subscription {
                    Some(Subscription::Pattern(p)) => format!(" {:?}", p.source()),
                    _ => String::new(),
                }
            ),
            ErrorCode::GROUP_MAX_SIZE_REACHED => format!(
                "group {g}: the group already has the maximum number of members the broker \
                 allows (group.consumer.max.size){detail}"
            ),
            ErrorCode::FENCED_INSTANCE_ID | ErrorCode::UNRELEASED_INSTANCE_ID => format!(
                "group {g}: another member uses group.instance.id={}{detail}: every \
                 consumer needs its own group.instance.id",
                self.cfg.instance_id.as_deref().unwrap_or("")
            ),
            ErrorCode::GROUP_ID_NOT_FOUND => format!(
                "group {g}: the broker cannot run this group with the consumer \
                 protocol{detail}: it is most likely a classic group that cannot be converted \
                 (group.consumer.migration.policy, a custom assignor, or another protocol type)"
            ),
            ErrorCode::INVALID_REQUEST => {
                format!("group {g}: the broker rejected the heartbeat as malformed{detail}")
            }
            c => format!(
                "group {g}: ConsumerGroupHeartbeat failed with {}{detail}",
                c.name()
            ),
        }
    }
}
