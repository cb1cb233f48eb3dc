//! The fetcher: the position, pause and reset state of every assigned partition, fetch
//! planning (one fetch in flight per broker, fetch sessions, the byte budget, rotation for
//! fairness, preferred read replicas), position resets with ListOffsets, and the policy for
//! every error a fetch can answer. Sans-IO: time is a parameter; requests go out as
//! [`Transmit`]s and records come out as [`FetchEvent`]s.
//!
//! A partition's position:
//!
//! ```text
//!                                   committed offset with a leader epoch
//!                        ┌────────────────────────────────────────────▶ Validate{offset}
//!                        │                                   a new leader │  ▲   │ truncated:
//!   assign/seek ──▶ AwaitCommitted ──committed offset──▶ At{offset} ◀─────┼──┘   │ Truncated
//!       │               │ none committed                  │  ▲  │ valid  │      ▼ event
//!       │               ▼                                 │  └──┘◀───────┘    Stuck
//!       └──────────▶ Reset{ts} ──ListOffsets answer──────▶┘ fetch answers    (until a seek:
//!                       ▲                                 │                   the user side's
//!                       └──── auto.offset.reset ──────────┤ OFFSET_OUT_        or the user's)
//!                                              none ──▶ Stuck OF_RANGE
//! ```
//!
//! Invariants:
//! 1. At most one Fetch is in flight per broker, and a partition is in at most one request
//!    (fetch, reset or validation) at a time: while a broker's fetch is in flight, the
//!    partitions placed with it (in its fetch session) are held there.
//! 2. An answer is applied to a partition only if the partition's position epoch and
//!    position are still those the request was made for (for a fetch: those the broker's
//!    session holds, [`FetchSession::fetched_at`], or the one partition of a batch fetched
//!    alone); anything else is stale and only releases the partition for the next
//!    request.
//! 3. A paused, backing-off, stuck or memory-waiting partition is never fetched, nor one
//!    whose leader an error showed to be stale, or whose preferred read replica has no
//!    known address, until newer metadata has arrived. Every
//!    retry path (partition errors, answers that do not move the position, failed resets,
//!    resets after OFFSET_OUT_OF_RANGE, session errors) waits a backoff that grows with
//!    consecutive failures.
//! 4. The bytes requested by fetches in flight plus the bytes held for the application
//!    never exceed `fetch.buffer.bytes` (a response may overshoot by what the broker must
//!    return whole, KIP-74); a partition whose next batch does not fit waits until the
//!    application frees memory, and is not fetched again before that.
//! 5. [`Fetcher::poll_timeout`] only returns future instants, and only for partitions that
//!    will be fetchable then.
//! 6. Records fetched under an older position epoch never leave the fetcher as current:
//!    every event carries the epoch it was made under.
//! 7. A position that knows the leader epoch of its last record is fetched from a leader
//!    other than the one it was last fetched from or checked against (a new leader or
//!    leader epoch in the metadata), and a committed offset that carries a leader epoch is
//!    fetched at all, only after OffsetForLeaderEpoch validated it (KIP-320; skipped, as
//!    in Java, when the leader speaks no v3). A log truncated below the position stops the
//!    partition with a [`FetchEvent::Truncated`] for the user side, which decides where
//!    reading resumes: never a silent skip and never a silent reset.
//! 8. `Fetcher::timers` files every partition under `Timers::wanted` of its state (its
//!    `not_before`, while it is unpaused in a position that waits for it) and nowhere else,
//!    up to instants that have passed: every change of a partition's `not_before`, pause
//!    or position is followed by `Timers::arm` (or `disarm` when it leaves or starts
//!    afresh), so [`Fetcher::poll_timeout`] costs a look-up, not a walk of the assignment.
//! 9. Planning visits only the partitions whose placement may have changed
//!    (`Fetcher::dirty`), or all of them when the metadata or the assignment changed: every
//!    event that can move a partition marks it — assign, seek, pause and resume, a
//!    committed offset, an answer applied to it, the end of its reset or validation, the
//!    end of its backoff or of its replica's lease (both timers), memory freed by the
//!    application (`Fetcher::room_waiters`) — and a partition held by a fetch in flight
//!    (invariant 1) is marked again when that fetch ends (`NodeFetch::deferred`). So after
//!    a round, a partition that is not marked or held is placed exactly where a plan over
//!    the whole assignment would place it: in the fetch session of the one broker it is
//!    read from (`Part::fetch_node`) with the state that goes on the wire, or in none. A
//!    round then costs what changed, and an incremental fetch of a session where nothing
//!    changed carries no partitions (KIP-227). The randomized test holds the placements
//!    equal to a plan from scratch after every round.
//! 10. `Fetcher::metadata_waiters` holds exactly the partitions whose last placement
//!     found them waiting for metadata (an unknown or missing leader, newer metadata
//!     after an error, or metadata naming an older leader epoch than the position's, for
//!     at most [`METADATA_BEHIND_WAITS`] refreshes): while it is not empty, every round
//!     asks for a refresh.
//! 11. With deferred decoding ([`Fetcher::set_defer_decoding`], as the I/O loop runs it),
//!     applying a Fetch answer moves each partition with records to where their batch
//!     headers say they end, so that the next fetch goes out before they are checked and
//!     decompressed; [`Fetcher::decode_deferred`] then decodes them from the offset they
//!     were fetched at, exactly as applying the answer would have, before any later answer
//!     of that broker is applied. Decoding that ends earlier (a corrupt batch, one that
//!     does not fit) puts the position there, which makes the answer to a fetch made from
//!     the prediction stale (invariant 2). The room decoding is expected to take is set
//!     aside until then (invariant 4).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::buffer::{Budget, FrameBuf, Pool};
use crate::cluster::{Cluster, Interest, Leader, TopicLeaders};
use crate::error::{Error, ErrorKind};
use crate::fetch::chunk::{
    build_chunk, predicted_end, Chunk, Decoded, FetchedFrame, PartitionInput, Stop,
};
use crate::fetch::offsets::{self, Query, Unsendable};
use crate::fetch::session::{FetchPlan, FetchSession, SessionPartition};
use crate::fetch::validate::{self, Check, Verdict};
use crate::link::{Failure, Lane, Links, Owner, Peer, Route, Tag, Transmit, Versions};
use crate::protocol::api::fetch::{
    FetchPartition, FetchRequest, FetchResponse, FetchTopic, FetchableTopicResponse,
    ForgottenTopic, PartitionData,
};
use crate::protocol::api::list_offsets::{self, ListOffsetsRequest};
use crate::protocol::api::offset_for_leader_epoch::OffsetForLeaderEpochRequest;
use crate::protocol::error_code::ErrorCode;
use crate::types::{
    ApiVersion, LeaderEpoch, MetadataGeneration, NodeId, OffsetReset, PositionEpoch, RequestId,
    TopicPartition,
};

/// Fetching waits until at least this fraction (1/n) of the budget is free.
const MIN_ROOM_DIVISOR: usize = 8;

/// Consecutive answers that do not move a partition's position before it is reported.
const STALLS_BEFORE_REPORT: u32 = 4;

/// Where a partition's position is to come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeekTo {
    /// This offset.
    Offset(i64),
    /// The first offset of the log.
    Beginning,
    /// The end of the log (the last stable offset under read_committed).
    End,
    /// The group's committed offset if there is a group, else `auto.offset.reset`.
    Default,
}

/// What the fetcher needs from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct FetchConfig {
    pub auto_offset_reset: OffsetReset,
    /// The wire isolation level: 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    pub check_crcs: bool,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait: Duration,
    pub max_partition_fetch_bytes: i32,
    pub request_timeout: Duration,
    pub retry_backoff: Backoff,
    pub client_rack: String,
    /// How long a preferred read replica is followed before asking the leader again.
    pub replica_lease: Duration,
    /// Whether a group id is configured: unpositioned partitions ask for committed offsets.
    pub use_committed: bool,
}

/// What the fetcher hands to the application side.
#[derive(Debug)]
pub(crate) enum FetchEvent {
    /// Records (or just a position move) for one partition.
    Chunk(Chunk),
    /// An error for `poll` to return; `epoch` ties a partition error to a position epoch.
    Error(Error, Option<PositionEpoch>),
    /// A partition's end offset or log start offset changed (for lag and lead); -1 for
    /// one the answer did not give.
    End {
        tp: TopicPartition,
        epoch: PositionEpoch,
        end_offset: i64,
        log_start_offset: i64,
    },
    /// The partition's log was truncated below `fetch_offset`, the position the fetcher
    /// had reached (invariant 7): it diverges from what was read at `divergent` (with that
    /// offset's leader epoch), or at an unknown point. The partition stays stopped until a
    /// seek.
    Truncated {
        tp: TopicPartition,
        epoch: PositionEpoch,
        fetch_offset: i64,
        divergent: Option<(i64, LeaderEpoch)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Fetch from `offset`; `leader_epoch` is that of the last record read (-1 unknown).
    At {
        offset: i64,
        leader_epoch: LeaderEpoch,
    },
    /// Find the position with ListOffsets at `timestamp` (`from`: the position before, if
    /// any, so the application sees the move as continuous).
    Reset { timestamp: i64, from: Option<i64> },
    /// Ask the leader with OffsetForLeaderEpoch whether the log still holds what was read
    /// before `offset` (`leader_epoch`: that of the last record) before fetching from it.
    Validate {
        offset: i64,
        leader_epoch: LeaderEpoch,
    },
    /// Waiting to be handed to the group for its committed offset.
    AwaitCommitted,
    /// The committed offset was asked for.
    CommittedRequested,
    /// No position and no way to find one: the application must seek.
    Stuck,
}

#[derive(Debug)]
struct Part {
    epoch: PositionEpoch,
    position: Position,
    paused: bool,
    /// Its next batch did not fit beside the rest of a response: fetch it on its own.
    solo: bool,
    /// The missing-topic error last reported, so it is reported once.
    missing: Option<ErrorCode>,
    retry: Retry,
    /// The reset or validation this partition was last put in: it is in flight while that
    /// request is (in `Fetcher::sent`), so answering a request releases its partitions
    /// without visiting them.
    in_flight: Option<RequestId>,
    /// The broker whose fetch session it is placed in (invariant 9): it is in flight while
    /// that broker's fetch is.
    fetch_node: Option<NodeId>,
    /// The leader and leader epoch the position was last fetched from or validated
    /// against: another one in the metadata makes it validate first (invariant 7).
    leader_seen: Option<(NodeId, LeaderEpoch)>,
    end_offset: i64,
    /// The log start offset as the last answer gave it (-1 unknown).
    log_start: i64,
    not_before: Option<Instant>,
    /// The instant this partition is filed under in `Fetcher::timers` (invariant 8).
    armed: Option<Instant>,
    /// What only a partition that waits for memory or metadata, or reads from a
    /// follower, needs: out of line, so that the others stay small.
    rare: Option<Box<RareState>>,
}

/// What planning reads of a partition that an answer can change (invariant 9).
#[derive(PartialEq)]
struct Planned {
    position: Position,
    not_before: Option<Instant>,
    rare: Option<RareState>,
    solo: bool,
}

impl Planned {
    fn of(p: &Part) -> Planned {
        Planned {
            position: p.position,
            not_before: p.not_before,
            rare: p.rare.as_deref().copied(),
            solo: p.solo,
        }
    }
}

/// The rarely needed part of a partition's state (see `Part::rare`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RareState {
    /// Waiting for the application to free memory: the budget's count of its frees then.
    waiting_for_room: Option<u64>,
    /// Its leader looked stale: wait for metadata newer than this cluster generation.
    awaiting_metadata: Option<MetadataGeneration>,
    /// KIP-392: fetch from this replica until the lease ends.
    replica: Option<(NodeId, Instant)>,
    /// How many metadata refreshes in a row named an older leader epoch than the
    /// position's (see [`METADATA_BEHIND_WAITS`]).
    metadata_behind: u8,
}

