//! Finding the group coordinator: FindCoordinator to any broker, then a link of its own
//! (the group lane) to the coordinator. Sans-IO.
//!
//! ```text
//!            wanted                 answer: node N
//!   Unknown ───────────▶ Finding ─────────────────▶ Known(N)
//!     ▲   ▲                 │ error / no answer        │ NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
//!     │   └── backoff ──────┘                          │ a request on the group link failed,
//!     │                                                │ the group link could not be opened
//!     └────────────────────────────────────────────────┘
//! ```
//!
//! Invariants:
//! 1. Discovery runs only while some component wants the coordinator, with at most one
//!    FindCoordinator in flight, and consecutive failures back off with a growing delay.
//! 2. Only the answer to the request in flight is applied.
//! 3. A fatal answer (GROUP_AUTHORIZATION_FAILED, INVALID_GROUP_ID) is kept as the reason
//!    the coordinator cannot be found, for the requests that wait for it, until the next
//!    discovery succeeds.

use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::cluster::{Broker, Cluster};
use crate::error::Error;
use crate::link::{Failure, Links, Owner, Route, Tag, Transmit};
use crate::protocol::api::find_coordinator::{FindCoordinatorRequest, KEY_TYPE_GROUP};
use crate::protocol::error_code::ErrorCode;
use crate::types::{ApiVersion, NodeId, RequestId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unknown,
    Finding { id: RequestId, route: Route },
    Known(NodeId),
}

/// Finds and remembers the coordinator of one group.
pub(crate) struct Coordinator {
    group_id: String,
    state: State,
    wanted: bool,
    retry: Retry,
    not_before: Option<Instant>,
    backoff: Backoff,
    request_timeout: Duration,
    jitter: Box<dyn Jitter + Send>,
    next_id: RequestId,
    /// Why the coordinator cannot be found, when the broker said so for good.
    fatal: Option<Error>,
    /// The last retriable problem, for timeout messages.
    last_problem: Option<String>,
}

impl Coordinator {
    /// The coordinator of `group_id`, not yet known.
    pub fn new(
        group_id: &str,
        backoff: Backoff,
        request_timeout: Duration,
        jitter: Box<dyn Jitter + Send>,
    ) -> Coordinator {
        Coordinator {
            group_id: group_id.to_owned(),
            state: State::Unknown,
            wanted: false,
            retry: Retry::default(),
            not_before: None,
            backoff,
            request_timeout,
            jitter,
            next_id: RequestId(1),
            fatal: None,
            last_problem: None,
        }
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// The coordinator, if known. Asks for it to be found otherwise.
    pub fn node(&mut self) -> Option<NodeId> {
        match self.state {
            State::Known(n) => Some(n),
            _ => {
                self.wanted = true;
                None
            }
        }
    }

    /// Why the coordinator cannot be found, if the broker said so for good.
    pub fn fatal(&self) -> Option<&Error> {
        self.fatal.as_ref()
    }

    /// The last problem met while finding or using the coordinator.
    pub fn last_problem(&self) -> Option<&str> {
        self.last_problem.as_deref()
    }

    /// The coordinator moved or its link failed: find it again (after a backoff if this
    /// keeps happening).
    pub fn mark_unknown(&mut self, why: &str, now: Instant) {
        if let State::Known(n) = self.state {
            log::info!("group {}: coordinator {n} lost: {why}", self.group_id);
            self.state = State::Unknown;
            let d = self.retry.failed(&self.backoff, &mut *self.jitter);
            self.not_before = Some(now + d);
        }
        self.last_problem = Some(why.to_owned());
    }

    /// The group link to `node` could not be opened: if `node` is the coordinator, find it
    /// again.
    pub fn link_failed(&mut self, node: NodeId, why: &str, now: Instant) {
        if self.state == State::Known(node) {
            self.mark_unknown(why, now);
        }
    }

    /// The FindCoordinator request to send, if one is due.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        if self.state != State::Unknown || !self.wanted {
            return None;
        }
        if self.not_before.is_some_and(|t| now < t) {
            return None;
        }
        let (route, versions) = cluster.control_link(now, links)?;
        let Some(v) = versions.pick::<FindCoordinatorRequest>() else {
            self.fatal = Some(Error::unsupported(
                versions.unsupported::<FindCoordinatorRequest>(route.peer),
            ));
            self.fail(now);
            return None;
        };
        let id = self.next_id.take_next();
        self.state = State::Finding { id, route };
        let mut req = FindCoordinatorRequest::for_group(&self.group_id, v.get());
        req.key_type = KEY_TYPE_GROUP;
        Some(Transmit::new(
            route,
            &req,
            v,
            Tag {
                owner: Owner::Coordinator,
                id,
            },
            self.request_timeout,
        ))
    }

    fn fail(&mut self, now: Instant) {
        self.state = State::Unknown;
        let d = self.retry.failed(&self.backoff, &mut *self.jitter);
        self.not_before = Some(now + d);
    }

    /// Applies the answer to request `id`.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        let State::Finding { id: want, route } = self.state else {
            return;
        };
        if want != id {
            return;
        }
        let resp = match links.decode::<FindCoordinatorRequest>(route, version, body, now) {
            Ok(r) => r,
            Err(e) => {
                self.last_problem = Some(format!("malformed FindCoordinator response: {e}"));
                self.fail(now);
                return;
            }
        };
        let answer = match resp.coordinator(&self.group_id, version.get()) {
            Ok(a) => a,
            Err(e) => {
                self.last_problem = Some(format!("FindCoordinator from {route}: {e}"));
                self.fail(now);
                return;
            }
        };
        let (code, node, host, port, message) = answer;
        let code = ErrorCode::from_code(code);
        if code.is_err() {
            let text = match message {
                Some(m) => format!("finding the coordinator of group {}: {m}", self.group_id),
                None => format!("finding the coordinator of group {}", self.group_id),
            };
            if matches!(
                code,
                ErrorCode::GROUP_AUTHORIZATION_FAILED | ErrorCode::INVALID_GROUP_ID
            ) {
                log::error!("{text}: {code}");
                self.fatal = Some(Error::broker(code, text));
            } else {
                log::debug!("{text}: {code}");
                self.last_problem = Some(format!("{text}: {code}"));
            }
            self.fail(now);
            return;
        }
        let port = u16::try_from(port).ok().filter(|p| *p > 0);
        let (Some(port), true) = (port, node >= 0 && !host.is_empty()) else {
            self.last_problem = Some(format!(
                "FindCoordinator from {route} gave an unusable address {host:?}:{port:?} for node {node}"
            ));
            self.fail(now);
            return;
        };
        let node = NodeId(node);
        cluster.learn_broker(
            node,
            Broker {
                host: host.to_owned(),
                port,
                rack: None,
            },
        );
        log::info!(
            "group {}: coordinator is {node} at {host}:{port}",
            self.group_id
        );
        self.state = State::Known(node);
        self.retry.succeeded();
        self.fatal = None;
        self.not_before = None;
    }

    /// Request `id` got no answer.
    pub fn handle_failure(&mut self, id: RequestId, failure: &Failure, now: Instant) {
        if matches!(self.state, State::Finding { id: want, .. } if want == id) {
            self.last_problem = Some(format!("FindCoordinator: {failure}"));
            self.fail(now);
        }
    }

    /// Starts a round: components say again whether they want the coordinator.
    pub fn begin_round(&mut self) {
        self.wanted = false;
    }

    /// When the next discovery may start.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        (self.wanted && self.state == State::Unknown)
            .then_some(self.not_before)
            .flatten()
            .filter(|t| *t > now)
    }
}

#[cfg(test)]
mod tests;
