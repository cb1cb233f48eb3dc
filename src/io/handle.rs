//! The user side's handle on the I/O thread: the commands it sends, the events it gets
//! back, and starting and stopping the thread (a panic on it is caught and reported).

use std::collections::{BTreeMap, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mio::{Poll, Waker};
use parking_lot::Mutex;

use super::{IoLoop, WAKER};
use crate::buffer::Budget;
use crate::cluster::Described;
use crate::config::ConsumerConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::chunk::Chunk;
use crate::fetch::fetcher::SeekTo;
use crate::fetch::lookup::LookupResult;
use crate::group::commit::{Committed, CommittedResult};
use crate::group::member::{CallbackKind, CallbackToken, Subscription};
use crate::metrics::stats::IoStats;
use crate::types::{CallId, Identity, LeaderEpoch, PositionEpoch, TopicPartition};

/// What the user side asks of the I/O thread.
pub(crate) enum Command {
    /// Replace the assignment. Each partition comes with its position epoch and where to
    /// start (partitions already assigned keep their fetch state if the epoch is unchanged).
    Assign(Vec<(TopicPartition, PositionEpoch, SeekTo)>),
    /// Move one partition's position (new epoch); `resume` also unpauses it.
    Seek {
        tp: TopicPartition,
        epoch: PositionEpoch,
        to: SeekTo,
        resume: bool,
    },
    /// Stop fetching these partitions.
    Pause(Vec<TopicPartition>),
    /// Look up offsets by timestamp (or the special -1 latest / -2 earliest).
    Lookup {
        id: CallId,
        query: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        reply: Sender<LookupResult>,
    },
    /// The partitions of a topic, from metadata.
    Partitions {
        id: CallId,
        topic: String,
        deadline: Instant,
        reply: Sender<Result<Vec<TopicPartition>>>,
    },
    /// Commit these offsets to the group; answered on `reply`, or as an
    /// [`Event::CommitDone`] when there is none (an asynchronous commit).
    Commit {
        id: CallId,
        offsets: BTreeMap<TopicPartition, Committed>,
        deadline: Instant,
        reply: Option<Sender<Result<()>>>,
    },
    /// The group's committed offsets of these partitions.
    Committed {
        id: CallId,
        partitions: Vec<TopicPartition>,
        deadline: Instant,
        reply: Sender<CommittedResult>,
    },
    /// The caller of request `id` stopped waiting (woken up).
    Cancel(CallId),
    /// Join the group with this subscription (or change it).
    Subscribe(Subscription),
    /// The rebalance callback `token` ran on the user thread, which now owns `assignment`
    /// (each partition with its position epoch and where to start).
    CallbackDone {
        token: CallbackToken,
        assignment: Vec<(TopicPartition, PositionEpoch, SeekTo)>,
    },
    /// Leave the group (the user thread already gave the partitions up); answered once the
    /// LeaveGroup is done.
    Leave { reply: Sender<()> },
    /// The topics the subscription matches now.
    SubscribedTopics { reply: Sender<Vec<String>> },
    /// A token from the OAUTHBEARER token thread, or why the provider gave none.
    Token(std::result::Result<crate::security::OAuthBearerToken, String>),
    /// Panic on the I/O thread (tests of the panic path only).
    #[cfg(any(test, feature = "__testing"))]
    Panic,
    /// Stop the thread.
    Shutdown,
}

/// What the I/O thread hands to the user side.
pub(crate) enum Event {
    /// Records (or just a position move) for one partition.
    Chunk(Chunk),
    /// An error for `poll` to return. `epoch` ties a partition error to a position epoch.
    Error(Error, Option<PositionEpoch>),
    /// A partition's end offset or log start offset changed (for lag and lead); -1 for
    /// one not known.
    End {
        tp: TopicPartition,
        epoch: PositionEpoch,
        end_offset: i64,
        log_start_offset: i64,
    },
    /// The partition's log was truncated below what the fetcher had read (KIP-320); the
    /// fetcher stopped the partition until a seek. `divergent`: where the log diverges and
    /// that offset's leader epoch, if the leader could say.
    Truncated {
        tp: TopicPartition,
        epoch: PositionEpoch,
        fetch_offset: i64,
        divergent: Option<(i64, LeaderEpoch)>,
    },
    /// Asynchronous commit `id` finished.
    CommitDone { id: CallId, result: Result<()> },
    /// Run a rebalance callback for `partitions`, make `owned` the assignment, then send
    /// [`Command::CallbackDone`] with it.
    Rebalance {
        token: CallbackToken,
        kind: CallbackKind,
        partitions: Vec<TopicPartition>,
        owned: Vec<TopicPartition>,
    },
    /// The member's generation or ids changed.
    Identity(Identity),
    /// A group error for `poll`; `fatal`: the member stopped and will not rejoin.
    GroupError { error: Error, fatal: bool },
    /// The I/O thread stopped for good (an error or a panic); nothing will follow.
    Stopped(Error),
}

/// When the application last called `poll`, shared with the I/O thread for
/// `max.poll.interval.ms`: written on every poll, read when the member's timer is due.
pub(crate) struct PollClock {
    base: Instant,
    /// Nanoseconds from `base` to the last poll.
    last: AtomicU64,
}

impl PollClock {
    fn new() -> PollClock {
        PollClock {
            base: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// The application is polling now.
    pub fn polled(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Release);
    }

    /// The last poll (the clock's start before the first).
    pub fn last(&self) -> Instant {
        self.base + Duration::from_nanos(self.last.load(Ordering::Acquire))
    }
}

/// The partitions of the topics the metadata cache describes, shared with the user side so
/// that `partitions_for` on such a topic is answered without a round trip to the I/O
/// thread: the I/O thread publishes the cache's [`described`](crate::cluster::Cluster::described)
/// topics after each answer it applies, the user side reads one topic under the lock.
/// Each topic carries the instant after which it must not be answered from here (its
/// metadata is then older than `metadata.max.age.ms`; `None`: no limit), so this answers
/// exactly what the cache itself would.
#[derive(Default)]
pub(crate) struct TopicCache {
    topics: Mutex<HashMap<Arc<str>, Described>>,
}

impl TopicCache {
    /// Replaces the published topics.
    pub fn publish(&self, described: Vec<Described>) {
        let topics = described
            .into_iter()
            .map(|d| (Arc::clone(&d.topic), d))
            .collect();
        *self.topics.lock() = topics;
    }

    /// The partitions of `topic`, if published and still fresh at `now`.
    pub fn partitions(&self, topic: &str, now: Instant) -> Option<Vec<TopicPartition>> {
        let topics = self.topics.lock();
        let d = topics.get(topic)?;
        d.fresh_until
            .is_none_or(|u| now < u)
            .then(|| d.partitions.clone())
    }
}

/// The I/O thread's metrics ([`IoStats`]), shared with the user side: the I/O thread
/// records into them where it does the work anyway (a request queued, an answer read, a
/// connection ready or closed, a rebalance step), and `Consumer::metrics` reads them,
/// without a round trip. Each hold of the lock is short: O(log brokers) to record, O(brokers)
/// to read.
#[derive(Default)]
pub(crate) struct SharedMetrics {
    stats: Mutex<IoStats>,
}

impl SharedMetrics {
    /// Runs `f` on the figures, under the lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut IoStats) -> R) -> R {
        f(&mut self.stats.lock())
    }
}

/// Handle to the running I/O thread.
pub(crate) struct IoHandle {
    pub events: Receiver<Event>,
    pub budget: Arc<Budget>,
    pub poll_clock: Arc<PollClock>,
    pub topics: Arc<TopicCache>,
    pub metrics: Arc<SharedMetrics>,
    commands: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    /// Disconnected when the thread has ended.
    done: Receiver<()>,
    /// Dropped to stop the OAUTHBEARER token thread, if there is one.
    _token_stop: Option<Sender<()>>,
}

impl IoHandle {
    /// Sends a command and wakes the loop.
    pub fn send(&self, c: Command) -> Result<()> {
        self.commands.send(c).map_err(|_| Error::closed())?;
        self.waker
            .wake()
            .map_err(|e| Error::io(e, "waking the I/O thread"))
    }

    /// Whether the thread is still running (it has not ended, for whatever reason).
    pub fn is_running(&self) -> bool {
        matches!(
            self.done.try_recv(),
            Err(crossbeam_channel::TryRecvError::Empty)
        )
    }

    /// Stops the thread and waits up to `timeout` for it to end (it is left to finish on
    /// its own after that). Returns an error if it did not end in time.
    pub fn shutdown(&mut self, timeout: Duration) -> Result<()> {
        let _ = self.send(Command::Shutdown);
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        match self.done.recv_timeout(timeout) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                // The thread's own panics are caught and reported as events.
                let _ = thread.join();
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(Error::timeout(
                "the I/O thread did not stop within the close timeout",
            )),
        }
    }
}

