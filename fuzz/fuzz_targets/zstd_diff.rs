#![no_main]

use libfuzzer_sys::fuzz_target;

// Needs libzstd: `cargo +nightly fuzz run --features libzstd zstd_diff` (see README.md).
fuzz_target!(|data: &[u8]| kafka_consumer::fuzzing::zstd_diff(data));