impl Part {
    fn new(epoch: PositionEpoch, position: Position) -> Part {
        Part {
            epoch,
            position,
            paused: false,
            solo: false,
            missing: None,
            retry: Retry::default(),
            in_flight: None,
            fetch_node: None,
            leader_seen: None,
            end_offset: -1,
            log_start: -1,
            not_before: None,
            armed: None,
            rare: None,
        }
    }

    fn waiting_for_room(&self) -> Option<u64> {
        self.rare.as_ref().and_then(|d| d.waiting_for_room)
    }

    fn awaiting_metadata(&self) -> Option<MetadataGeneration> {
        self.rare.as_ref().and_then(|d| d.awaiting_metadata)
    }

    fn metadata_behind(&self) -> u8 {
        self.rare.as_ref().map_or(0, |d| d.metadata_behind)
    }

    fn replica(&self) -> Option<(NodeId, Instant)> {
        self.rare.as_ref().and_then(|d| d.replica)
    }

    /// Changes the rarely needed state, keeping it out of line only while it holds
    /// something.
    fn with_rare(&mut self, f: impl FnOnce(&mut RareState)) {
        let mut d = self.rare.as_deref().copied().unwrap_or_default();
        f(&mut d);
        match &mut self.rare {
            _ if d == RareState::default() => self.rare = None,
            Some(b) => **b = d,
            None => self.rare = Some(Box::new(d)),
        }
    }

    fn backoff(&mut self, now: Instant, policy: &Backoff, jitter: &mut dyn Jitter) {
        let d = self.retry.failed(policy, jitter);
        self.not_before = Some(now + d);
    }

    /// Moves the position past `chunk`, with the chunk's leader epoch if it knows one, else
    /// the one the position had.
    fn move_past(&mut self, chunk: &Chunk) {
        self.position = Position::At {
            offset: chunk.next_offset,
            leader_epoch: if chunk.last_epoch.known().is_some() {
                chunk.last_epoch
            } else {
                match self.position {
                    Position::At { leader_epoch, .. } => leader_epoch,
                    _ => LeaderEpoch::UNKNOWN,
                }
            },
        };
    }
}

#[derive(Debug)]
enum Sent {
    Fetch {
        node: NodeId,
        route: Route,
        reserved: usize,
        /// A sessionless request for one partition's next batch alone, at this position
        /// epoch and offset; otherwise the request used the broker's session, which says
        /// what each answered partition was fetched at (invariant 2).
        solo: Option<(TopicPartition, PositionEpoch, i64)>,
    },
    Reset {
        route: Route,
        parts: Vec<(TopicPartition, PositionEpoch, i64)>,
    },
    Validate {
        route: Route,
        /// Per partition: the position epoch, the offset validated and the leader epoch
        /// the metadata named.
        parts: Vec<(TopicPartition, PositionEpoch, i64, LeaderEpoch)>,
    },
}

/// A Fetch answer while its partitions are applied: what they share, and what applying
/// them gathers for the end of the answer.
struct FetchAnswerContext<'a> {
    /// The broker that answered.
    node: NodeId,
    /// The request asked for one partition's next batch alone.
    solo: bool,
    /// Partitions that now read from a preferred replica, with the end of its lease.
    leases: Vec<(Instant, TopicPartition)>,
    /// The response body the partitions' records lie in.
    frame: &'a Arc<FetchedFrame>,
    now: Instant,
    /// The budget's count of application frees when the answer arrived: memory the
    /// application frees after this point lets a partition that did not fit try again
    /// (memory this thread gives back does not count: it changes nothing).
    frees_before: u64,
    /// Some partition waits for newer metadata.
    need_metadata: bool,
    /// Record-set bytes decoded whole, and the memory their chunks took.
    decoded_in: usize,
    decoded_out: usize,
    /// Records may be decoded after the next fetch went out ([`Fetcher::decode_deferred`]),
    /// within this much room (what decoding them is expected to take, at `expansion`).
    defer: bool,
    defer_room: usize,
    expansion: f64,
    /// The partitions whose records wait for [`Fetcher::decode_deferred`].
    deferred: Vec<DeferredPart>,
}

impl FetchAnswerContext<'_> {
    /// `p` waits for metadata newer than the cluster's current generation, which the end of
    /// the answer asks for.
    fn await_metadata(&mut self, p: &mut Part, cluster: &Cluster) {
        self.need_metadata = true;
        let generation = cluster.generation();
        p.with_rare(|d| d.awaiting_metadata = Some(generation));
    }
}

/// One partition's part of a Fetch answer, with the position it was fetched at.
struct PartitionAnswer<'a> {
    tp: TopicPartition,
    epoch: PositionEpoch,
    /// The fetch offset.
    offset: i64,
    data: &'a PartitionData,
    /// Where `data` is in the answer: its topic's and its own index.
    index: (usize, usize),
}

/// A Fetch answer whose records are decoded once the next fetch to its broker has gone
/// out (see [`Fetcher::decode_deferred`]).
struct DeferredAnswer {
    node: NodeId,
    frame: Arc<FetchedFrame>,
    resp: FetchResponse,
    parts: Vec<DeferredPart>,
    /// Room set aside for what decoding the records is expected to take (invariant 4).
    reserved: usize,
}

/// One partition of a [`DeferredAnswer`].
struct DeferredPart {
    tp: TopicPartition,
    epoch: PositionEpoch,
    /// The fetch offset.
    offset: i64,
    /// Where its data is in the answer (see [`PartitionAnswer::index`]).
    index: (usize, usize),
    /// The position and `solo` before the answer: decoding starts from them.
    before: (Position, bool),
    /// The position its batch headers say decoding ends at, which the next fetch asks
    /// from until decoding says otherwise.
    predicted: Position,
}

/// One partition's part of a Fetch answer being applied to the partition: the partition
/// (looked up once per answer) beside the parts of the fetcher that the steps use.
struct ApplyPartition<'f, 'a> {
    cfg: &'f FetchConfig,
    events: &'f mut VecDeque<FetchEvent>,
    budget: &'f Arc<Budget>,
    spares: &'f Pool,
    jitter: &'f mut (dyn Jitter + Send),
    answer: &'f mut FetchAnswerContext<'a>,
    part: &'f PartitionAnswer<'a>,
    p: &'f mut Part,
}

impl ApplyPartition<'_, '_> {
    /// Any error from a preferred read replica: the partition goes back to its leader
    /// (KIP-392), at once for an offset out of range, else after a backoff.
    fn leave_replica_after_error(&mut self, code: ErrorCode, cluster: &Cluster) {
        let (tp, node) = (&self.part.tp, self.answer.node);
        log::debug!("partition {tp}: {code} from replica {node}, back to the leader");
        self.p.with_rare(|d| d.replica = None);
        if code != ErrorCode::OFFSET_OUT_OF_RANGE {
            if code.needs_metadata_refresh() {
                self.answer.await_metadata(self.p, cluster);
            }
            self.backoff();
        }
    }

    /// A partition's answer without error: its end and log start offsets (an event when
    /// one changed), then either a preferred read replica to fetch from instead, or its
    /// records.
    fn data(&mut self, cluster: &Cluster) {
        let (part, now) = (self.part, self.answer.now);
        let end = end_offset_in(self.cfg, part.data);
        let log_start = part.data.log_start_offset;
        let end_moved = end >= 0 && end != self.p.end_offset;
        let start_moved = log_start >= 0 && log_start != self.p.log_start;
        if end_moved || start_moved {
            if end >= 0 {
                self.p.end_offset = end;
            }
            if log_start >= 0 {
                self.p.log_start = log_start;
            }
            self.events.push_back(FetchEvent::End {
                tp: part.tp.clone(),
                epoch: part.epoch,
                end_offset: end,
                log_start_offset: log_start,
            });
        }
        let preferred = part.data.preferred_read_replica;
        if preferred >= 0 && preferred != self.answer.node.0 {
            let r = NodeId(preferred);
            log::debug!("partition {}: fetching from preferred replica {r}", part.tp);
            let until = now + self.cfg.replica_lease;
            self.p.with_rare(|d| d.replica = Some((r, until)));
            self.answer.leases.push((until, part.tp.clone()));
            if cluster.broker(r).is_none() {
                // Its address comes with newer metadata; until then the
                // leader would only name it again, at once, in a loop.
                self.answer.await_metadata(self.p, cluster);
            }
            return;
        }
        if part.data.records.len == 0 {
            self.p.retry.succeeded();
            return;
        }
        if self.defer() {
            return;
        }
        let decoded = self.decode_records(end);
        self.apply_decoded_records(decoded);
    }

    /// Moves the position to where the records' batch headers say they end and leaves
    /// decoding them to [`Fetcher::decode_deferred`], after the next fetch has gone out,
    /// when the answer allows it and decoding them is expected to fit in the room; `false`
    /// when they are to be decoded now. Decoding starts again from the position before,
    /// and a position it ends elsewhere (a bad batch, one that does not fit) replaces the
    /// prediction: the fetch made from the prediction is then stale (invariant 2).
    fn defer(&mut self) -> bool {
        let (part, answer) = (self.part, &mut *self.answer);
        // A partition whose last attempt failed (a batch that did not decode, a stall)
        // decodes at once: a batch that keeps failing is then fetched once per backoff,
        // never again from where its headers say it ends.
        if !answer.defer || self.p.retry.failures() > 0 {
            return false;
        }
        let (start, len) = (part.data.records.start, part.data.records.len);
        let expected = (len as f64 * answer.expansion) as usize;
        if expected > answer.defer_room {
            return false;
        }
        let Some((next, epoch)) = predicted_end(&answer.frame[start..start + len], part.offset)
        else {
            return false;
        };
        answer.defer_room -= expected;
        let before = (self.p.position, self.p.solo);
        let leader_epoch = match (epoch.known(), self.p.position) {
            (Some(_), _) => epoch,
            (None, Position::At { leader_epoch, .. }) => leader_epoch,
            (None, _) => LeaderEpoch::UNKNOWN,
        };
        self.p.position = Position::At {
            offset: next,
            leader_epoch,
        };
        self.p.solo = false;
        answer.deferred.push(DeferredPart {
            tp: part.tp.clone(),
            epoch: part.epoch,
            offset: part.offset,
            index: part.index,
            before,
            predicted: self.p.position,
        });
        true
    }

    /// Decodes the partition's records into a chunk (under read_committed, without the
    /// aborted transactions its answer lists), charging the budget for what it holds.
    fn decode_records(&self, end: i64) -> Decoded {
        let (part, frame) = (self.part, self.answer.frame);
        let aborted = if self.cfg.isolation_level == 1 {
            Some(
                part.data
                    .aborted_transactions
                    .iter()
                    .flatten()
                    .map(|a| (a.producer_id, a.first_offset))
                    .collect(),
            )
        } else {
            None
        };
        build_chunk(
            PartitionInput {
                tp: part.tp.clone(),
                epoch: part.epoch,
                fetch_offset: part.offset,
                end_offset: end,
                frame,
                records: (part.data.records.start, part.data.records.len),
                aborted,
                check_crcs: self.cfg.check_crcs,
            },
            self.budget,
            frame.charged(),
            Some(self.spares),
        )
    }