/// Starts the I/O thread.
pub(crate) fn spawn(cfg: ConsumerConfig) -> Result<IoHandle> {
    let poll = Poll::new().map_err(|e| Error::io(e, "creating the poll instance"))?;
    let waker = Arc::new(
        Waker::new(poll.registry(), WAKER).map_err(|e| Error::io(e, "creating the waker"))?,
    );
    let wake = Arc::clone(&waker);
    let budget = Budget::new(
        cfg.fetch_buffer_bytes,
        Box::new(move || {
            let _ = wake.wake();
        }),
    );
    let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
    let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let poll_clock = Arc::new(PollClock::new());
    let topics = Arc::new(TopicCache::default());
    let metrics = Arc::new(SharedMetrics::default());
    let token_provider = match (cfg.security_protocol.uses_sasl(), cfg.sasl.mechanism) {
        (true, Some(crate::security::SaslMechanism::OAuthBearer)) => cfg.token_provider(),
        _ => None,
    };
    let mut io = IoLoop::new(
        cfg,
        poll,
        Arc::clone(&waker),
        cmd_rx,
        ev_tx.clone(),
        Arc::clone(&budget),
        Arc::clone(&poll_clock),
        Arc::clone(&topics),
        Arc::clone(&metrics),
    )?;
    let thread = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || {
            let _done = done_tx;
            let stopped = match panic::catch_unwind(AssertUnwindSafe(|| io.run())) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(Error::io(e, "the I/O thread failed")),
                Err(payload) => {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown cause".to_owned());
                    Some(Error::new(
                        ErrorKind::Closed,
                        format!("the I/O thread panicked: {what}"),
                    ))
                }
            };
            if let Some(e) = stopped {
                log::error!("{e}");
                let _ = ev_tx.send(Event::Stopped(e));
            }
        })
        .map_err(|e| Error::io(e, "starting the I/O thread"))?;
    let token_stop = match token_provider {
        Some(provider) => Some(spawn_token_thread(
            provider,
            cmd_tx.clone(),
            Arc::clone(&waker),
        )?),
        None => None,
    };
    Ok(IoHandle {
        _token_stop: token_stop,
        commands: cmd_tx,
        events: ev_rx,
        budget,
        poll_clock,
        topics,
        metrics,
        waker,
        thread: Some(thread),
        done: done_rx,
    })
}

