//! The inner border of the crate: the protocol layer and the sans-IO components
//! (`src/protocol/`, `src/fetch/`, `src/group/`, `src/sasl/`, `src/cluster/`, `src/metrics/`,
//! `link.rs`, `backoff.rs`, `types.rs`) take bytes and time as arguments and never touch sockets, the
//! event loop, threads, channels, locks, atomics or the clock; only `src/io/` does (and the
//! shared budget in `buffer.rs`, which they use through its methods).

use std::path::{Path, PathBuf};

/// The sans-IO parts: directories (scanned recursively) and single files.
const SANS_IO: &[&str] = &[
    "src/protocol",
    "src/fetch",
    "src/group",
    "src/sasl",
    "src/cluster",
    "src/metrics",
    "src/link.rs",
    "src/backoff.rs",
    "src/types.rs",
];

const FORBIDDEN: &[&str] = &[
    // sockets and the event loop
    "std::net",
    "TcpStream",
    "UdpSocket",
    "mio::",
    "mio ",
    // threads, channels, locks, atomics
    "crossbeam",
    "std::sync::mpsc",
    "std::thread",
    "thread::spawn",
    "parking_lot",
    "Mutex",
    "RwLock",
    "Condvar",
    "std::sync::atomic",
    "Atomic",
    // the clock
    "Instant::now",
    "SystemTime",
    "std::time::Instant",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_owned());
        return;
    }
    for entry in std::fs::read_dir(path).unwrap_or_else(|e| panic!("reading {path:?}: {e}")) {
        let p = entry.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The forbidden names used in `text`, outside comments, as `(line, name)`.
fn scan(text: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for bad in FORBIDDEN {
            if code.contains(bad) {
                found.push((n + 1, *bad));
            }
        }
    }
    found
}

#[test]
fn sans_io_parts_use_no_sockets_threads_channels_locks_atomics_or_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for part in SANS_IO {
        let p = root.join(part);
        assert!(p.exists(), "{part} is missing: update SANS_IO");
        rust_files(&p, &mut files);
    }
    assert!(files.len() >= 20, "found only {files:?}");
    let mut violations = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        for (line, bad) in scan(&text) {
            violations.push(format!("{}:{line}: `{bad}`", f.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "sans-IO border crossed:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_scanner_catches_every_kind_of_crossing_and_ignores_comments() {
    let crossings = [
        "let t = std::time::Instant::now();",
        "use std::net::TcpStream;",
        "let (tx, rx) = crossbeam_channel::unbounded();",
        "let (tx, rx) = std::sync::mpsc::channel();",
        "std::thread::spawn(|| {});",
        "static N: AtomicUsize = AtomicUsize::new(0);",
        "let m = parking_lot::Mutex::new(0);",
        "let l = std::sync::RwLock::new(0);",
        "poll: mio::Poll,",
        "let t = std::time::SystemTime::now();",
    ];
    for line in crossings {
        assert!(!scan(line).is_empty(), "not caught: {line}");
    }
    assert!(scan("// std::thread::spawn is not used here").is_empty());
    assert!(scan("let x = 1; // Instant::now in a comment").is_empty());
    assert_eq!(
        scan("fn a() {}\nlet t = Instant::now();"),
        vec![(2, "Instant::now")]
    );
}
