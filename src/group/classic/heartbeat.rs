//! The classic member's heartbeats (Java's `AbstractCoordinator.HeartbeatThread`): every
//! `heartbeat.interval.ms` on the group lane while the member has a valid generation and no
//! JoinGroup is in flight, and what their answers mean for the generation.

use super::{ClassicMember, Instant, State};
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::group::member::{member_transmit, MemberState};
use crate::link::{Lane, Links, Route, Transmit};
use crate::protocol::api::heartbeat::HeartbeatRequest;
use crate::protocol::error_code::ErrorCode;
use crate::types::{GenerationId, MemberId, RequestId};

/// A heartbeat in flight, and who it spoke for.
#[derive(Debug)]
pub(super) struct HeartbeatSent {
    pub id: RequestId,
    pub route: Route,
    pub generation: GenerationId,
    pub member_id: MemberId,
}

impl ClassicMember {
    /// Whether heartbeats keep the session: a valid generation, no JoinGroup in flight.
    pub(super) fn heartbeats_allowed(&self) -> bool {
        self.generation.is_known()
            && !self.member_id.is_empty()
            && matches!(
                self.state,
                State::NeedJoin
                    | State::AwaitCallback { .. }
                    | State::AwaitMetadata { .. }
                    | State::AwaitSync(_)
                    | State::Stable
            )
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
        let (route, v) = self.link::<HeartbeatRequest>(now, links, coordinator, Lane::Group)?;
        let req = HeartbeatRequest {
            group_id: self.core.group_id().to_owned(),
            generation_id: self.generation.0,
            member_id: self.member_id.as_str().to_owned(),
            group_instance_id: self.cfg.instance_id.clone(),
        };
        let id = self.core.take_id();
        self.heartbeat = Some(HeartbeatSent {
            id,
            route,
            generation: self.generation,
            member_id: self.member_id.clone(),
        });
        self.heartbeat_due = Some(now + self.cfg.heartbeat_interval);
        Some(member_transmit(
            route,
            &req,
            v,
            id,
            self.cfg.request_timeout,
        ))
    }

    pub(super) fn on_heartbeat(
        &mut self,
        sent: &HeartbeatSent,
        code: i16,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        let code = ErrorCode::from_code(code);
        let stale = sent.generation != self.generation || sent.member_id != self.member_id;
        if stale && code.is_err() {
            log::debug!(
                "group {}: ignoring {code} for the heartbeat of generation {} (now {})",
                self.core.group(),
                sent.generation,
                self.generation
            );
            return;
        }
        match code {
            ErrorCode::None => {
                if !stale {
                    self.session_alive = Some(now);
                    self.heartbeat_retry.succeeded();
                }
            }
            ErrorCode::REBALANCE_IN_PROGRESS => {
                self.session_alive = Some(now);
                self.heartbeat_retry.succeeded();
                match self.state {
                    State::Stable | State::AwaitCallback { .. } | State::NeedJoin => {
                        self.request_rejoin("group is already rebalancing");
                    }
                    _ => log::debug!(
                        "group {}: ignoring REBALANCE_IN_PROGRESS while {:?}",
                        self.core.group(),
                        self.state.kind()
                    ),
                }
            }
            ErrorCode::ILLEGAL_GENERATION => {
                self.reset("Heartbeat: ILLEGAL_GENERATION", false);
            }
            ErrorCode::UNKNOWN_MEMBER_ID => {
                self.reset("Heartbeat: UNKNOWN_MEMBER_ID", true);
            }
            ErrorCode::FENCED_INSTANCE_ID | ErrorCode::GROUP_AUTHORIZATION_FAILED => {
                let msg = self.fatal_message("Heartbeat", code);
                self.fatal(Error::broker(code, msg));
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                coordinator.mark_unknown(&format!("Heartbeat: {code}"), now);
                self.heartbeat_failed(now);
            }
            c => {
                if !c.is_retriable() {
                    let msg = format!("group {}: Heartbeat failed", self.core.group());
                    self.core
                        .report(format!("Heartbeat {c}"), Error::broker(c, msg));
                }
                self.heartbeat_failed(now);
            }
        }
    }

    pub(super) fn heartbeat_failed(&mut self, now: Instant) {
        let d = self
            .heartbeat_retry
            .failed(&self.cfg.retry_backoff, &mut *self.jitter);
        self.heartbeat_due = Some(now + d);
    }
}