/// The first wait after a token provider failed; it doubles up to [`TOKEN_RETRY_MAX`].
const TOKEN_RETRY_MIN: Duration = Duration::from_secs(1);
const TOKEN_RETRY_MAX: Duration = Duration::from_secs(60);

/// Starts the thread that runs the user's OAUTHBEARER token provider (user code, so never
/// on the I/O thread): a token now, then a fresh one at 80 % of each token's lifetime (the
/// Java client's `sasl.login.refresh.window.factor`), each handed to the I/O thread. A
/// failure is reported and retried with a growing backoff. The thread ends when the
/// returned sender is dropped (it is not joined: a provider may block).
fn spawn_token_thread(
    provider: Arc<dyn crate::security::OAuthBearerTokenProvider>,
    commands: Sender<Command>,
    waker: Arc<Waker>,
) -> Result<Sender<()>> {
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new()
        .name("kafka-consumer-token".into())
        .spawn(move || {
            let mut retry = TOKEN_RETRY_MIN;
            loop {
                let result = panic::catch_unwind(AssertUnwindSafe(|| provider.token()));
                let (message, wait) = match result {
                    Ok(Ok(token)) => {
                        retry = TOKEN_RETRY_MIN;
                        let left = token
                            .expires_at
                            .duration_since(std::time::SystemTime::now())
                            .unwrap_or_default();
                        (Ok(token), left.mul_f64(0.8).max(TOKEN_RETRY_MIN))
                    }
                    Ok(Err(e)) => (Err(e.to_string()), retry),
                    Err(_) => (Err("the provider panicked".to_owned()), retry),
                };
                if message.is_err() {
                    retry = (retry * 2).min(TOKEN_RETRY_MAX);
                }
                if commands.send(Command::Token(message)).is_err() || waker.wake().is_err() {
                    return;
                }
                match stop_rx.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
        })
        .map_err(|e| Error::io(e, "starting the OAUTHBEARER token thread"))?;
    Ok(stop_tx)
}