    /// Hands the chunk decoded from the partition's records to the application and moves
    /// the position past it (a record set decoded whole counts towards the expansion
    /// sample), then deals with why decoding stopped early, if it did.
    fn apply_decoded_records(&mut self, decoded: Decoded) {
        let moved = decoded.chunk.is_some();
        if moved {
            self.p.solo = false;
        }
        if decoded.stop.is_none() {
            if let Some(c) = &decoded.chunk {
                self.answer.decoded_in += self.part.data.records.len;
                self.answer.decoded_out += c.charged();
            }
        }
        if let Some(mut c) = decoded.chunk {
            c.source = Some(self.answer.node);
            self.p.move_past(&c);
            self.events.push_back(FetchEvent::Chunk(c));
        }
        self.apply_decoding_stop(decoded.stop, moved, decoded.bytes);
    }

    /// What follows from how decoding the partition's records (`bytes` of them) ended:
    /// success when the position `moved` and nothing stopped it; otherwise a backoff
    /// (reported if it lasts), a wait for memory, a fetch of the batch alone, or an error
    /// for the application.
    fn apply_decoding_stop(&mut self, stop: Option<Stop>, moved: bool, bytes: usize) {
        let (tp, epoch) = (&self.part.tp, self.part.epoch);
        match stop {
            None if moved => self.p.retry.succeeded(),
            None => {
                // Data that holds no complete batch at or after the position:
                // a batch cut by the response limit (its turn comes with the
                // rotation) or a lying broker. Back off; say so if it lasts.
                self.backoff();
                if self.p.retry.failures() == STALLS_BEFORE_REPORT {
                    let e = no_complete_batch_error(tp, self.part.offset, bytes);
                    self.events.push_back(FetchEvent::Error(e, Some(epoch)));
                }
            }
            Some(Stop::NoRoom {
                offset,
                alone: false,
                ..
            }) => {
                log::debug!("partition {tp}: batch at {offset} waits for memory");
                let frees = self.answer.frees_before;
                self.p.with_rare(|d| d.waiting_for_room = Some(frees));
                self.budget.wake_on_app_free();
            }
            Some(Stop::NoRoom {
                offset,
                alone: true,
                ..
            }) if !self.answer.solo => {
                log::debug!("partition {tp}: batch at {offset} is fetched alone");
                self.p.solo = true;
            }
            Some(
                Stop::TooLarge { offset, skip_to }
                | Stop::NoRoom {
                    offset, skip_to, ..
                },
            ) => {
                self.backoff();
                let e = batch_too_large_error(tp, offset, skip_to, self.budget.cap());
                self.events.push_back(FetchEvent::Error(e, Some(epoch)));
            }
            Some(Stop::Error {
                offset,
                skip_to,
                error,
            }) => {
                log::warn!("partition {tp} at offset {offset}: {error}");
                self.backoff();
                let e = Error::records(error, tp, offset, skip_to);
                self.events.push_back(FetchEvent::Error(e, Some(epoch)));
            }
        }
    }

    /// OFFSET_OUT_OF_RANGE: the position resets by `auto.offset.reset` (with `none` it is
    /// stuck, and the application gets this error).
    fn reset_after_out_of_range(&mut self) {
        let part = self.part;
        let (tp, epoch, offset) = (&part.tp, part.epoch, part.offset);
        let why = Error::broker(
            ErrorCode::OFFSET_OUT_OF_RANGE,
            format!(
                "partition {tp}: offset {offset} is out of range (log start {}, end {}) and auto.offset.reset is none",
                part.data.log_start_offset, part.data.high_watermark
            ),
        )
        .with_partition(tp.clone())
        .with_offset(offset);
        log::info!("partition {tp}: offset {offset} out of range");
        self.p.position = default_reset(self.cfg, self.events, tp, epoch, Some(offset), Some(why));
        // The first reset goes at once; a broker that finds every reset position out of
        // range again must not make reset and fetch alternate in a loop.
        let d = self.p.retry.failed(&self.cfg.retry_backoff, self.jitter);
        if self.p.retry.failures() > 1 {
            self.p.not_before = Some(self.answer.now + d);
        }
    }

    /// Any other partition error: a backoff, then newer metadata for an error that says
    /// the leader moved, or an error for the application if retrying cannot help.
    fn error(&mut self, code: ErrorCode, cluster: &Cluster) {
        let (tp, offset) = (&self.part.tp, self.part.offset);
        log::debug!("partition {tp}: fetch error {code}");
        self.backoff();
        if code.needs_metadata_refresh() {
            // Retry once newer metadata says where the partition lives.
            self.answer.await_metadata(self.p, cluster);
        } else if !code.is_retriable() {
            let e = Error::broker(code, format!("fetching partition {tp} at offset {offset}"))
                .with_partition(tp.clone())
                .with_offset(offset);
            self.events
                .push_back(FetchEvent::Error(e, Some(self.part.epoch)));
        }
    }

    /// The partition waits out a retry backoff.
    fn backoff(&mut self) {
        self.p
            .backoff(self.answer.now, &self.cfg.retry_backoff, self.jitter);
    }
}

/// The partition's end as an answer gives it: the last stable offset under read_committed,
/// else the high watermark.
fn end_offset_in(cfg: &FetchConfig, data: &PartitionData) -> i64 {
    if cfg.isolation_level == 1 {
        data.last_stable_offset
    } else {
        data.high_watermark
    }
}

/// Where a partition without a usable position goes by `auto.offset.reset`: a reset to the
/// earliest or latest offset (`from`: the offset that was not usable), or with `none`
/// stuck, with `why` (or a plain "no position") for the application.
fn default_reset(
    cfg: &FetchConfig,
    events: &mut VecDeque<FetchEvent>,
    tp: &TopicPartition,
    epoch: PositionEpoch,
    from: Option<i64>,
    why: Option<Error>,
) -> Position {
    let timestamp = match cfg.auto_offset_reset {
        OffsetReset::Earliest => list_offsets::EARLIEST,
        OffsetReset::Latest => list_offsets::LATEST,
        _ => {
            let e = why.unwrap_or_else(|| {
                Error::new(
                    ErrorKind::NoOffset,
                    format!(
                        "partition {tp} has no position and auto.offset.reset is none; seek first"
                    ),
                )
                .with_partition(tp.clone())
            });
            events.push_back(FetchEvent::Error(e, Some(epoch)));
            return Position::Stuck;
        }
    };
    Position::Reset { timestamp, from }
}

/// How many metadata refreshes a partition waits for when the metadata names an older
/// leader epoch than its position's, before it goes on with the leader named.
const METADATA_BEHIND_WAITS: u8 = 8;

/// The most events whose room the event queue keeps once drained.
const EVENTS_KEPT: usize = 1024;

/// How many decompression buffers are kept for reuse (about one response's partitions).
const DECODE_SPARES: usize = 16;

/// Fewer record-set bytes than this say little about how data expands when decoded.
const MIN_EXPANSION_SAMPLE: usize = 64 * 1024;

/// The least a byte of record set is assumed to take when decoded: uncompressed data adds
/// only its record index (a few percent), but a response must never take so much of the
/// room that the first batch's index does not fit beside it.
const MIN_EXPANSION: f64 = 0.5;

/// The most a byte of record set is assumed to take when decoded (zstd reaches ~100x on
/// repetitive data; beyond this, fetches would shrink to nothing and a batch that does not
/// fit is handled by fetching it alone).
const MAX_EXPANSION: f64 = 16.0;

/// Where planning puts one partition.
enum Placement {
    /// Nowhere: it is not to be fetched now (paused, backing off, waiting for memory or
    /// metadata, no position, no leader).
    Idle,
    /// In a ListOffsets to its leader.
    Reset(NodeId, Query),
    /// In an OffsetForLeaderEpoch to its leader: the check, and the offset checked.
    Validate(NodeId, Check, i64),
    /// In the fetch session of this broker, with this state.
    Fetch(NodeId, SessionPartition),
}

/// One planning pass over some partitions (invariant 9): what placing them reads, and the
/// resets and validations it gathers (fetches go in the brokers' sessions).
struct Planner<'a> {
    now: Instant,
    /// The budget's count of application frees.
    frees: u64,
    cluster: &'a Cluster,
    /// The topic last looked up in the metadata (partitions come in topic order).
    topic: Option<(Arc<str>, TopicLeaders<'a>)>,
    events: &'a mut VecDeque<FetchEvent>,
    metadata_waiters: &'a mut BTreeSet<TopicPartition>,
    room_waiters: &'a mut BTreeSet<TopicPartition>,
    nodes: &'a mut BTreeMap<NodeId, NodeFetch>,
    fetching: &'a HashMap<NodeId, RequestId>,
    sent: &'a HashMap<RequestId, Sent>,
    resets: BTreeMap<NodeId, Vec<(Query, PositionEpoch)>>,
    checks: BTreeMap<NodeId, Vec<(Check, PositionEpoch, i64)>>,
}

impl<'a> Planner<'a> {
    /// Places `tp`: a partition held by a request in flight is placed when the request
    /// ends (invariant 1); any other goes where [`Planner::placement`] says, leaving the
    /// fetch session it was in if that is another.
    fn place(&mut self, tp: &TopicPartition, p: &mut Part) {
        if p.in_flight.is_some_and(|id| self.sent.contains_key(&id)) {
            return;
        }
        if let Some(n) = p.fetch_node.filter(|n| self.fetching.contains_key(n)) {
            if let Some(nf) = self.nodes.get_mut(&n) {
                nf.deferred.push(tp.clone());
            }
            return;
        }
        if !self.metadata_waiters.is_empty() {
            self.metadata_waiters.remove(tp);
        }
        match self.placement(tp, p) {
            Placement::Fetch(node, s) => {
                if p.fetch_node != Some(node) {
                    self.leave_session(tp, p);
                }
                let nf = self.nodes.entry(node).or_default();
                nf.session.want(tp, s);
                if p.solo && nf.solo.is_none() {
                    nf.solo = Some(tp.clone());
                }
                p.fetch_node = Some(node);
            }
            Placement::Reset(leader, query) => {
                self.leave_session(tp, p);
                self.resets
                    .entry(leader)
                    .or_default()
                    .push((query, p.epoch));
            }
            Placement::Validate(leader, check, offset) => {
                self.leave_session(tp, p);
                self.checks
                    .entry(leader)
                    .or_default()
                    .push((check, p.epoch, offset));
            }
            Placement::Idle => self.leave_session(tp, p),
        }
    }

    /// Takes `tp` out of the fetch session it is placed in (forgotten by that broker's
    /// next fetch).
    fn leave_session(&mut self, tp: &TopicPartition, p: &mut Part) {
        if let Some(n) = p.fetch_node.take() {
            if let Some(nf) = self.nodes.get_mut(&n) {
                nf.session.unwant(tp);
            }
        }
    }

