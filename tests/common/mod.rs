//! Shared harness for the integration tests: a real Kafka broker (started by
//! `scripts/broker.sh`, or the one named by `KAFKA_BOOTSTRAP`) and the Java test producer.
//!
//! A test that cannot reach its broker fails with the script's output; it never skips.

#![allow(dead_code)]

pub mod cluster;
pub mod counting;
pub mod fake;
pub mod java_member;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_consumer::{Consumer, ConsumerConfig, ConsumerRecords, OffsetReset, TopicPartition};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stdout
}

pub fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// The bootstrap address of the test broker, starting it if needed.
pub fn bootstrap() -> &'static str {
    static B: OnceLock<String> = OnceLock::new();
    B.get_or_init(|| {
        if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP") {
            return b;
        }
        let out = run(
            Command::new("bash")
                .arg(root().join("scripts/broker.sh"))
                .arg("start"),
            "starting the Kafka broker (scripts/broker.sh start)",
        );
        last_line(&out)
    })
}

/// The folder of the Kafka jars.
pub fn libs() -> &'static str {
    static L: OnceLock<String> = OnceLock::new();
    L.get_or_init(|| {
        let out = run(
            Command::new("bash")
                .arg(root().join("scripts/broker.sh"))
                .arg("libs"),
            "assembling the Kafka jars (scripts/broker.sh libs)",
        );
        last_line(&out)
    })
}

/// The compiled Java helpers (`scripts/java/*.java`, compiled once per test process into
/// its own folder).
fn java_classes() -> &'static PathBuf {
    static C: OnceLock<PathBuf> = OnceLock::new();
    C.get_or_init(|| {
        let dir = root()
            .join("target/test-java")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("creating target/test-java");
        run(
            Command::new("javac")
                .arg("-nowarn")
                .arg("-d")
                .arg(&dir)
                .arg("-cp")
                .arg(format!("{}/*", libs()))
                .arg(root().join("scripts/java/TestProducer.java"))
                .arg(root().join("scripts/java/TestAdmin.java"))
                .arg(root().join("scripts/java/AssignorCheck.java"))
                .arg(root().join("scripts/java/GroupMember.java"))
                .arg(root().join("scripts/java/SeqProducer.java"))
                .arg(root().join("scripts/java/TruncationClient.java")),
            "compiling scripts/java/TestProducer.java, TestAdmin.java, AssignorCheck.java, GroupMember.java, SeqProducer.java and TruncationClient.java",
        );
        dir
    })
}

/// A `java` command running the helper class `main` with the Kafka jars.
pub fn java(main: &str) -> Command {
    let cp = format!("{}:{}/*", java_classes().display(), libs());
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(cp)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            root()
                .join("scripts/kafka/log4j2-tools.properties")
                .display()
        ))
        .arg(main);
    cmd
}

/// Runs `scripts/java/TestAdmin.java` command `command` against the test broker with these
/// options (see the comment at the top of that file); panics with its output on failure.
/// Returns its stdout.
pub fn admin(command: &str, options: &[(&str, &str)]) -> String {
    let mut cmd = java("TestAdmin");
    cmd.arg(command).args(["--bootstrap", bootstrap()]);
    for (k, v) in options {
        cmd.args([*k, *v]);
    }
    run(&mut cmd, &format!("TestAdmin {command}"))
}

/// A long-running Java helper (a group member, an open transaction): started, then waited
/// for until it prints its ready line. Killed on drop unless [`JavaProcess::finish`]ed.
pub struct JavaProcess {
    child: Option<std::process::Child>,
    lines: std::sync::mpsc::Receiver<String>,
    what: String,
}

impl JavaProcess {
    /// Starts `cmd` (a [`java`] command) and waits up to 90 s for a stdout line starting
    /// with `ready`.
    pub fn spawn(mut cmd: Command, what: &str, ready: &str) -> JavaProcess {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start java: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut p = JavaProcess {
            child: Some(child),
            lines: rx,
            what: what.to_owned(),
        };
        p.wait_for_line(ready, Duration::from_secs(90));
        p
    }

    /// Waits for a stdout line starting with `prefix`; returns it.
    pub fn wait_for_line(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("{}: no line `{prefix}...` ({e:?})", self.what),
            }
        }
    }

    /// The next stdout line, waiting up to `limit` (then panics).
    pub fn next_line(&mut self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("{}: no line within {limit:?} ({e:?})", self.what))
    }

    /// Writes `line` to its stdin.
    pub fn send_line(&mut self, line: &str) {
        use std::io::Write;
        let child = self.child.as_mut().expect("running");
        let stdin = child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: writing to its stdin: {e}", self.what));
    }

    /// Closes its stdin (it then finishes: a member leaves the group, a held transaction
    /// is ended) and waits for it to exit successfully.
    pub fn finish(mut self) {
        let mut child = self.child.take().expect("running");
        drop(child.stdin.take());
        let status = child.wait().expect("waiting for java");
        assert!(status.success(), "{} exited with {status}", self.what);
    }
}

