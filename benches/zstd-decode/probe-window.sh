#!/bin/sh
# Window probe (README.md, "Window and memory"): one hostile frame per process, decoded by
# each candidate through the library's code with a 1 MiB output limit; prints the outcome
# and the process's peak RSS. Frames: all-zero RLE blocks (4 input bytes per 128 KiB out)
# behind a header declaring a 2^LOG-byte window and no content size.
# Usage: sh benches/zstd-decode/probe-window.sh [path/to/zstd-decode-bench]
BIN=${1:-benches/zstd-decode/target/release/zstd-decode-bench}
for log in 31 27 24; do
  for dec in ruzstd08 ruzstd09 structured_zstd libzstd; do
    nice -n 19 "$BIN" --probe-window $dec $log 256 1024
  done
done