    /// Where `tp` goes now (invariant 3: a paused, backing-off or waiting partition goes
    /// nowhere); a position whose leader moved turns to validation first (invariant 7).
    fn placement(&mut self, tp: &TopicPartition, p: &mut Part) -> Placement {
        if p.paused {
            return Placement::Idle;
        }
        match p.not_before {
            Some(t) if self.now < t => return Placement::Idle,
            Some(_) => p.not_before = None,
            None => {}
        }
        if let Some(frees) = p.waiting_for_room() {
            if frees == self.frees {
                self.room_waiters.insert(tp.clone());
                return Placement::Idle;
            }
            p.with_rare(|d| d.waiting_for_room = None);
        }
        if let Some(generation) = p.awaiting_metadata() {
            if generation == self.cluster.generation() {
                self.metadata_waiters.insert(tp.clone());
                return Placement::Idle;
            }
            p.with_rare(|d| d.awaiting_metadata = None);
        }
        if !matches!(
            p.position,
            Position::At { .. } | Position::Reset { .. } | Position::Validate { .. }
        ) {
            return Placement::Idle;
        }
        let leaders = match &self.topic {
            Some((t, leaders)) if t == tp.topic_arc() => *leaders,
            _ => {
                let leaders = self.cluster.topic_leaders(tp.topic());
                self.topic = Some((Arc::clone(tp.topic_arc()), leaders));
                leaders
            }
        };
        let (leader, leader_epoch) = match leaders.leader(tp.partition()) {
            Leader::Known(n, e) => {
                p.missing = None;
                (n, e)
            }
            Leader::Unknown => {
                self.metadata_waiters.insert(tp.clone());
                return Placement::Idle;
            }
            Leader::Missing(code) => {
                if p.missing != Some(code) {
                    p.missing = Some(code);
                    let e = Error::broker(code, format!("partition {tp} is not available"))
                        .with_partition(tp.clone());
                    self.events.push_back(FetchEvent::Error(e, Some(p.epoch)));
                }
                // Keep asking (spaced by the cluster): the topic may be created.
                self.metadata_waiters.insert(tp.clone());
                return Placement::Idle;
            }
        };
        // A position read (or committed) at a newer leader epoch than the metadata names:
        // the metadata is behind, and the broker it names may be one that still thinks it
        // leads (back from a pause), whose log ends before the position. Wait for newer
        // metadata, as the Java client does, for a few refreshes; a position whose epoch no
        // metadata ever reaches (a committed offset with a made-up epoch) then goes on.
        let read_at = match p.position {
            Position::At { leader_epoch, .. } | Position::Validate { leader_epoch, .. } => {
                leader_epoch.known()
            }
            _ => None,
        };
        match (read_at, leader_epoch.known()) {
            (Some(read), Some(named)) if read > named => {
                let waits = p.metadata_behind();
                if waits < METADATA_BEHIND_WAITS {
                    if waits == 0 {
                        log::debug!(
                            "partition {tp}: the metadata names leader epoch {named} (node {leader}), older than the epoch {read} of the position; waiting for newer metadata"
                        );
                    }
                    let generation = self.cluster.generation();
                    p.with_rare(|d| {
                        d.metadata_behind = waits + 1;
                        d.awaiting_metadata = Some(generation);
                    });
                    self.metadata_waiters.insert(tp.clone());
                    return Placement::Idle;
                }
                if waits == METADATA_BEHIND_WAITS {
                    log::warn!(
                        "partition {tp}: {waits} metadata refreshes in a row named leader epoch {named} (node {leader}), older than the epoch {read} of the position; going on with that leader"
                    );
                    p.with_rare(|d| d.metadata_behind = waits + 1);
                }
            }
            _ if p.metadata_behind() > 0 => p.with_rare(|d| d.metadata_behind = 0),
            _ => {}
        }
        if let Position::At {
            offset,
            leader_epoch: last,
        } = p.position
        {
            let moved = p
                .leader_seen
                .is_some_and(|seen| seen != (leader, leader_epoch));
            if moved && last.known().is_some() && leader_epoch.known().is_some() {
                log::debug!(
                    "partition {tp}: leader {leader} at epoch {} since the last fetch; validating offset {offset} first",
                    leader_epoch.0
                );
                p.position = Position::Validate {
                    offset,
                    leader_epoch: last,
                };
            } else {
                p.leader_seen = Some((leader, leader_epoch));
            }
        }
        match p.position {
            Position::Validate {
                offset,
                leader_epoch: last,
            } => Placement::Validate(
                leader,
                Check {
                    tp: tp.clone(),
                    current_leader_epoch: leader_epoch,
                    leader_epoch: last,
                },
                offset,
            ),
            Position::Reset { timestamp, .. } => Placement::Reset(
                leader,
                Query {
                    tp: tp.clone(),
                    timestamp,
                    leader_epoch,
                },
            ),
            Position::At { offset, .. } => {
                let node = match p.replica() {
                    Some((r, until)) if self.now < until && self.cluster.broker(r).is_some() => r,
                    Some(_) => {
                        p.with_rare(|d| d.replica = None);
                        leader
                    }
                    None => leader,
                };
                Placement::Fetch(
                    node,
                    SessionPartition {
                        topic_id: leaders.id(),
                        fetch_offset: offset,
                        epoch: p.epoch,
                        current_leader_epoch: leader_epoch.0,
                    },
                )
            }
            _ => Placement::Idle,
        }
    }
}

/// The instants at which partitions come out of a backoff, in order, so that
/// [`Fetcher::poll_timeout`] finds the next one without visiting every partition
/// (invariant 8). Instants that have passed are dropped as planning goes by.
#[derive(Debug, Default)]
struct Timers {
    at: BTreeMap<Instant, BTreeSet<TopicPartition>>,
}

impl Timers {
    /// Whether a partition's `not_before` can make it fetchable (or ask for its committed
    /// offset) when it passes: what `poll_timeout` reports.
    fn wanted(p: &Part) -> Option<Instant> {
        let timed = matches!(
            p.position,
            Position::At { .. }
                | Position::Reset { .. }
                | Position::Validate { .. }
                | Position::AwaitCommitted
        );
        p.not_before.filter(|_| timed && !p.paused)
    }

    /// Files `tp` under the instant its state asks for (if any), and no other.
    fn arm(&mut self, tp: &TopicPartition, p: &mut Part) {
        let want = Timers::wanted(p);
        if want != p.armed {
            self.disarm(tp, p);
            if let Some(t) = want {
                self.at.entry(t).or_default().insert(tp.clone());
            }
            p.armed = want;
        }
    }

    /// Takes `tp` out of the timers (it is unassigned or starts afresh).
    fn disarm(&mut self, tp: &TopicPartition, p: &mut Part) {
        if let Some(t) = p.armed.take() {
            if let Some(set) = self.at.get_mut(&t) {
                set.remove(tp);
                if set.is_empty() {
                    self.at.remove(&t);
                }
            }
        }
    }

    /// Takes out the partitions filed under instants up to `now` (`poll_timeout` never
    /// returns those): their backoff is over, planning looks at them again.
    fn take_due(&mut self, now: Instant) -> Vec<TopicPartition> {
        let mut due = Vec::new();
        while self.at.first_key_value().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, tps)) = self.at.pop_first() {
                due.extend(tps);
            }
        }
        due
    }
}

/// One broker's side of fetching: its fetch session, which holds the partitions placed
/// with it (invariant 9), and what waits for its fetch in flight.
#[derive(Debug, Default)]
struct NodeFetch {
    session: FetchSession,
    /// Partitions that changed while this broker's fetch held them: planned again when it
    /// ends (invariant 9).
    deferred: Vec<TopicPartition>,
    /// A partition placed here whose next batch did not fit beside the rest of a response:
    /// the next fetch is for it alone.
    solo: Option<TopicPartition>,
}

/// The fetcher. See the module documentation.
pub(crate) struct Fetcher {
    cfg: FetchConfig,
    parts: BTreeMap<TopicPartition, Part>,
    /// Per broker: its fetch session and what waits for its fetch.
    nodes: BTreeMap<NodeId, NodeFetch>,
    /// Brokers with a fetch in flight.
    fetching: HashMap<NodeId, RequestId>,
    /// Broker-level backoff after top-level fetch errors.
    node_backoff: HashMap<NodeId, (Retry, Instant)>,
    /// Partitions by the instant their backoff ends.
    timers: Timers,
    /// Partitions whose placement may have changed since the last plan (invariant 9).
    dirty: BTreeSet<TopicPartition>,
    /// Every partition is to be planned again (the assignment changed).
    all_dirty: bool,
    /// The metadata generation the partitions were last all planned under: a newer one
    /// plans them all again (leaders, epochs and replicas may have moved).
    planned_generation: Option<MetadataGeneration>,
    /// Partitions waiting for metadata (invariant 10).
    metadata_waiters: BTreeSet<TopicPartition>,
    /// Partitions waiting for the application to free memory (and maybe some no longer
    /// waiting), planned again once it has: `room_seen` is the budget's count of frees
    /// when they were last looked at.
    room_waiters: BTreeSet<TopicPartition>,
    room_seen: u64,
    /// Partitions reading from a preferred replica, by the end of its lease (and maybe
    /// some no longer reading from it): planned again when it ends.
    leases: BTreeMap<Instant, Vec<TopicPartition>>,
    /// Every partition waiting to be handed to the group for its committed offset (and
    /// maybe some that no longer are), so that handing them over does not walk the
    /// assignment on every pass of the I/O loop.
    await_committed: BTreeSet<TopicPartition>,
    sent: HashMap<RequestId, Sent>,
    rotation: HashMap<NodeId, usize>,
    queue: VecDeque<Transmit>,
    /// A planning pass made positions fetchable that it had already passed over.
    replan: bool,
    events: VecDeque<FetchEvent>,
    budget: Arc<Budget>,
    /// Spare decompression buffers, given back by dropped chunks.
    spares: Pool,
    /// Bytes the fetches in flight may bring.
    reserved: usize,
    /// Whether the driver calls [`Fetcher::decode_deferred`] after sending what
    /// [`Fetcher::poll_transmit`] hands out, so that answers may be decoded then.
    defer_decoding: bool,
    /// Answers whose records wait for [`Fetcher::decode_deferred`], and the room set aside
    /// for decoding them.
    deferred: Vec<DeferredAnswer>,
    deferred_reserved: usize,
    /// How many bytes of memory decoding took per byte of record set, lately:
    /// decompression and the record index (1 until measured, never below
    /// [`MIN_EXPANSION`]). Sizes fetches so that a response and what it
    /// decodes into fit the room together.
    expansion: f64,
    jitter: Box<dyn Jitter + Send>,
    next_id: RequestId,
    /// Brokers already reported as speaking no Fetch (or ListOffsets) version we do.
    unsupported: HashMap<NodeId, String>,
}

impl Fetcher {
    /// A fetcher with nothing assigned.
    pub fn new(cfg: FetchConfig, budget: Arc<Budget>, jitter: Box<dyn Jitter + Send>) -> Fetcher {
        Fetcher {
            cfg,
            parts: BTreeMap::new(),
            nodes: BTreeMap::new(),
            fetching: HashMap::new(),
            node_backoff: HashMap::new(),
            timers: Timers::default(),
            dirty: BTreeSet::new(),
            all_dirty: false,
            planned_generation: None,
            metadata_waiters: BTreeSet::new(),
            room_waiters: BTreeSet::new(),
            room_seen: 0,
            leases: BTreeMap::new(),
            await_committed: BTreeSet::new(),
            sent: HashMap::new(),
            rotation: HashMap::new(),
            queue: VecDeque::new(),
            replan: false,
            events: VecDeque::new(),
            spares: Pool::with_size(Arc::clone(&budget), DECODE_SPARES),
            budget,
            reserved: 0,
            defer_decoding: false,
            deferred: Vec::new(),
            deferred_reserved: 0,
            expansion: 1.0,
            jitter,
            next_id: RequestId(1),
            unsupported: HashMap::new(),
        }
    }

