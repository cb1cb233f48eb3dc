//! The local 3-node Kafka cluster for failover tests (`scripts/cluster.sh`): three
//! combined broker+controller nodes (ids 1, 2, 3, racks a, b, c), replication factor 3,
//! `min.insync.replicas=2`.
//!
//! [`Cluster::from_env`] uses the cluster named by `KAFKA_CLUSTER_BOOTSTRAP` (which
//! `scripts/test.sh` starts and exports), or starts one with `scripts/cluster.sh start` when
//! it is unset. The script is found from this crate's root and takes `KAFKA_CLUSTER_PORT` /
//! `KAFKA_CLUSTER_DIR` from the environment, so they must match the cluster the bootstrap
//! list names. A cluster that cannot be reached fails the test with the reason; no test
//! skips.
//!
//! One [`Cluster`] exists at a time in a test process: `from_env` waits for the previous
//! one to be dropped, so tests that kill nodes never run side by side. A node the test
//! killed, stopped or froze is brought back when the `Cluster` is dropped, also when the
//! test panics, so one failing test does not leave the next one a broken cluster.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use super::{last_line, root, run};

/// Held by the one live [`Cluster`] of this process.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// One partition as a node of the cluster sees it (`scripts/cluster.sh describe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// The leader's node id; `None` while the partition has no leader.
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    /// Node ids, the preferred leader first.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas the node knows to be offline.
    pub offline: Vec<i32>,
}

impl PartitionState {
    /// Parses `partition=P leader=L epoch=E replicas=1,2,3 isr=1,2,3 offline=-`.
    fn parse(line: &str) -> Result<PartitionState, String> {
        let mut fields = std::collections::HashMap::new();
        for kv in line.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("`{kv}` is not KEY=VALUE"))?;
            fields.insert(k, v);
        }
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| format!("no `{k}=` field"))
        };
        let int = |k: &str| -> Result<i32, String> {
            let v = get(k)?;
            v.parse().map_err(|e| format!("{k}={v}: {e}"))
        };
        let ids = |k: &str| -> Result<Vec<i32>, String> {
            let v = get(k)?;
            if v == "-" {
                return Ok(Vec::new());
            }
            v.split(',')
                .map(|id| id.parse().map_err(|e| format!("{k}={v}: {e}")))
                .collect()
        };
        let leader = int("leader")?;
        Ok(PartitionState {
            partition: int("partition")?,
            leader: (leader >= 0).then_some(leader),
            leader_epoch: int("epoch")?,
            replicas: ids("replicas")?,
            isr: ids("isr")?,
            offline: ids("offline")?,
        })
    }
}

/// The 3-node test cluster, held exclusively by one test at a time (see the module
/// comment). Nodes are numbered 1, 2, 3 (their node ids).
pub struct Cluster {
    bootstrap: String,
    /// Nodes this test killed, stopped or froze and did not bring back yet.
    disturbed: Mutex<BTreeSet<u8>>,
    _exclusive: MutexGuard<'static, ()>,
}

/// Runs `scripts/cluster.sh ARGS`; panics with its output if it fails.
fn script(args: &[&str]) -> String {
    run(
        Command::new("bash")
            .arg(root().join("scripts/cluster.sh"))
            .args(args),
        &format!("scripts/cluster.sh {}", args.join(" ")),
    )
}