impl Drop for JavaProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Java consumer that is an active member of `group`, subscribed to `topic`, until it is
/// finished or dropped. `protocol` is the Java `group.protocol` (classic or consumer).
pub fn group_member(group: &str, topic: &str, protocol: &str) -> JavaProcess {
    let mut cmd = java("TestAdmin");
    cmd.arg("member")
        .args(["--bootstrap", bootstrap()])
        .args(["--group", group])
        .args(["--topic", topic])
        .args(["--protocol", protocol]);
    JavaProcess::spawn(cmd, &format!("group member of {group}"), "joined")
}

/// A topic name no earlier run used.
pub fn unique_topic(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// Options for one run of the Java test producer.
#[derive(Debug, Clone)]
pub struct Produce<'a> {
    /// Another broker than the shared test broker.
    pub bootstrap: Option<&'a str>,
    pub topic: &'a str,
    pub partitions: i32,
    pub start: u64,
    pub count: u64,
    pub compression: &'a str,
    pub value_size: usize,
    /// `Some(("txn-id", "commit" | "abort"))` to produce inside one transaction.
    pub txn: Option<(&'a str, &'a str)>,
    /// `Some((start_ms, step_ms))` to set record timestamps.
    pub timestamps: Option<(i64, i64)>,
}

impl<'a> Produce<'a> {
    pub fn new(topic: &'a str, partitions: i32, count: u64) -> Self {
        Produce {
            bootstrap: None,
            topic,
            partitions,
            start: 0,
            count,
            compression: "none",
            value_size: 0,
            txn: None,
            timestamps: None,
        }
    }

    fn command(&self) -> Command {
        let mut cmd = java("TestProducer");
        cmd.args(["--bootstrap", self.bootstrap.unwrap_or_else(|| bootstrap())])
            .args(["--topic", self.topic])
            .args(["--partitions", &self.partitions.to_string()])
            .args(["--start", &self.start.to_string()])
            .args(["--count", &self.count.to_string()])
            .args(["--compression", self.compression])
            .args(["--value-size", &self.value_size.to_string()]);
        if let Some((id, how)) = self.txn {
            cmd.args(["--transactional-id", id, "--txn", how]);
        }
        if let Some((start, step)) = self.timestamps {
            cmd.args(["--timestamp-start", &start.to_string()])
                .args(["--timestamp-step", &step.to_string()]);
        }
        cmd
    }

    /// Runs the producer; panics with its output on failure.
    pub fn run(&self) {
        run(&mut self.command(), &format!("producing to {}", self.topic));
    }

    /// Writes the records in the transaction of `self.txn` and keeps it open: returns once
    /// they are written; [`JavaProcess::finish`] then commits or aborts it (as `txn` says).
    pub fn hold_open(&self) -> JavaProcess {
        assert!(self.txn.is_some(), "hold_open needs a transaction");
        let mut cmd = self.command();
        cmd.arg("--hold");
        JavaProcess::spawn(cmd, &format!("open transaction on {}", self.topic), "open")
    }
}

/// What the producer wrote for sequence number `i` (see TestProducer.java).
pub struct Expected {
    pub partition: i32,
    pub key: Option<String>,
    pub value: Option<String>,
    pub headers: Vec<(String, Option<String>)>,
}

pub fn expected(i: u64, partitions: i32, value_size: usize) -> Expected {
    let key = (i % 5 != 1).then(|| format!("key-{i}"));
    let value = (i % 7 != 3).then(|| {
        let mut v = format!("value-{i}");
        while v.len() < value_size {
            v.push('.');
        }
        v
    });
    let mut headers = vec![("seq".to_owned(), Some(i.to_string()))];
    if i % 3 == 0 {
        headers.push(("dup".into(), Some("a".into())));
        headers.push(("dup".into(), Some("b".into())));
        headers.push(("nul".into(), None));
    }
    Expected {
        partition: (i % partitions as u64) as i32,
        key,
        value,
        headers,
    }
}

/// A consumer on the test broker with `auto.offset.reset=earliest` and a short API timeout.
pub fn consumer(extra: &[(&str, &str)]) -> Consumer {
    init_log();
    let mut cfg = ConsumerConfig::new(bootstrap())
        .client_id("it")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30));
    for (k, v) in extra {
        cfg = cfg.set(k, v).expect("valid test config");
    }
    new_consumer(cfg)
}

pub fn all_partitions(topic: &str, n: i32) -> Vec<TopicPartition> {
    (0..n).map(|p| TopicPartition::new(topic, p)).collect()
}

/// Polls until `f` says stop or `limit` passes (then panics with `what`).
pub fn poll_until(
    c: &mut Consumer,
    limit: Duration,
    what: &str,
    mut f: impl FnMut(&ConsumerRecords) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let recs = c.poll(Duration::from_millis(200)).expect("poll");
        if f(&recs) {
            return;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
    }
}

/// The `seq` header of a record.
pub fn seq(r: &kafka_consumer::Record<'_>) -> u64 {
    let h = r.headers().next().expect("seq header");
    assert_eq!(h.key(), b"seq");
    std::str::from_utf8(h.value().expect("seq value"))
        .expect("utf8")
        .parse()
        .expect("number")
}