    /// Whether Fetch answers may be decoded after the next fetch to their broker has gone
    /// out: the driver then calls [`Fetcher::decode_deferred`] once it has sent what
    /// [`Fetcher::poll_transmit`] handed out, and plans again after it. Applying an answer
    /// then only moves each partition's position to where its batch headers say its
    /// records end, so that the broker works on the next fetch while the records are
    /// checked and decompressed (off by default: every answer is decoded as it is applied).
    pub fn set_defer_decoding(&mut self, on: bool) {
        self.defer_decoding = on;
    }

    // ----- commands ----------------------------------------------------------------------

    /// The position a seek target starts from.
    fn start(&mut self, tp: &TopicPartition, epoch: PositionEpoch, to: SeekTo) -> Position {
        match to {
            SeekTo::Offset(o) => Position::At {
                offset: o,
                leader_epoch: LeaderEpoch::UNKNOWN,
            },
            SeekTo::Beginning => Position::Reset {
                timestamp: list_offsets::EARLIEST,
                from: None,
            },
            SeekTo::End => Position::Reset {
                timestamp: list_offsets::LATEST,
                from: None,
            },
            SeekTo::Default if self.cfg.use_committed => Position::AwaitCommitted,
            SeekTo::Default => default_reset(&self.cfg, &mut self.events, tp, epoch, None, None),
        }
    }

    /// Replaces the assignment. Partitions that stay with the same epoch keep their state.
    /// Every partition is planned again (invariant 9); the map is built anew from the
    /// sorted list, which packs it.
    pub fn assign(
        &mut self,
        mut list: Vec<(TopicPartition, PositionEpoch, SeekTo)>,
        cluster: &mut Cluster,
    ) {
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list.dedup_by(|later, first| later.0 == first.0);
        let mut old = std::mem::take(&mut self.parts).into_iter().peekable();
        let mut parts = Vec::with_capacity(list.len());
        // The partitions of a topic share one allocation of its name (and compare fast).
        let mut topic: Option<Arc<str>> = None;
        for (tp, epoch, to) in list {
            let tp = match &topic {
                Some(t) if **t == *tp.topic() => TopicPartition::new(Arc::clone(t), tp.partition()),
                _ => {
                    topic = Some(Arc::clone(tp.topic_arc()));
                    tp
                }
            };
            while let Some((gone, mut p)) = old.next_if(|(o, _)| *o < tp) {
                self.unassigned(&gone, &mut p);
            }
            let kept = old.next_if(|(o, _)| *o == tp).map(|(_, p)| p);
            let p = match kept {
                Some(p) if p.epoch == epoch => p,
                kept => {
                    let position = self.start(&tp, epoch, to);
                    if position == Position::AwaitCommitted {
                        self.await_committed.insert(tp.clone());
                    }
                    let mut p = Part::new(epoch, position);
                    if let Some(mut before) = kept {
                        // Requests in flight stay accounted for (invariant 1); their
                        // answers are stale by epoch.
                        self.timers.disarm(&tp, &mut before);
                        p.in_flight = before.in_flight;
                        p.fetch_node = before.fetch_node;
                    }
                    p
                }
            };
            parts.push((tp, p));
        }
        for (gone, mut p) in old {
            self.unassigned(&gone, &mut p);
        }
        self.parts = parts.into_iter().collect();
        self.all_dirty = true;
        let mut topics: Vec<Arc<str>> = Vec::new();
        for tp in self.parts.keys() {
            if topics.last().is_none_or(|t| t != tp.topic_arc()) {
                topics.push(Arc::clone(tp.topic_arc()));
            }
        }
        cluster.set_interest(Interest::Assignment, topics);
    }

    /// `tp` is no longer assigned: out of the timers, its fetch session and the waiters.
    fn unassigned(&mut self, tp: &TopicPartition, p: &mut Part) {
        self.timers.disarm(tp, p);
        if let Some(n) = p.fetch_node.take() {
            if let Some(nf) = self.nodes.get_mut(&n) {
                nf.session.unwant(tp);
            }
        }
        self.metadata_waiters.remove(tp);
    }

    /// Moves one partition's position (a seek, or a resume after a pause); keeps its pause
    /// state unless `resume`.
    pub fn seek(&mut self, tp: &TopicPartition, epoch: PositionEpoch, to: SeekTo, resume: bool) {
        if !self.parts.contains_key(tp) {
            return;
        }
        let position = self.start(tp, epoch, to);
        if position == Position::AwaitCommitted {
            self.await_committed.insert(tp.clone());
        }
        if let Some(p) = self.parts.get_mut(tp) {
            let paused = p.paused && !resume;
            // Requests in flight stay accounted for (invariant 1); their answers are stale
            // by epoch.
            let (in_flight, fetch_node) = (p.in_flight, p.fetch_node);
            self.timers.disarm(tp, p);
            *p = Part::new(epoch, position);
            p.paused = paused;
            p.in_flight = in_flight;
            p.fetch_node = fetch_node;
            self.dirty.insert(tp.clone());
        }
    }

