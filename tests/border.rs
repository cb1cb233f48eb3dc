//! The inner border of the crate: `src/protocol/` and `src/fetch/` are sans-IO. They take
//! bytes and time as arguments and never touch sockets, the event loop, channels, threads
//! or the clock; only `src/io/` does.

use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "std::net",
    "TcpStream",
    "UdpSocket",
    "mio::",
    "mio ",
    "crossbeam",
    "std::sync::mpsc",
    "std::thread",
    "parking_lot",
    "Instant::now",
    "SystemTime",
    "std::time::Instant",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}")) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn protocol_and_fetch_use_no_sockets_event_loop_channels_threads_or_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/protocol"), &mut files);
    rust_files(&root.join("src/fetch"), &mut files);
    assert!(files.len() >= 8, "found only {files:?}");
    let mut violations = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                if code.contains(bad) {
                    violations.push(format!(
                        "{}:{}: `{bad}` in: {}",
                        f.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "sans-IO border crossed:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_border_check_catches_a_crossing() {
    // The scanner itself must not be blind: a line using the clock is flagged.
    let line = "let t = std::time::Instant::now();";
    assert!(FORBIDDEN.iter().any(|b| line.contains(b)));
}
