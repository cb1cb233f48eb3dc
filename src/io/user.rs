//! What passes between the I/O thread and the user side: the user's commands carried out,
//! and answers and events sent back (callers waiting on a reply channel are kept by request
//! id until their answer comes).

use std::collections::HashMap;
use std::time::Instant;

use crossbeam_channel::Sender;

use super::{Command, Event, IoLoop};
use crate::cluster::ClusterEvent;
use crate::error::{Error, Result};
use crate::fetch::fetcher::FetchEvent;
use crate::fetch::lookup::{LookupEvent, LookupResult};
use crate::group::commit::CommittedResult;
use crate::group::{Group, GroupCommand, GroupEvent};
use crate::types::{CallId, TopicPartition};

/// Callers waiting for an answer, by request id.
#[derive(Default)]
pub(super) struct Replies {
    lookups: HashMap<CallId, Sender<LookupResult>>,
    partitions: HashMap<CallId, Sender<Result<Vec<TopicPartition>>>>,
    commits: HashMap<CallId, Sender<Result<()>>>,
    committed: HashMap<CallId, Sender<CommittedResult>>,
    /// Callers of a leave, answered when the member has left.
    leaving: Vec<Sender<()>>,
}

impl IoLoop {
    pub(super) fn command(&mut self, c: Command, now: Instant) {
        match c {
            Command::Assign(list) => match &mut self.group {
                Some(g) => g.handle_command(GroupCommand::Assign(list), now, &mut self.cluster),
                None => self.fetcher.assign(list, &mut self.cluster),
            },
            Command::Seek {
                tp,
                epoch,
                to,
                resume,
            } => self.fetcher.seek(&tp, epoch, to, resume),
            Command::Pause(tps) => self.fetcher.pause(&tps),
            Command::Token(Ok(token)) => {
                log::debug!(
                    "new OAUTHBEARER token for {} (expires {:?})",
                    token.principal,
                    token.expires_at
                );
                let mut happened = Vec::new();
                self.net.set_token(token, now, &mut happened);
                self.apply(&mut happened, now);
            }
            Command::Token(Err(why)) => self.report_security_error(Error::new(
                crate::error::ErrorKind::Authentication,
                format!("the OAUTHBEARER token provider failed: {why}"),
            )),
            Command::Lookup {
                id,
                query,
                deadline,
                reply,
            } => {
                self.replies.lookups.insert(id, reply);
                self.lookups.start(id, query, deadline, &mut self.cluster);
            }
            Command::Partitions {
                id,
                topic,
                deadline,
                reply,
            } => {
                self.replies.partitions.insert(id, reply);
                self.cluster.wait_for_topic(id, &topic, deadline, now);
            }
            Command::Commit {
                id,
                offsets,
                deadline,
                reply,
            } => match &mut self.group {
                Some(g) => {
                    if let Some(reply) = reply {
                        self.replies.commits.insert(id, reply);
                    }
                    g.handle_command(
                        GroupCommand::Commit {
                            id,
                            offsets,
                            deadline,
                        },
                        now,
                        &mut self.cluster,
                    );
                }
                None => {
                    let e = Error::config("committing offsets needs a group.id");
                    match reply {
                        Some(r) => {
                            let _ = r.send(Err(e));
                        }
                        None => {
                            let _ = self.ev_tx.send(Event::CommitDone { id, result: Err(e) });
                        }
                    }
                }
            },
            Command::Committed {
                id,
                partitions,
                deadline,
                reply,
            } => match &mut self.group {
                Some(g) => {
                    self.replies.committed.insert(id, reply);
                    g.handle_command(
                        GroupCommand::Committed {
                            id,
                            partitions,
                            deadline,
                        },
                        now,
                        &mut self.cluster,
                    );
                }
                None => {
                    let _ = reply.send(Err(Error::config(
                        "reading committed offsets needs a group.id",
                    )));
                }
            },
            Command::Cancel(id) => {
                if self.replies.lookups.remove(&id).is_some() {
                    self.lookups.cancel(id, &mut self.cluster);
                }
                if self.replies.partitions.remove(&id).is_some() {
                    self.cluster.cancel_waiter(id);
                }
                self.replies.committed.remove(&id);
                self.replies.commits.remove(&id);
            }
            // The user side checks for a group.id before subscribing.
            Command::Subscribe(sub) => {
                if let Some(g) = &mut self.group {
                    g.handle_command(GroupCommand::Subscribe(sub), now, &mut self.cluster);
                }
            }
            Command::CallbackDone { token, assignment } => {
                if let Some(g) = &mut self.group {
                    g.handle_command(
                        GroupCommand::CallbackDone { token, assignment },
                        now,
                        &mut self.cluster,
                    );
                }
            }
            Command::Leave { reply } => match &mut self.group {
                Some(g) => {
                    self.replies.leaving.push(reply);
                    g.handle_command(GroupCommand::Leave, now, &mut self.cluster);
                }
                None => {
                    let _ = reply.send(());
                }
            },
            Command::SubscribedTopics { reply } => {
                let known = self.cluster.topic_names();
                let topics = self
                    .group
                    .as_ref()
                    .map(|g| g.subscribed_topics(known.iter().map(|t| &**t)))
                    .unwrap_or_default();
                let _ = reply.send(topics);
            }
            #[cfg(any(test, feature = "__testing"))]
            Command::Panic => panic!("injected by a test"),
            Command::Shutdown => {}
        }
    }