    /// Stops fetching these partitions.
    pub fn pause(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(p) = self.parts.get_mut(tp) {
                p.paused = true;
                self.timers.arm(tp, p);
                self.dirty.insert(tp.clone());
            }
        }
    }

    /// Partitions waiting for their committed offset, now marked as asked for.
    /// Only the partitions in `await_committed` are visited (those no longer waiting leave
    /// it).
    pub fn take_committed_wanted(&mut self, now: Instant) -> Vec<(TopicPartition, PositionEpoch)> {
        let mut out = Vec::new();
        let parts = &mut self.parts;
        self.await_committed.retain(|tp| {
            let Some(p) = parts.get_mut(tp) else {
                return false;
            };
            if p.position != Position::AwaitCommitted {
                return false;
            }
            let waiting = p.not_before.is_some_and(|t| now < t);
            if p.paused || waiting {
                return true;
            }
            p.position = Position::CommittedRequested;
            out.push((tp.clone(), p.epoch));
            false
        });
        out
    }

    /// The committed offset of `tp` as the group knows it (`None`: nothing committed).
    pub fn apply_committed(
        &mut self,
        tp: &TopicPartition,
        epoch: PositionEpoch,
        committed: Option<(i64, LeaderEpoch)>,
    ) {
        let Some(p) = self.parts.get_mut(tp) else {
            return;
        };
        if p.epoch != epoch || p.position != Position::CommittedRequested {
            return;
        }
        let position = match committed {
            Some((offset, leader_epoch)) => {
                // The application learns the position now (for `position()`), not only
                // with the first records.
                self.events.push_back(FetchEvent::Chunk(Chunk::position(
                    tp.clone(),
                    epoch,
                    offset,
                    offset,
                    leader_epoch,
                )));
                if leader_epoch.known().is_some() {
                    Position::Validate {
                        offset,
                        leader_epoch,
                    }
                } else {
                    Position::At {
                        offset,
                        leader_epoch,
                    }
                }
            }
            None => default_reset(&self.cfg, &mut self.events, tp, epoch, None, None),
        };
        p.position = position;
        self.timers.arm(tp, p);
        self.dirty.insert(tp.clone());
    }

    /// Fetching the committed offset of `tp` failed: ask again after a backoff.
    pub fn committed_failed(&mut self, tp: &TopicPartition, epoch: PositionEpoch, now: Instant) {
        let policy = self.cfg.retry_backoff;
        if let Some(p) = self.parts.get_mut(tp) {
            if p.epoch == epoch && p.position == Position::CommittedRequested {
                p.position = Position::AwaitCommitted;
                p.backoff(now, &policy, &mut *self.jitter);
                self.timers.arm(tp, p);
                self.await_committed.insert(tp.clone());
            }
        }
    }

    // ----- planning ----------------------------------------------------------------------

    /// The next request to send, if any.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        if self.queue.is_empty() {
            self.replan = false;
            self.plan(now, links, cluster);
            if self.replan && self.queue.is_empty() {
                // Validation was skipped (the leader has no OffsetForLeaderEpoch v3): those
                // positions are fetchable now, in this round, not at the next wakeup (there
                // may be none). They are At with the leader seen: no second skip.
                self.plan(now, links, cluster);
            }
        }
        self.queue.pop_front()
    }

    /// One planning pass: the partitions whose placement may have changed are placed
    /// (invariant 9), resets and validations go out, then each broker's fetch.
    fn plan(&mut self, now: Instant, links: &mut Links, cluster: &mut Cluster) {
        self.spares.reclaim_if_starved();
        self.mark_due(now, cluster);
        let all = std::mem::take(&mut self.all_dirty);
        let dirty = std::mem::take(&mut self.dirty);
        let mut planner = Planner {
            now,
            frees: self.room_seen,
            cluster,
            topic: None,
            events: &mut self.events,
            metadata_waiters: &mut self.metadata_waiters,
            room_waiters: &mut self.room_waiters,
            nodes: &mut self.nodes,
            fetching: &self.fetching,
            sent: &self.sent,
            resets: BTreeMap::new(),
            checks: BTreeMap::new(),
        };
        if all {
            for (tp, p) in self.parts.iter_mut() {
                planner.place(tp, p);
            }
        } else {
            for tp in &dirty {
                if let Some(p) = self.parts.get_mut(tp) {
                    planner.place(tp, p);
                }
            }
        }
        let (resets, checks) = (planner.resets, planner.checks);
        if !self.metadata_waiters.is_empty() {
            cluster.request_update();
        }
        for (node, list) in resets {
            self.plan_reset(node, list, now, links);
        }
        for (node, list) in checks {
            self.plan_validate(node, list, now, links);
        }
        self.plan_fetches(now, links);
    }

    /// Marks the partitions whose wait is over (invariant 9): a backoff or a replica's
    /// lease that ended, memory the application freed, newer metadata (all of them).
    fn mark_due(&mut self, now: Instant, cluster: &Cluster) {
        for tp in self.timers.take_due(now) {
            if let Some(p) = self.parts.get_mut(&tp) {
                p.armed = None;
            }
            self.dirty.insert(tp);
        }
        while let Some(e) = self.leases.first_entry() {
            if *e.key() > now {
                break;
            }
            self.dirty.extend(e.remove());
        }
        let frees = self.budget.app_frees();
        if frees != self.room_seen {
            self.room_seen = frees;
            let waiting = std::mem::take(&mut self.room_waiters);
            self.dirty.extend(waiting);
        }
        let generation = cluster.generation();
        if self.planned_generation != Some(generation) {
            self.planned_generation = Some(generation);
            self.all_dirty = true;
            self.metadata_waiters.clear();
        }
    }

    /// Sends each broker's fetch: the changes to its session (or, alone, a partition
    /// whose batch did not fit beside others), within the byte budget.
    fn plan_fetches(&mut self, now: Instant, links: &mut Links) {
        let ready: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(n, nf)| nf.session.wanted() > 0 && !self.fetching.contains_key(n))
            .map(|(n, _)| *n)
            .collect();
        if ready.is_empty() {
            return;
        }
        // Fetch only with a useful share of the budget free (or nothing held at all): an
        // application that holds most of it gets no trickle of tiny, wasted fetches.
        let mut room = self
            .budget
            .room_for_response()
            .saturating_sub(self.reserved + self.deferred_reserved);
        let min_room = (self.budget.cap() / MIN_ROOM_DIVISOR).max(1);
        if room < min_room && self.budget.used() + self.reserved + self.deferred_reserved > 0 {
            if self.reserved == 0 {
                // Nothing in flight will wake us: the next release will (decoding deferred
                // answers plans again, see `decode_deferred`).
                self.budget.wake_on_release();
                room = self
                    .budget
                    .room_for_response()
                    .saturating_sub(self.deferred_reserved);
            }
            if room < min_room {
                return;
            }
        }
        for node in ready {
            if room == 0 {
                break;
            }
            if self.node_backoff.get(&node).is_some_and(|(_, t)| now < *t) {
                continue;
            }
            let route = Route::node(node, Lane::Fetch);
            let Some(versions) = links.ready(route, now) else {
                continue;
            };
            let Some(v) = versions.pick::<FetchRequest>() else {
                let msg = versions.unsupported::<FetchRequest>(route.peer);
                self.report_unsupported(node, msg);
                continue;
            };
            // A partition whose batch did not fit beside others goes alone, for one batch.
            let solo = self.solo_at(node);
            // Room for the response and for what it decodes into (decompression, the
            // record index), as recent responses did; a solo fetch asks for one batch
            // (KIP-74 returns it whole).
            let max_bytes = if solo.is_some() {
                1
            } else {
                (self.cfg.fetch_max_bytes.max(1) as usize)
                    .min((room as f64 / (1.0 + self.expansion)) as usize)
                    .max(1)
            };
            room = room.saturating_sub((max_bytes as f64 * (1.0 + self.expansion)) as usize);
            self.queue_fetch(node, route, v, max_bytes, solo);
        }
    }

    /// The partition placed with `node` that is to be fetched alone, with its state, if
    /// it still is.
    fn solo_at(&mut self, node: NodeId) -> Option<(TopicPartition, SessionPartition)> {
        let nf = self.nodes.get_mut(&node)?;
        let tp = nf.solo.take()?;
        self.parts
            .get(&tp)
            .filter(|p| p.solo && p.fetch_node == Some(node))?;
        let s = *nf.session.wanted_state(&tp)?;
        Some((tp, s))
    }

    fn report_unsupported(&mut self, node: NodeId, msg: String) {
        if self.unsupported.get(&node) != Some(&msg) {
            log::error!("{msg}");
            self.events
                .push_back(FetchEvent::Error(Error::unsupported(msg.clone()), None));
            self.unsupported.insert(node, msg);
        }
    }

    fn plan_reset(
        &mut self,
        node: NodeId,
        list: Vec<(Query, PositionEpoch)>,
        now: Instant,
        links: &mut Links,
    ) {
        let Some((route, versions, id, tag)) = self.control_request(node, now, links) else {
            // Planned again until the link is ready.
            self.dirty.extend(list.into_iter().map(|(q, _)| q.tp));
            return;
        };
        let queries: Vec<Query> = list.iter().map(|(q, _)| q.clone()).collect();
        match offsets::request(
            route,
            &versions,
            &queries,
            self.cfg.isolation_level,
            tag,
            self.cfg.request_timeout,
        ) {
            Ok(t) => {
                self.mark_in_flight(list.iter().map(|(q, _)| &q.tp), id);
                self.sent.insert(
                    id,
                    Sent::Reset {
                        route,
                        parts: list
                            .into_iter()
                            .map(|(q, e)| (q.tp, e, q.timestamp))
                            .collect(),
                    },
                );
                self.queue.push_back(t);
            }
            Err(Unsendable::NoVersion(msg) | Unsendable::TooOld(msg)) => {
                self.report_unsupported(node, msg);
                let policy = self.cfg.retry_backoff;
                for (q, _) in &list {
                    if let Some(p) = self.parts.get_mut(&q.tp) {
                        p.backoff(now, &policy, &mut *self.jitter);
                        self.timers.arm(&q.tp, p);
                    }
                }
            }
        }
    }

    /// A request on `node`'s control lane: its route, the versions the link speaks, and a
    /// fresh id and tag; `None` while the link is not ready (it is then wanted).
    fn control_request(
        &mut self,
        node: NodeId,
        now: Instant,
        links: &mut Links,
    ) -> Option<(Route, Arc<Versions>, RequestId, Tag)> {
        let route = Route::node(node, Lane::Control);
        let versions = links.ready(route, now)?;
        let id = self.next_id.take_next();
        let tag = Tag {
            owner: Owner::Fetcher,
            id,
        };
        Some((route, versions, id, tag))
    }

    /// Marks the partitions `tps` as waiting for request `id`.
    fn mark_in_flight<'a>(&mut self, tps: impl Iterator<Item = &'a TopicPartition>, id: RequestId) {
        for tp in tps {
            if let Some(p) = self.parts.get_mut(tp) {
                p.in_flight = Some(id);
            }
        }
    }

    /// Sends the validation of `list` (positions led by `node`), or, when the broker
    /// speaks no OffsetForLeaderEpoch from v3, takes the positions as they are.
    fn plan_validate(
        &mut self,
        node: NodeId,
        list: Vec<(Check, PositionEpoch, i64)>,
        now: Instant,
        links: &mut Links,
    ) {
        let Some((route, versions, id, tag)) = self.control_request(node, now, links) else {
            // Planned again until the link is ready.
            self.dirty.extend(list.into_iter().map(|(c, _, _)| c.tp));
            return;
        };
        let checks: Vec<Check> = list.iter().map(|(c, _, _)| c.clone()).collect();
        match validate::request(route, &versions, &checks, tag, self.cfg.request_timeout) {
            Ok(t) => {
                self.mark_in_flight(list.iter().map(|(c, _, _)| &c.tp), id);
                let parts = list
                    .into_iter()
                    .map(|(c, e, offset)| (c.tp, e, offset, c.current_leader_epoch))
                    .collect();
                self.sent.insert(id, Sent::Validate { route, parts });
                self.queue.push_back(t);
            }
            Err(why) => {
                log::debug!("{why}: positions on {route} are not validated");
                for (c, _, offset) in list {
                    if let Some(p) = self.parts.get_mut(&c.tp) {
                        p.position = Position::At {
                            offset,
                            leader_epoch: c.leader_epoch,
                        };
                        p.leader_seen = Some((node, c.current_leader_epoch));
                    }
                    self.dirty.insert(c.tp);
                }
                self.replan = true;
            }
        }
    }

    /// Queues the fetch to `node`: the changes to its session, or `solo` alone in a
    /// sessionless request that leaves the session as it is (invariant 2).
    fn queue_fetch(
        &mut self,
        node: NodeId,
        route: Route,
        v: ApiVersion,
        max_bytes: usize,
        solo: Option<(TopicPartition, SessionPartition)>,
    ) {
        let id = self.next_id.take_next();
        let partition_max = self.cfg.max_partition_fetch_bytes;
        let nf = self.nodes.entry(node).or_default();
        let (mut plan, v, solo) = match solo {
            Some((tp, s)) => {
                let v = if s.topic_id.is_zero() {
                    v.min(ApiVersion(12))
                } else {
                    v
                };
                let plan = FetchPlan {
                    session_id: 0,
                    session_epoch: -1,
                    partitions: vec![s.on_wire(&tp, partition_max)],
                    forgotten: Vec::new(),
                    full: true,
                };
                (plan, v, Some((tp, s.epoch, s.fetch_offset)))
            }
            None => {
                let v = if nf.session.ids_known() {
                    v
                } else {
                    v.min(ApiVersion(12))
                };
                let plan = nf.session.plan(v.get() >= 7, v.get() >= 13, partition_max);
                (plan, v, None)
            }
        };
        // Rotate for fairness: the broker fills partitions in request order.
        let turn = self.rotation.entry(node).or_insert(0);
        let n = plan.partitions.len().max(1);
        plan.partitions.rotate_left(*turn % n);
        *turn = turn.wrapping_add(1);
        let mut topics: Vec<FetchTopic> = Vec::new();
        for w in &plan.partitions {
            let part = FetchPartition {
                partition: w.tp.partition(),
                current_leader_epoch: w.current_leader_epoch,
                fetch_offset: w.fetch_offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: w.max_bytes,
            };
            match topics.last_mut() {
                Some(t) if t.topic == w.tp.topic() => t.partitions.push(part),
                _ => topics.push(FetchTopic {
                    topic: w.tp.topic().to_owned(),
                    topic_id: w.topic_id,
                    partitions: vec![part],
                }),
            }
        }
        let mut forgotten: Vec<ForgottenTopic> = Vec::new();
        for (tp, tid) in &plan.forgotten {
            match forgotten.last_mut() {
                Some(t) if t.topic == tp.topic() && t.topic_id == *tid => {
                    t.partitions.push(tp.partition())
                }
                _ => forgotten.push(ForgottenTopic {
                    topic: tp.topic().to_owned(),
                    topic_id: *tid,
                    partitions: vec![tp.partition()],
                }),
            }
        }
        let req = FetchRequest {
            replica_id: -1,
            max_wait_ms: self.cfg.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32,
            min_bytes: self.cfg.fetch_min_bytes,
            max_bytes: max_bytes.min(i32::MAX as usize) as i32,
            isolation_level: self.cfg.isolation_level,
            session_id: plan.session_id,
            session_epoch: plan.session_epoch,
            topics,
            forgotten_topics_data: forgotten,
            rack_id: self.cfg.client_rack.clone(),
        };
        let timeout = self.cfg.request_timeout + self.cfg.fetch_max_wait;
        let tag = Tag {
            owner: Owner::Fetcher,
            id,
        };
        self.reserved += max_bytes;
        self.fetching.insert(node, id);
        self.sent.insert(
            id,
            Sent::Fetch {
                node,
                route,
                reserved: max_bytes,
                solo,
            },
        );
        self.queue
            .push_back(Transmit::new(route, &req, v, tag, timeout));
    }

    // ----- answers -----------------------------------------------------------------------

    /// Releases the partitions of request `id` and returns what it was: its partitions are
    /// no longer in flight once it is out of `sent` (see `Part::in_flight`), or, for a
    /// fetch, once its broker is out of `fetching` (see `Part::fetch_node`). Those of a
    /// reset or validation, and those a fetch held while they changed, are planned again
    /// (invariant 9).
    fn release(&mut self, id: RequestId) -> Option<Sent> {
        let sent = self.sent.remove(&id)?;
        match &sent {
            Sent::Fetch { node, reserved, .. } => {
                self.reserved -= reserved;
                self.fetching.remove(node);
                if let Some(nf) = self.nodes.get_mut(node) {
                    self.dirty.extend(nf.deferred.drain(..));
                }
            }
            Sent::Reset { parts, .. } => {
                self.dirty.extend(parts.iter().map(|(tp, ..)| tp.clone()));
            }
            Sent::Validate { parts, .. } => {
                self.dirty.extend(parts.iter().map(|(tp, ..)| tp.clone()));
            }
        }
        Some(sent)
    }

    /// Request `id` got no answer.
    pub fn handle_failure(&mut self, id: RequestId, failure: &Failure, now: Instant) {
        let Some(sent) = self.release(id) else { return };
        log::debug!("fetcher request {id} failed: {failure}");
        let policy = self.cfg.retry_backoff;
        match sent {
            Sent::Fetch { node, .. } => {
                if let Some(nf) = self.nodes.get_mut(&node) {
                    nf.session.disconnected();
                }
                self.replica_unreachable(node);
            }
            Sent::Reset { parts, .. } => {
                for (tp, epoch, _) in parts {
                    if let Some(p) = self.parts.get_mut(&tp).filter(|p| p.epoch == epoch) {
                        p.backoff(now, &policy, &mut *self.jitter);
                        self.timers.arm(&tp, p);
                    }
                }
            }
            Sent::Validate { parts, .. } => {
                for (tp, epoch, ..) in parts {
                    if let Some(p) = self.parts.get_mut(&tp).filter(|p| p.epoch == epoch) {
                        p.backoff(now, &policy, &mut *self.jitter);
                        self.timers.arm(&tp, p);
                    }
                }
            }
        }
    }

    /// A link could not be opened: a fetch link to a preferred read replica means reading
    /// from the leader instead.
    pub fn link_failed(&mut self, route: Route) {
        if let (Peer::Node(node), Lane::Fetch) = (route.peer, route.lane) {
            self.replica_unreachable(node);
        }
    }

    /// The fetch link to `node` failed (it could not be opened, or a fetch on it got no
    /// answer): partitions reading from `node` as their preferred read replica go back to
    /// their leader (KIP-392), rather than wait for the replica until the lease ends.
    /// Only the partitions with a lease are visited.
    pub fn replica_unreachable(&mut self, node: NodeId) {
        for tp in self.leases.values().flatten() {
            let Some(p) = self.parts.get_mut(tp) else {
                continue;
            };
            if p.replica().is_some_and(|(r, _)| r == node) {
                log::debug!("partition {tp}: replica {node} unreachable, back to the leader");
                p.with_rare(|d| d.replica = None);
                self.dirty.insert(tp.clone());
            }
        }
    }

    /// Applies the answer to request `id`.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        version: ApiVersion,
        body: FrameBuf,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        let Some(sent) = self.release(id) else { return };
        match sent {
            Sent::Fetch {
                node, route, solo, ..
            } => self.on_fetch(node, route, solo, version, body, now, links, cluster),
            Sent::Reset { route, parts } => {
                self.on_reset(route, parts, version, &body, now, links, cluster)
            }
            Sent::Validate { route, parts } => {
                self.on_validate(route, parts, version, &body, now, links, cluster)
            }
        }
    }

    /// Applies a Fetch answer: its session part and top-level error, then the part of every
    /// partition that is still where the request found it (invariant 2), then what the
    /// whole answer taught (newer metadata needed, how much data expands when decoded).
    #[allow(clippy::too_many_arguments)]
    fn on_fetch(
        &mut self,
        node: NodeId,
        route: Route,
        solo: Option<(TopicPartition, PositionEpoch, i64)>,
        version: ApiVersion,
        body: FrameBuf,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        if self.deferred.iter().any(|d| d.node == node) {
            // An answer is never applied before the one that preceded it.
            self.decode_deferred(now);
        }
        let frame = Arc::new(FetchedFrame::new(body, &self.budget));
        let Some(resp) = self.decode_fetch_answer(node, route, version, &frame, now, links) else {
            return;
        };
        if !self.apply_top_level_answer(node, route, solo.is_none(), &resp, now) {
            return;
        }
        // Each answered partition is matched to what it was fetched at through the
        // session (or the one partition fetched alone), not a list of the request's.
        let mut answer = FetchAnswerContext {
            node,
            solo: solo.is_some(),
            leases: Vec::new(),
            frame: &frame,
            now,
            frees_before: self.budget.app_frees(),
            need_metadata: false,
            decoded_in: 0,
            decoded_out: 0,
            defer: self.defer_decoding && solo.is_none(),
            defer_room: self
                .budget
                .room()
                .saturating_sub(self.reserved + self.deferred_reserved),
            expansion: self.expansion,
            deferred: Vec::new(),
        };
        for (ti, t) in resp.responses.iter().enumerate() {
            let Some(name) = answered_topic_name(t, version, cluster) else {
                answer.need_metadata = true;
                continue;
            };
            for (pi, data) in t.partitions.iter().enumerate() {
                let tp = TopicPartition::new(Arc::clone(&name), data.partition_index);
                let at = match &solo {
                    Some((alone, epoch, offset)) => (*alone == tp).then_some((*epoch, *offset)),
                    None => self
                        .nodes
                        .get(&node)
                        .and_then(|nf| nf.session.fetched_at(&tp)),
                };
                let Some((epoch, offset)) = at else {
                    continue;
                };
                let part = PartitionAnswer {
                    tp,
                    epoch,
                    offset,
                    data,
                    index: (ti, pi),
                };
                self.apply_partition_answer(&mut answer, &part, cluster);
            }
        }
        for (until, tp) in std::mem::take(&mut answer.leases) {
            self.leases.entry(until).or_default().push(tp);
        }
        self.learn_from_fetch_answer(&answer, cluster);
        let parts = std::mem::take(&mut answer.deferred);
        if !parts.is_empty() {
            let reserved = parts
                .iter()
                .map(|d| {
                    let len = resp.responses[d.index.0].partitions[d.index.1].records.len;
                    (len as f64 * self.expansion) as usize
                })
                .sum();
            self.deferred_reserved += reserved;
            self.deferred.push(DeferredAnswer {
                node,
                frame: Arc::clone(&frame),
                resp,
                parts,
                reserved,
            });
        }
    }

    /// Decodes the records of the answers whose decoding was deferred
    /// ([`Fetcher::set_defer_decoding`]), as applying them would have at once, from the
    /// positions they were fetched at: the chunks, and where decoding really ends (a bad
    /// batch, one that does not fit) when that is not where the batch headers said. A
    /// partition sought or reassigned since is left alone. Returns whether anything was
    /// decoded: what decoding changed is then to be planned ([`Fetcher::poll_transmit`]).
    pub fn decode_deferred(&mut self, now: Instant) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        for d in std::mem::take(&mut self.deferred) {
            self.deferred_reserved -= d.reserved;
            self.decode_deferred_answer(&d, now);
        }
        true
    }

    fn decode_deferred_answer(&mut self, d: &DeferredAnswer, now: Instant) {
        let mut answer = FetchAnswerContext {
            node: d.node,
            solo: false,
            leases: Vec::new(),
            frame: &d.frame,
            now,
            frees_before: self.budget.app_frees(),
            need_metadata: false,
            decoded_in: 0,
            decoded_out: 0,
            defer: false,
            defer_room: 0,
            expansion: self.expansion,
            deferred: Vec::new(),
        };
        for dp in &d.parts {
            let data = &d.resp.responses[dp.index.0].partitions[dp.index.1];
            let Fetcher {
                cfg,
                parts,
                events,
                budget,
                spares,
                jitter,
                timers,
                dirty,
                room_waiters,
                ..
            } = self;
            let Some(p) = parts.get_mut(&dp.tp) else {
                continue;
            };
            if p.epoch != dp.epoch {
                // Sought or reassigned since: its records are stale (invariant 6).
                continue;
            }
            // Planning may have made the predicted position wait for a validation
            // (invariant 7), at the same offset: kept when decoding ends there.
            let planned = p.position;
            let before = Planned::of(p);
            (p.position, p.solo) = dp.before;
            let part = PartitionAnswer {
                tp: dp.tp.clone(),
                epoch: dp.epoch,
                offset: dp.offset,
                data,
                index: dp.index,
            };
            let mut apply = ApplyPartition {
                cfg,
                events,
                budget,
                spares,
                jitter: &mut **jitter,
                answer: &mut answer,
                part: &part,
                p: &mut *p,
            };
            let decoded = apply.decode_records(end_offset_in(cfg, data));
            apply.apply_decoded_records(decoded);
            if p.position == dp.predicted {
                p.position = planned;
            }
            timers.arm(&dp.tp, p);
            if p.waiting_for_room().is_some() {
                room_waiters.insert(dp.tp.clone());
            }
            if Planned::of(p) != before {
                dirty.insert(dp.tp.clone());
            }
        }
        self.learn_expansion(&answer);
    }

    /// The Fetch response in `frame`; `None` when it does not decode, after an error for
    /// the application, the broker's session treated as disconnected and the broker put in
    /// backoff.
    fn decode_fetch_answer(
        &mut self,
        node: NodeId,
        route: Route,
        version: ApiVersion,
        frame: &FetchedFrame,
        now: Instant,
        links: &mut Links,
    ) -> Option<FetchResponse> {
        match links.decode::<FetchRequest>(route, version, frame, now) {
            Ok(r) => Some(r),
            Err(e) => {
                self.events.push_back(FetchEvent::Error(
                    Error::decode(e, format!("malformed Fetch response from {route}")),
                    None,
                ));
                if let Some(nf) = self.nodes.get_mut(&node) {
                    nf.session.disconnected();
                }
                self.node_failed(node, now);
                None
            }
        }
    }

    /// Applies the session part and the top-level error of a Fetch answer; whether its
    /// partitions are to be applied (no top-level error: the broker's backoff ends).
    /// `session`: the request used the broker's fetch session (it was not a sessionless
    /// one for a batch alone).
    fn apply_top_level_answer(
        &mut self,
        node: NodeId,
        route: Route,
        session: bool,
        resp: &FetchResponse,
        now: Instant,
    ) -> bool {
        let top = ErrorCode::from_code(resp.error_code);
        if let Some(nf) = self.nodes.get_mut(&node).filter(|_| session) {
            nf.session.handle_response(top, resp.session_id);
        }
        if top.is_err() {
            log::warn!("fetch from {route} failed: {top}");
            self.node_failed(node, now);
            if !top.is_retriable() {
                self.events.push_back(FetchEvent::Error(
                    Error::broker(top, format!("fetch from {route} failed")),
                    None,
                ));
            }
            return false;
        }
        self.node_backoff.remove(&node);
        true
    }

    /// Applies one partition's part of a Fetch answer if the partition is still at the
    /// position epoch and offset it was fetched at (invariant 2): an error from its
    /// preferred read replica, its data, an offset out of range, or another error. The
    /// partition is looked up once; the steps get it beside the rest of the fetcher.
    fn apply_partition_answer<'a>(
        &mut self,
        answer: &mut FetchAnswerContext<'a>,
        part: &PartitionAnswer<'a>,
        cluster: &Cluster,
    ) {
        let Fetcher {
            cfg,
            parts,
            events,
            budget,
            spares,
            jitter,
            timers,
            dirty,
            room_waiters,
            ..
        } = self;
        let Some(p) = parts.get_mut(&part.tp) else {
            return;
        };
        let current = matches!(p.position, Position::At { offset: o, .. } if o == part.offset);
        if p.epoch != part.epoch || !current {
            return;
        }
        let mut apply = ApplyPartition {
            cfg,
            events,
            budget,
            spares,
            jitter: &mut **jitter,
            answer,
            part,
            p: &mut *p,
        };
        let before = Planned::of(apply.p);
        let from_replica = apply
            .p
            .replica()
            .is_some_and(|(r, _)| r == apply.answer.node);
        let code = ErrorCode::from_code(part.data.error_code);
        if code.is_err() && from_replica {
            apply.leave_replica_after_error(code, cluster);
        } else {
            match code {
                ErrorCode::None => apply.data(cluster),
                ErrorCode::OFFSET_OUT_OF_RANGE => apply.reset_after_out_of_range(),
                c => apply.error(c, cluster),
            }
        }
        timers.arm(&part.tp, p);
        if p.waiting_for_room().is_some() {
            room_waiters.insert(part.tp.clone());
        }
        // An answer that changed nothing planning reads (no records, no error: most of a
        // full answer) leaves the partition where it is (invariant 9).
        if Planned::of(p) != before {
            dirty.insert(part.tp.clone());
        }
    }

    /// What a whole Fetch answer taught: newer metadata is needed, and how much memory a
    /// byte of record set took when decoded (once the sample is large enough).
    fn learn_from_fetch_answer(&mut self, answer: &FetchAnswerContext<'_>, cluster: &mut Cluster) {
        if answer.need_metadata {
            cluster.request_update();
        }
        self.learn_expansion(answer);
    }

    /// How much memory a byte of record set took when decoded, from an answer's partitions
    /// decoded whole (once the sample is large enough).
    fn learn_expansion(&mut self, answer: &FetchAnswerContext<'_>) {
        if answer.decoded_in >= MIN_EXPANSION_SAMPLE {
            let seen = answer.decoded_out as f64 / answer.decoded_in as f64;
            self.expansion = ((self.expansion + seen) / 2.0).clamp(MIN_EXPANSION, MAX_EXPANSION);
        }
    }

    fn node_failed(&mut self, node: NodeId, now: Instant) {
        let policy = self.cfg.retry_backoff;
        let (retry, until) = self
            .node_backoff
            .entry(node)
            .or_insert_with(|| (Retry::default(), now));
        *until = now + retry.failed(&policy, &mut *self.jitter);
    }

    #[allow(clippy::too_many_arguments)]
    fn on_reset(
        &mut self,
        route: Route,
        sent: Vec<(TopicPartition, PositionEpoch, i64)>,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        let policy = self.cfg.retry_backoff;
        let Ok(resp) = links.decode::<ListOffsetsRequest>(route, version, body, now) else {
            for (tp, epoch, _) in &sent {
                if let Some(p) = self.parts.get_mut(tp).filter(|p| p.epoch == *epoch) {
                    p.backoff(now, &policy, &mut *self.jitter);
                    self.timers.arm(tp, p);
                }
            }
            return;
        };
        let answers = offsets::answers(&resp);
        let touched: Vec<TopicPartition> = sent.iter().map(|(tp, ..)| tp.clone()).collect();
        for (tp, epoch, ts) in sent {
            let Some(p) = self.parts.get_mut(&tp) else {
                continue;
            };
            let from = match p.position {
                Position::Reset { timestamp, from } if timestamp == ts && p.epoch == epoch => from,
                _ => continue,
            };
            let a = offsets::answer_for(&answers, &tp);
            if a.error.is_err() {
                log::debug!("partition {tp}: ListOffsets error {}", a.error);
                p.backoff(now, &policy, &mut *self.jitter);
                if a.error.needs_metadata_refresh() {
                    cluster.request_update();
                    let generation = cluster.generation();
                    p.with_rare(|d| d.awaiting_metadata = Some(generation));
                } else if !a.error.is_retriable() && p.retry.failures() == 1 {
                    let e = Error::broker(a.error, format!("resetting the position of {tp}"))
                        .with_partition(tp.clone());
                    self.events.push_back(FetchEvent::Error(e, Some(epoch)));
                }
                continue;
            }
            if a.offset < 0 {
                // The broker has no answer for the log's start or end: a lying broker or one
                // still loading. Back off, growing; say so once.
                p.backoff(now, &policy, &mut *self.jitter);
                if p.retry.failures() == STALLS_BEFORE_REPORT {
                    let e = Error::new(
                        ErrorKind::Protocol,
                        format!(
                            "partition {tp}: the broker answers the position lookup with offset {}",
                            a.offset
                        ),
                    )
                    .with_partition(tp.clone());
                    self.events.push_back(FetchEvent::Error(e, Some(epoch)));
                }
                continue;
            }
            log::debug!("partition {tp}: position reset to {}", a.offset);
            // A reset after OFFSET_OUT_OF_RANGE is not progress yet: its backoff keeps
            // growing until a fetch from the new position succeeds.
            if from.is_none() {
                p.retry.succeeded();
            }
            p.position = Position::At {
                offset: a.offset,
                leader_epoch: a.leader_epoch,
            };
            // Found under the current leader: nothing to validate until it changes.
            p.leader_seen = None;
            self.events.push_back(FetchEvent::Chunk(Chunk::position(
                tp,
                epoch,
                from.unwrap_or(a.offset),
                a.offset,
                a.leader_epoch,
            )));
        }
        self.rearm(&touched);
    }

    /// Files the partitions `tps` in the timers as their state now asks (invariant 8).
    fn rearm(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(p) = self.parts.get_mut(tp) {
                self.timers.arm(tp, p);
            }
        }
    }

    /// Applies an OffsetForLeaderEpoch answer to the partitions still waiting for it at the
    /// position epoch and offset it was asked for (invariant 7).
    #[allow(clippy::too_many_arguments)]
    fn on_validate(
        &mut self,
        route: Route,
        sent: Vec<(TopicPartition, PositionEpoch, i64, LeaderEpoch)>,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        let policy = self.cfg.retry_backoff;
        let Ok(resp) = links.decode::<OffsetForLeaderEpochRequest>(route, version, body, now)
        else {
            for (tp, epoch, ..) in &sent {
                if let Some(p) = self.parts.get_mut(tp).filter(|p| p.epoch == *epoch) {
                    p.backoff(now, &policy, &mut *self.jitter);
                    self.timers.arm(tp, p);
                }
            }
            return;
        };
        let Peer::Node(node) = route.peer else {
            return;
        };
        let answers = validate::answers(&resp);
        let touched: Vec<TopicPartition> = sent.iter().map(|(tp, ..)| tp.clone()).collect();
        for (tp, epoch, offset, current) in sent {
            let Some(p) = self.parts.get_mut(&tp) else {
                continue;
            };
            let last = match p.position {
                Position::Validate {
                    offset: at,
                    leader_epoch,
                } if at == offset && p.epoch == epoch => leader_epoch,
                _ => continue,
            };
            let divergent = match validate::verdict_for(&answers, &tp, offset) {
                Verdict::Valid => {
                    log::debug!("partition {tp}: offset {offset} validated by {route}");
                    p.position = Position::At {
                        offset,
                        leader_epoch: last,
                    };
                    p.leader_seen = Some((node, current));
                    p.retry.succeeded();
                    continue;
                }
                Verdict::Error(code) => {
                    log::debug!("partition {tp}: OffsetForLeaderEpoch error {code}");
                    p.backoff(now, &policy, &mut *self.jitter);
                    if code.needs_metadata_refresh() {
                        cluster.request_update();
                        let generation = cluster.generation();
                        p.with_rare(|d| d.awaiting_metadata = Some(generation));
                    } else if !code.is_retriable() && p.retry.failures() == 1 {
                        let e = Error::broker(code, format!("validating the position of {tp}"))
                            .with_partition(tp.clone())
                            .with_offset(offset);
                        self.events.push_back(FetchEvent::Error(e, Some(epoch)));
                    }
                    continue;
                }
                Verdict::Truncated {
                    divergent,
                    leader_epoch,
                } => {
                    log::warn!(
                        "partition {tp}: log truncation detected: {route} (leader epoch {}) ends leader epoch {} at offset {divergent}, below the fetch position {offset}",
                        current.0,
                        leader_epoch.0
                    );
                    Some((divergent, leader_epoch))
                }
                Verdict::Unknown => {
                    log::warn!(
                        "partition {tp}: log truncation detected: {route} (leader epoch {}) has no offsets for leader epoch {} or earlier, below the fetch position {offset}",
                        current.0,
                        last.0
                    );
                    None
                }
            };
            p.position = Position::Stuck;
            p.leader_seen = Some((node, current));
            self.events.push_back(FetchEvent::Truncated {
                tp,
                epoch,
                fetch_offset: offset,
                divergent,
            });
        }
        self.rearm(&touched);
    }

    // ----- timers and events -----------------------------------------------------------

    /// The next instant a partition or broker comes out of its backoff.
    /// The partitions' instants come in order from the timers (invariant 8): the first
    /// future one with a partition not in flight (a backoff is set while a partition is
    /// not in a request, so that is nearly always the first one).
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let parts = self
            .timers
            .at
            .range((Bound::Excluded(now), Bound::Unbounded))
            .find(|(_, tps)| {
                tps.iter()
                    .any(|tp| self.parts.get(tp).is_some_and(|p| !self.held(p)))
            })
            .map(|(t, _)| *t);
        let nodes = self.node_backoff.values().map(|(_, t)| *t);
        parts.into_iter().chain(nodes).filter(|t| *t > now).min()
    }

    /// What [`Fetcher::poll_timeout`] answers, found by walking every partition (as it did
    /// before the timers): the tests hold the two equal (invariant 8).
    #[cfg(test)]
    fn poll_timeout_by_walking(&self, now: Instant) -> Option<Instant> {
        let parts = self
            .parts
            .values()
            .filter(|p| !self.held(p))
            .filter_map(Timers::wanted);
        let nodes = self.node_backoff.values().map(|(_, t)| *t);
        parts.chain(nodes).filter(|t| *t > now).min()
    }

    /// Whether `p` is held by a request in flight (invariant 1): a reset or validation,
    /// or its broker's fetch.
    fn held(&self, p: &Part) -> bool {
        p.in_flight.is_some_and(|id| self.sent.contains_key(&id))
            || p.fetch_node.is_some_and(|n| self.fetching.contains_key(&n))
    }

    /// The next event for the application. A burst (a full fetch answer's end offsets, a
    /// position for every partition) does not keep its memory once drained.
    pub fn poll_event(&mut self) -> Option<FetchEvent> {
        let e = self.events.pop_front();
        if e.is_none() && self.events.capacity() > EVENTS_KEPT {
            self.events = VecDeque::new();
        }
        e
    }
}