/// `scripts/cluster.sh status`: (all three running, its output).
fn status() -> (bool, String) {
    let out = Command::new("bash")
        .arg(root().join("scripts/cluster.sh"))
        .arg("status")
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/cluster.sh status: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn check_node(n: u8) {
    assert!(
        (1..=3).contains(&n),
        "the cluster has nodes 1, 2 and 3, not {n}"
    );
}

impl Cluster {
    /// The test cluster, for this test alone until dropped. Panics with the reason when it
    /// cannot be reached. Nodes left down by an earlier test that could not restore them
    /// (its process was killed) are brought back first.
    pub fn from_env() -> Cluster {
        super::init_log();
        let exclusive = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
        let managed = last_line(&script(&["bootstrap"]));
        let bootstrap = match std::env::var("KAFKA_CLUSTER_BOOTSTRAP") {
            Ok(b) => {
                assert_eq!(
                    b,
                    managed,
                    "KAFKA_CLUSTER_BOOTSTRAP names {b}, but scripts/cluster.sh (KAFKA_CLUSTER_PORT={}, \
                     KAFKA_CLUSTER_DIR={}) manages {managed}: the tests could not kill or restart its nodes; \
                     set KAFKA_CLUSTER_PORT and KAFKA_CLUSTER_DIR to the cluster's",
                    std::env::var("KAFKA_CLUSTER_PORT").unwrap_or_else(|_| "unset".into()),
                    std::env::var("KAFKA_CLUSTER_DIR").unwrap_or_else(|_| "unset".into()),
                );
                let (all, out) = status();
                if !all {
                    assert!(
                        out.contains(" running "),
                        "the cluster {b} (KAFKA_CLUSTER_BOOTSTRAP) is not running; start it with \
                         scripts/cluster.sh start. scripts/cluster.sh status says:\n{out}"
                    );
                    eprintln!("cluster: not every node is running, restoring them:\n{out}");
                    script(&["heal"]);
                }
                b
            }
            Err(_) => last_line(&script(&["start"])),
        };
        Cluster {
            bootstrap,
            disturbed: Mutex::new(BTreeSet::new()),
            _exclusive: exclusive,
        }
    }

    fn disturbed(&self) -> MutexGuard<'_, BTreeSet<u8>> {
        self.disturbed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `127.0.0.1:19301,127.0.0.1:19302,127.0.0.1:19303` (by default).
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// `kill -9` node `n`; returns once the process is gone.
    pub fn kill(&self, n: u8) {
        check_node(n);
        self.disturbed().insert(n);
        script(&["kill", &n.to_string()]);
    }

    /// Stops node `n` cleanly (a controlled shutdown) and waits for it to exit.
    pub fn stop_node(&self, n: u8) {
        check_node(n);
        self.disturbed().insert(n);
        script(&["stop-node", &n.to_string()]);
    }

    /// Freezes node `n` (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self, n: u8) {
        check_node(n);
        self.disturbed().insert(n);
        script(&["freeze", &n.to_string()]);
    }

    /// Lets frozen node `n` run again (SIGCONT).
    pub fn thaw(&self, n: u8) {
        check_node(n);
        script(&["thaw", &n.to_string()]);
        self.disturbed().remove(&n);
    }

    /// Starts killed or stopped node `n` again on its storage; returns once it answers and
    /// is a live broker again.
    pub fn restart(&self, n: u8) {
        check_node(n);
        script(&["restart", &n.to_string()]);
        self.disturbed().remove(&n);
    }

    /// Stops every node cleanly at once (`scripts/cluster.sh stop`, storage kept) and waits
    /// until all three exited.
    pub fn stop_all(&self) {
        self.disturbed().extend([1, 2, 3]);
        script(&["stop"]);
    }

    /// Thaws frozen nodes and starts stopped ones on their storage (`scripts/cluster.sh
    /// heal`); returns once all three answer and the quorum has a leader.
    pub fn heal(&self) {
        script(&["heal"]);
        self.disturbed().clear();
    }

    /// Creates `name` with `partitions` partitions, replication factor 3 and these topic
    /// configs; returns once every partition has a leader and 3 in-sync replicas.
    pub fn create_topic(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let kvs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let parts = partitions.to_string();
        let mut args = vec!["create-topic", name, parts.as_str()];
        args.extend(kvs.iter().map(String::as_str));
        script(&args);
    }

    /// Creates `name` with every partition on exactly the nodes `replicas` (the first its
    /// preferred leader) and these topic configs; returns once every partition has a leader
    /// and all its replicas in sync.
    pub fn create_topic_on(
        &self,
        name: &str,
        partitions: i32,
        replicas: &[u8],
        configs: &[(&str, &str)],
    ) {
        replicas.iter().for_each(|&n| check_node(n));
        let nodes: Vec<String> = replicas.iter().map(u8::to_string).collect();
        let nodes = nodes.join(",");
        let kvs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let parts = partitions.to_string();
        let mut args = vec!["create-topic", name, parts.as_str(), "--replicas", &nodes];
        args.extend(kvs.iter().map(String::as_str));
        script(&args);
    }

    /// Unclean leader election for every partition of `name` that has no live leader (a
    /// live replica outside the ISR may become the leader, and the log is cut back to what
    /// it holds); retried until a replica is alive to elect. Returns the partitions once
    /// every running node sees a live leader for each.
    pub fn elect_unclean(&self, name: &str) -> Vec<PartitionState> {
        parse_partitions(&script(&["elect-unclean", name]), name)
    }

    /// The partitions of `name` as a running node sees them, sorted by partition.
    pub fn describe(&self, name: &str) -> Vec<PartitionState> {
        parse_partitions(&script(&["describe", name]), name)
    }

    /// The leader of `topic`-`partition` (`None`: it has none right now).
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let out = script(&["leader", topic, &partition.to_string()]);
        let line = last_line(&out);
        let id: i32 = line
            .parse()
            .unwrap_or_else(|e| panic!("scripts/cluster.sh leader printed `{line}`: {e}"));
        (id >= 0).then_some(id)
    }

    /// Waits until every running node sees every partition of `topic` with a leader and
    /// all three replicas in sync (60 s at most, then panics); returns the partitions.
    pub fn wait_isr(&self, topic: &str) -> Vec<PartitionState> {
        parse_partitions(&script(&["wait-isr", topic]), topic)
    }

    /// Moves every partition's leadership of `topic` back to its preferred (first)
    /// replica; returns the partitions once every running node sees that.
    pub fn elect_preferred(&self, topic: &str) -> Vec<PartitionState> {
        parse_partitions(&script(&["elect-preferred", topic]), topic)
    }

    /// The node id of `group`'s coordinator.
    pub fn coordinator(&self, group: &str) -> i32 {
        let out = script(&["coordinator", group]);
        let line = last_line(&out);
        line.parse()
            .unwrap_or_else(|e| panic!("scripts/cluster.sh coordinator printed `{line}`: {e}"))
    }

    /// The node id of the metadata quorum's leader (the active controller).
    pub fn quorum_leader(&self) -> i32 {
        let out = script(&["quorum"]);
        let line = last_line(&out);
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix("leader="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("scripts/cluster.sh quorum printed `{line}`"))
    }

    /// `scripts/cluster.sh status`, one line per node.
    pub fn status(&self) -> String {
        status().1
    }
}

fn parse_partitions(out: &str, topic: &str) -> Vec<PartitionState> {
    out.lines()
        .filter(|l| l.starts_with("partition="))
        .map(|l| {
            PartitionState::parse(l)
                .unwrap_or_else(|e| panic!("describing {topic}: cannot parse `{l}`: {e}"))
        })
        .collect()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let disturbed = std::mem::take(&mut *self.disturbed());
        if disturbed.is_empty() {
            return;
        }
        eprintln!("cluster: restoring nodes {disturbed:?} (scripts/cluster.sh heal)");
        let out = Command::new("bash")
            .arg(root().join("scripts/cluster.sh"))
            .arg("heal")
            .output();
        let failure = match out {
            Ok(o) if o.status.success() => return,
            Ok(o) => format!(
                "scripts/cluster.sh heal failed ({}):\n{}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("cannot run scripts/cluster.sh heal: {e}"),
        };
        // A panic while the test is already panicking would abort the process.
        if std::thread::panicking() {
            eprintln!("cluster: {failure}");
        } else {
            panic!("restoring the cluster after the test: {failure}");
        }
    }
}