    /// A connection failed for a reason the user must act on (a refused login, an untrusted
    /// certificate): reported from `poll`, once until it changes or a link gets ready again,
    /// so a reconnecting consumer does not repeat it on every attempt.
    pub(super) fn report_security_error(&mut self, e: Error) {
        let text = e.to_string();
        if self.last_security_error.as_deref() == Some(text.as_str()) {
            return;
        }
        log::error!("{text}");
        self.last_security_error = Some(text);
        // Blocking calls waiting for brokers fail now with the reason, as in the Java
        // client, rather than at their timeout. Commits are not failed: they stay queued
        // in order and go out once a connection is ready.
        let waiting: Vec<CallId> = self.replies.lookups.keys().copied().collect();
        for id in waiting {
            self.lookups.cancel(id, &mut self.cluster);
            if let Some(reply) = self.replies.lookups.remove(&id) {
                let _ = reply.send(Err(e.clone()));
            }
        }
        for (id, reply) in self.replies.partitions.drain() {
            self.cluster.cancel_waiter(id);
            let _ = reply.send(Err(e.clone()));
        }
        for (_, reply) in self.replies.committed.drain() {
            let _ = reply.send(Err(e.clone()));
        }
        let _ = self.ev_tx.send(Event::Error(e, None));
    }

    /// Carries out what the group said.
    pub(super) fn group_event(&mut self, e: GroupEvent, now: Instant) {
        match e {
            GroupEvent::Callback {
                token,
                kind,
                partitions,
                owned,
            } => {
                let _ = self.ev_tx.send(Event::Rebalance {
                    token,
                    kind,
                    partitions,
                    owned,
                });
            }
            GroupEvent::Pause(tps) => self.fetcher.pause(&tps),
            GroupEvent::Assign(list) => self.fetcher.assign(list, &mut self.cluster),
            GroupEvent::Identity(id) => {
                let _ = self.ev_tx.send(Event::Identity(id));
            }
            GroupEvent::Error { error, fatal } => {
                let _ = self.ev_tx.send(Event::GroupError { error, fatal });
            }
            GroupEvent::Left => {
                for reply in self.replies.leaving.drain(..) {
                    let _ = reply.send(());
                }
            }
            GroupEvent::Committed { id, result } => match self.replies.commits.remove(&id) {
                Some(reply) => {
                    let _ = reply.send(result);
                }
                None => {
                    let _ = self.ev_tx.send(Event::CommitDone { id, result });
                }
            },
            GroupEvent::Offsets { id, result } => {
                if let Some(reply) = self.replies.committed.remove(&id) {
                    let _ = reply.send(result);
                }
            }
            GroupEvent::Positions { found, failed } => {
                for (tp, epoch, c) in found {
                    self.fetcher.apply_committed(&tp, epoch, c);
                }
                for (tp, epoch) in failed {
                    self.fetcher.committed_failed(&tp, epoch, now);
                }
            }
            GroupEvent::CommitError(e) => {
                let _ = self.ev_tx.send(Event::Error(e, None));
            }
            GroupEvent::Rebalance { phase, at } => self.metrics.with(|m| m.rebalance(phase, at)),
        }
    }

    /// Hands what the components have for the user side to it (and to the fetcher, what
    /// the group has for it).
    pub(super) fn forward_events(&mut self, now: Instant) {
        self.publish_topics();
        while let Some(e) = self.fetcher.poll_event() {
            let ev = match e {
                FetchEvent::Chunk(c) => Event::Chunk(c),
                FetchEvent::Error(e, epoch) => Event::Error(e, epoch),
                FetchEvent::End {
                    tp,
                    epoch,
                    end_offset,
                    log_start_offset,
                } => Event::End {
                    tp,
                    epoch,
                    end_offset,
                    log_start_offset,
                },
                FetchEvent::Truncated {
                    tp,
                    epoch,
                    fetch_offset,
                    divergent,
                } => Event::Truncated {
                    tp,
                    epoch,
                    fetch_offset,
                    divergent,
                },
            };
            let _ = self.ev_tx.send(ev);
        }
        while let Some(LookupEvent::Done { id, result }) = self.lookups.poll_event() {
            if let Some(reply) = self.replies.lookups.remove(&id) {
                let _ = reply.send(result);
            }
        }
        while let Some(e) = self.cluster.poll_event() {
            match e {
                ClusterEvent::Partitions { id, result } => {
                    if let Some(reply) = self.replies.partitions.remove(&id) {
                        let _ = reply.send(result);
                    }
                }
                ClusterEvent::Error(e) => {
                    let _ = self.ev_tx.send(Event::Error(e, None));
                }
            }
        }
        while let Some(e) = self.group.as_mut().and_then(Group::poll_event) {
            self.group_event(e, now);
        }
    }
}