/// The name of a topic in a Fetch answer: as the answer gives it up to v12; from v13, by
/// its id from the metadata (`None` while the metadata does not know the id).
fn answered_topic_name(
    t: &FetchableTopicResponse,
    version: ApiVersion,
    cluster: &Cluster,
) -> Option<Arc<str>> {
    if version.get() >= 13 {
        cluster.topic_name(&t.topic_id).map(Arc::clone)
    } else {
        Some(Arc::from(t.topic.as_str()))
    }
}

/// The error for a partition whose fetch answers at `offset` keep holding data (`bytes` of
/// it) but no complete record batch at or after the offset.
fn no_complete_batch_error(tp: &TopicPartition, offset: i64, bytes: usize) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!(
            "partition {tp}: {} fetch answers at offset {offset} held {} bytes but no complete record batch at or after it (is max.partition.fetch.bytes smaller than a batch?)",
            STALLS_BEFORE_REPORT, bytes
        ),
    )
    .with_partition(tp.clone())
    .with_offset(offset)
}

/// The error for a record batch at `offset` that needs more memory than the whole budget
/// (`cap` bytes) allows.
fn batch_too_large_error(tp: &TopicPartition, offset: i64, skip_to: i64, cap: usize) -> Error {
    Error::new(
        ErrorKind::RecordTooLarge,
        format!(
            "partition {tp}: the record batch at offset {offset} needs more memory than fetch.buffer.bytes ({}) allows; raise it, or seek to {skip_to} to skip the batch",
            cap
        ),
    )
    .with_partition(tp.clone())
    .with_offset(offset)
    .with_skip_to(skip_to)
}

#[cfg(test)]
mod tests;
