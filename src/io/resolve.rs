//! Name resolution off the I/O thread. `getaddrinfo` blocks, sometimes for many seconds
//! (a resolver that does not answer), so each lookup runs on a short-lived thread of its
//! own and its answer comes back through a channel that wakes the loop. A lookup that
//! hangs only delays the link that needs it: other brokers, the group coordinator and
//! `close()` go on.
//!
//! Invariants:
//! 1. The loop never calls the system resolver itself; IP literals need no lookup.
//! 2. At most [`MAX_THREADS`] lookups run at once; more wait in a queue. A hung lookup
//!    holds one thread until the system resolver gives up; the loop never waits for it.
//! 3. Answers for lookups nobody waits for any more are dropped.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use mio::Waker;

/// Lookups running at once.
pub const MAX_THREADS: usize = 4;

/// An answer from the resolver: job id and the addresses (or why there are none).
pub type Answer = (u64, io::Result<Vec<SocketAddr>>);

/// The resolver: submit host names, collect answers.
pub struct Resolver {
    tx: Sender<Answer>,
    rx: Receiver<Answer>,
    waker: Arc<Waker>,
    queue: VecDeque<(u64, String, u16)>,
    running: usize,
    next_job: u64,
}

impl Resolver {
    /// A resolver whose answers wake `waker`.
    pub fn new(waker: Arc<Waker>) -> Resolver {
        let (tx, rx) = crossbeam_channel::unbounded();
        Resolver {
            tx,
            rx,
            waker,
            queue: VecDeque::new(),
            running: 0,
            next_job: 1,
        }
    }

    /// Starts resolving `host:port`; the answer comes from [`Resolver::answers`] with the
    /// returned job id. IP literals are answered at once.
    pub fn submit(&mut self, host: &str, port: u16) -> u64 {
        let job = self.next_job;
        self.next_job += 1;
        if let Ok(ip) = host.parse::<IpAddr>() {
            let _ = self.tx.send((job, Ok(vec![SocketAddr::new(ip, port)])));
            let _ = self.waker.wake();
            return job;
        }
        self.queue.push_back((job, host.to_owned(), port));
        self.start_queued();
        job
    }

    fn start_queued(&mut self) {
        while self.running < MAX_THREADS {
            let Some((job, host, port)) = self.queue.pop_front() else {
                return;
            };
            let tx = self.tx.clone();
            let waker = Arc::clone(&self.waker);
            let spawned = std::thread::Builder::new()
                .name("kafka-resolver".into())
                .spawn(move || {
                    let result = lookup(&host, port);
                    // Marked as an internal answer: the loop counts running threads with it.
                    let _ = tx.send((job | RUNNING_BIT, result));
                    let _ = waker.wake();
                });
            match spawned {
                Ok(_) => self.running += 1,
                Err(e) => {
                    let _ = self.tx.send((job, Err(e)));
                    let _ = self.waker.wake();
                }
            }
        }
    }

    /// Answers that arrived, without blocking.
    pub fn answers(&mut self) -> Vec<Answer> {
        let mut out = Vec::new();
        while let Ok((job, result)) = self.rx.try_recv() {
            if job & RUNNING_BIT != 0 {
                self.running -= 1;
            }
            out.push((job & !RUNNING_BIT, result));
        }
        self.start_queued();
        out
    }
}

/// Set on answers from resolver threads (job ids never reach this bit).
const RUNNING_BIT: u64 = 1 << 63;

/// The system resolver (a blocking call).
fn lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    #[cfg(feature = "__testing")]
    if let Some(answer) = testing::lookup(host, port) {
        return answer;
    }
    (host, port).to_socket_addrs().map(|a| a.collect())
}

/// Names with a fixed behaviour, for the crate's own tests of resolver faults (only with
/// the `testing` feature): `*.hang.invalid` takes [`testing::HANG`] and then fails, as a
/// resolver that does not answer; `multi.invalid` resolves to 127.0.0.2 (where nothing
/// listens) and then 127.0.0.1.
#[cfg(feature = "__testing")]
pub mod testing {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    /// How long a `*.hang.invalid` lookup takes.
    pub const HANG: Duration = Duration::from_secs(20);

    pub(super) fn lookup(host: &str, port: u16) -> Option<io::Result<Vec<SocketAddr>>> {
        if host.ends_with(".hang.invalid") {
            std::thread::sleep(HANG);
            return Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the test resolver did not answer",
            )));
        }
        if host == "multi.invalid" {
            return Some(Ok(vec![
                SocketAddr::new(Ipv4Addr::new(127, 0, 0, 2).into(), port),
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            ]));
        }
        None
    }
}