/// A second broker of our own (own port and run directory) for tests that stop and
/// restart it. Stopped and removed on drop. Give it a port below 32768 (and the next one
/// free for its controller): ports in Linux's ephemeral range (32768-60999) can be taken
/// by any outgoing connection at the moment the broker binds, and it then dies at start.
pub struct OwnBroker {
    env: Vec<(&'static str, String)>,
    pub bootstrap: String,
}

impl OwnBroker {
    pub fn start(name: &str, port: u16) -> OwnBroker {
        OwnBroker::start_with(name, port, &[])
    }

    /// Like [`OwnBroker::start`], with extra `server.properties` lines (`key=value`).
    pub fn start_with(name: &str, port: u16, extra_props: &[&str]) -> OwnBroker {
        let mut b = OwnBroker {
            env: vec![
                ("KAFKA_RUN_DIR", format!("target/kafka/{name}")),
                ("KAFKA_KEEP_DATA", "1".into()),
                ("KAFKA_PORT", port.to_string()),
                ("KAFKA_CONTROLLER_PORT", (port + 1).to_string()),
                ("KAFKA_EXTRA_PROPS", extra_props.join("\n")),
                // Plaintext only: the secured listeners would take ports PORT+10..+15,
                // which brokers of tests running side by side may use.
                ("KAFKA_SECURITY", "0".into()),
            ],
            bootstrap: String::new(),
        };
        b.script(&["stop", "--clean"]);
        b.bootstrap = last_line(&b.script(&["start"]));
        b
    }

    /// The process id of the broker's JVM.
    pub fn pid(&self) -> u32 {
        let dir = &self.env[0].1;
        let path = root().join(dir).join("broker.pid");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .trim()
            .parse()
            .expect("a pid")
    }

    pub fn script(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("scripts/broker.sh")).args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        run(&mut cmd, &format!("scripts/broker.sh {}", args.join(" ")))
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("scripts/broker.sh"))
            .args(["stop", "--clean"]);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let _ = cmd.output();
    }
}

/// Logs the library's `log` output to stderr when `TEST_LOG` names a level (e.g.
/// `TEST_LOG=debug`), for debugging a test run.
pub fn init_log() {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            eprintln!(
                "{:?} {} {}: {}",
                std::time::SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() % 100_000),
                r.level(),
                r.target(),
                r.args()
            );
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    if let Ok(level) = std::env::var("TEST_LOG") {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level.parse().unwrap_or(log::LevelFilter::Debug));
        }
    }
}

/// Serialises consumer creation so [`IoThread::of`] can tell which I/O thread is new.
static CREATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The ids of this process's threads named `kafka-consumer`.
fn io_thread_ids() -> std::collections::HashSet<u32> {
    let mut ids = std::collections::HashSet::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = entry.expect("task entry").path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() == "kafka-consumer" {
            if let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse().ok())
            {
                ids.insert(id);
            }
        }
    }
    ids
}

/// A consumer with `config`. Created like every consumer of the tests (one at a time, each
/// waiting for its I/O thread to appear), so that [`IoThread::of`] in a test running beside
/// it can tell which I/O thread is its own.
pub fn new_consumer(config: kafka_consumer::ConsumerConfig) -> Consumer {
    IoThread::of(config).0
}

/// One consumer's I/O thread, to measure the CPU time it uses (Linux `/proc`).
pub struct IoThread {
    tid: u32,
}

impl IoThread {
    /// Creates a consumer with `config` and finds its I/O thread.
    pub fn of(config: kafka_consumer::ConsumerConfig) -> (Consumer, IoThread) {
        init_log();
        let _guard = CREATE.lock().unwrap_or_else(|e| e.into_inner());
        let before = io_thread_ids();
        let c = Consumer::new(config).expect("consumer starts");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let new: Vec<u32> = io_thread_ids().difference(&before).copied().collect();
            if let [tid] = new[..] {
                return (c, IoThread { tid });
            }
            assert!(
                Instant::now() < deadline,
                "no new I/O thread found: {new:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the thread still runs: its task exists and is neither a zombie nor dead.
    pub fn is_running(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid)) {
            Ok(stat) => {
                let state = stat[stat.rfind(')').expect("stat format") + 2..]
                    .chars()
                    .next()
                    .unwrap_or('X');
                !matches!(state, 'Z' | 'X' | 'x')
            }
            Err(_) => false,
        }
    }

    /// CPU time (user + system) the thread has used so far.
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid))
            .expect("the I/O thread is alive");
        // The command name (field 2) is in parentheses and may hold spaces: split after it.
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the name.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // USER_HZ is 100 on Linux.
        Duration::from_millis(ticks * 10)
    }

    /// The CPU time the thread uses while the caller waits `window` (during which the
    /// consumer is not polled), as a fraction of the window.
    pub fn busy_fraction_over(&self, window: Duration) -> f64 {
        let before = self.cpu();
        std::thread::sleep(window);
        (self.cpu() - before).as_secs_f64() / window.as_secs_f64()
    }
}
