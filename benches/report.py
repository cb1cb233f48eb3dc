#!/usr/bin/env python3
"""Turns DIR/runs.json (written by benches/bench.py) into DIR/README.md (tables) and
DIR/throughput.svg (grouped bar chart of median records/s), and prints the tables.

    python3 benches/report.py benches/results

Standard library only; the SVG is written by hand.
"""

import json
import math
import os
import statistics
import sys
from html import escape

# Pairs for the ratio tables: (ours-side, peer). Like-for-like CRC settings where possible:
# the Java tool always runs with check.crcs=false.
RATIO_PAIRS = [
    ("ours", "java"),
    ("ours-nocrc", "java"),
    ("ours", "rdkafka"),
    ("ours-nocrc", "rdkafka-nocrc"),
    ("ours", "rdkafka-tuned"),
    ("ours-zstd-native", "java"),
    ("ours-zstd-native", "rdkafka"),
]
COLORS = {
    "ours": "#1f77b4",
    "ours-nocrc": "#6baed6",
    "ours-zstd-native": "#17becf",
    "java": "#d62728",
    "rdkafka": "#2ca02c",
    "rdkafka-nocrc": "#98df8a",
    "rdkafka-tuned": "#8c564b",
}


def ok_runs(runs, ds, c):
    return [r for r in runs if r["dataset"] == ds and r["contender"] == c and "error" not in r]


def metric_values(rs, key):
    vals = []
    for r in rs:
        if key == "rec_s":
            v = r["records"] / r["elapsed_s"]
        elif key == "mb_s":
            v = r["bytes"] / r["elapsed_s"] / 1e6
        elif key == "cpu_per_m":
            v = r["cpu_s"] / r["records"] * 1e6
        elif key == "cpu_window_per_m":
            v = (r["cpu_fetch_window_s"] / r["records"] * 1e6
                 if r.get("cpu_fetch_window_s") is not None else None)
        elif key == "rss_mib":
            v = r["max_rss_kib"] / 1024
        else:
            v = r.get(key)
        if v is not None:
            vals.append(v)
    return vals


def summary(vals):
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def fmt(s, digits=0, scale=1.0, unit=""):
    if s is None:
        return "–"
    f = f"{{:,.{digits}f}}"
    med = f.format(s["median"] * scale)
    if s["n"] == 1:
        return med + unit
    return f"{med}{unit} [{f.format(s['min'] * scale)}–{f.format(s['max'] * scale)}]"


def build(data):
    runs = data["runs"]
    contenders = list(dict.fromkeys(r["contender"] for r in runs))
    datasets = data["datasets"]
    stats = {}
    for ds in datasets:
        for c in contenders:
            rs = ok_runs(runs, ds["topic"], c)
            stats[ds["topic"], c] = {
                k: summary(metric_values(rs, k))
                for k in ("rec_s", "mb_s", "cpu_per_m", "cpu_window_per_m", "rss_mib",
                          "broker_cpu_s", "other_cpu_s", "wall_s")
            }
            stats[ds["topic"], c]["failed"] = sum(
                1 for r in runs if r["dataset"] == ds["topic"] and r["contender"] == c and "error" in r)
    return contenders, stats


def tables(data, contenders, stats):
    """Markdown tables, one block per dataset."""
    out = []
    for ds in data["datasets"]:
        t = ds["topic"]
        size = ds.get("disk_bytes")
        out.append(f"### `{t}`: {ds['records']:,} records x {ds['size']} B, "
                   f"compression {ds['compression']}, 8 partitions"
                   + (f", {size / 1e6:,.0f} MB of log segments" if size else ""))
        out.append("")
        out.append("| contender | records/s | MB/s | CPU s per M records | "
                   "peak RSS MiB | broker CPU s | other CPU s | failed runs |")
        out.append("|---|---|---|---|---|---|---|---|")
        for c in contenders:
            s = stats[t, c]
            if s["rec_s"] is None and not s["failed"]:
                continue  # this contender does not run on this dataset
            cpu = fmt(s["cpu_per_m"], 2)
            if s["cpu_window_per_m"]:
                cpu += f"<br>fetch window only: {fmt(s['cpu_window_per_m'], 2)}"
            out.append(f"| {c} | {fmt(s['rec_s'])} | {fmt(s['mb_s'], 1)} | {cpu} | "
                       f"{fmt(s['rss_mib'])} | {fmt(s['broker_cpu_s'], 1)} | "
                       f"{fmt(s['other_cpu_s'], 1)} | {s['failed']} |")
        ratio_rows = []
        for a, b in RATIO_PAIRS:
            if a in contenders and b in contenders and stats[t, a]["rec_s"] and stats[t, b]["rec_s"]:
                sa, sb = stats[t, a], stats[t, b]
                rr = sa["rec_s"]["median"] / sb["rec_s"]["median"]
                cr = sa["cpu_per_m"]["median"] / sb["cpu_per_m"]["median"]
                extra = ""
                if sb["cpu_window_per_m"]:
                    extra = f" (vs fetch window only: {sa['cpu_per_m']['median'] / sb['cpu_window_per_m']['median']:.3g})"
                ratio_rows.append(f"| {a} / {b} | {rr:.3g} | {cr:.3g}{extra} |")
        if ratio_rows:
            out.append("")
            out.append("| ratio (medians) | records/s (>1: ours faster) | "
                       "CPU per record (<1: ours cheaper) |")
            out.append("|---|---|---|")
            out.extend(ratio_rows)
        out.append("")
    return out


def nice_axis(vmax, ticks=5):
    """(step, top) of a linear axis from 0 covering vmax with about `ticks` steps."""
    vmax = max(vmax, 1.0)
    raw = vmax / ticks
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return step, math.ceil(vmax / step - 1e-9) * step


def svg_chart(data, contenders, stats):
    """One panel per record size (own y scale), one bar group per dataset."""
    sizes = list(dict.fromkeys(d["size"] for d in data["datasets"]))
    panels = [[d for d in data["datasets"] if d["size"] == sz] for sz in sizes]
    W, H = 1100, 540
    top, bottom, gap, left0 = 70, 115, 70, 70
    pw = (W - left0 - 20 - gap * (len(panels) - 1)) / len(panels)
    ph = H - top - bottom
    meta = data["meta"]
    e = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" '
         f'font-size="13">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="17" font-weight="bold">'
         f'Consumer throughput: median records/s (bars), min–max over runs (whiskers)</text>',
         f'<text x="{W / 2}" y="44" text-anchor="middle" font-size="12" fill="#444">'
         f'{escape(str(meta.get("cpu_model")))}, {meta.get("nproc")} cores shared with the broker '
         f'(Kafka {escape(str(meta["broker"]["version"]))}), {meta.get("runs_per_contender")} '
         f'run(s) each, {escape(meta.get("date_utc", ""))}. Separate y scales per panel.</text>']
    for pi, dss in enumerate(panels):
        left = left0 + pi * (pw + gap)
        vals = [stats[d["topic"], c]["rec_s"] for d in dss for c in contenders]
        step, ymax = nice_axis(1.1 * max([v["max"] for v in vals if v] + [1]))
        y = lambda v: top + ph - v / ymax * ph
        e.append(f'<text x="{left + pw / 2:.1f}" y="{top - 8}" text-anchor="middle" '
                 f'font-weight="bold">{dss[0]["size"]}-byte records</text>')
        k = 0
        while k * step <= ymax + 1e-9:
            v = k * step
            yy = y(v)
            e.append(f'<line x1="{left:.1f}" y1="{yy:.1f}" x2="{left + pw:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
            e.append(f'<text x="{left - 6:.1f}" y="{yy + 4:.1f}" text-anchor="end">{v / 1e6:g} M</text>')
            k += 1
        e.append(f'<line x1="{left:.1f}" y1="{top + ph}" x2="{left + pw:.1f}" y2="{top + ph}" stroke="#333"/>')
        if pi == 0:
            e.append(f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" '
                     f'text-anchor="middle">records per second</text>')
        gw = pw / len(dss)
        bw = min(36, gw * 0.85 / len(contenders))
        for i, ds in enumerate(dss):
            t = ds["topic"]
            gx = left + i * gw
            x0 = gx + (gw - bw * len(contenders)) / 2
            for j, c in enumerate(contenders):
                s = stats[t, c]["rec_s"]
                x = x0 + j * bw
                if not s:
                    if stats[t, c]["failed"]:
                        e.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph - 4}" text-anchor="middle" '
                                 f'font-size="10" fill="#a00">n/a</text>')
                    continue
                yt = y(s["median"])
                e.append(f'<rect x="{x + 1:.1f}" y="{yt:.1f}" width="{bw - 2:.1f}" '
                         f'height="{top + ph - yt:.1f}" fill="{COLORS.get(c, "#888")}">'
                         f'<title>{escape(c)} {escape(t)}: {s["median"]:,.0f} records/s</title></rect>')
                if s["n"] > 1:
                    cx = x + bw / 2
                    e.append(f'<line x1="{cx:.1f}" y1="{y(s["min"]):.1f}" x2="{cx:.1f}" '
                             f'y2="{y(s["max"]):.1f}" stroke="#222" stroke-width="1.2"/>')
                lx, ly = x + bw / 2 + 4, min(yt, y(s["max"])) - 4
                e.append(f'<text x="{lx:.1f}" y="{ly:.1f}" transform="rotate(-90 {lx:.1f} {ly:.1f})" '
                         f'font-size="11">{s["median"] / 1e6:.2f}M</text>')
            e.append(f'<text x="{gx + gw / 2:.1f}" y="{top + ph + 20}" text-anchor="middle" '
                     f'font-weight="bold">{escape(ds["compression"])}</text>')
            e.append(f'<text x="{gx + gw / 2:.1f}" y="{top + ph + 36}" text-anchor="middle" '
                     f'font-size="11" fill="#444">{ds["records"]:,} records</text>')
    lx = left0
    for c in contenders:
        e.append(f'<rect x="{lx}" y="{H - 42}" width="14" height="14" fill="{COLORS.get(c, "#888")}"/>')
        e.append(f'<text x="{lx + 20}" y="{H - 30}">{escape(c)}</text>')
        lx += 20 + 8 * len(c) + 28
    e.append("</svg>")
    return "\n".join(e) + "\n"


def readme(data, contenders, stats, table_lines):
    m = data["meta"]
    rdk = m.get("librdkafka")
    rdk_s = (f"librdkafka {rdk['librdkafka']} (rdkafka crate {rdk['rdkafka_crate']}, "
             f"bundled, built from source; builtin.features {rdk['builtin_features']})"
             if isinstance(rdk, dict) else (rdk or "not run"))
    L = []
    L.append("# Consumer throughput: kafka-consumer vs Java vs librdkafka")
    L.append("")
    L.append(f"Generated by `bash scripts/bench.sh` ({m['mode']} mode) on {m['date_utc']}; "
             "raw per-run data in [`runs.json`](runs.json), chart in "
             "[`throughput.svg`](throughput.svg). How it works and its caveats: "
             "[`benches/README.md`](../README.md).")
    L.append("")
    L.append("![median records/s](throughput.svg)")
    L.append("")
    L.append("## Machine and versions")
    L.append("")
    L.append(f"- Machine: {m['nproc']} cores (`nproc`), {m['cpu_model']}, {m['mem_total_gib']} GiB RAM, "
             f"Linux {m['kernel']} ({m.get('os')}); broker and consumer share the machine.")
    L.append(f"- Broker: Apache Kafka {m['broker']['version']}, {m['broker']['config']}; "
             f"JVM `{m['broker']['jvm']}`; at {m['broker']['bootstrap']}.")
    L.append(f"- Java: {' / '.join(m['java'])}.")
    mod = m.get("git_src_modified_files")
    L.append(f"- ours: kafka-consumer {m['ours_crate_version']} (this repository at "
             f"{m.get('git_commit')}"
             + (f" plus uncommitted changes in {mod} file(s) under src/" if mod else "")
             + f", release build, default features: pure-Rust codecs, ruzstd for zstd, "
             f"lz4_flex for lz4), {m['rustc']}.")
    L.append(f"- java: kafka-clients {m['kafka_clients']} through "
             f"`org.apache.kafka.tools.ConsumerPerformance` from kafka-tools {m['broker']['version']}; "
             f"consumer JVM `{m['java_consumer_jvm']}`.")
    L.append(f"- rdkafka: {rdk_s}.")
    L.append("")
    L.append("## Settings")
    L.append("")
    L.append("- Fetch settings, same for every contender: "
             + ", ".join(f"`{k}={v}`" for k, v in m["fetch_settings"].items())
             + " (librdkafka: `fetch.message.max.bytes`, `fetch.wait.max.ms`). Socket receive "
             "buffer: OS default (autotuned) for all; ConsumerPerformance is given "
             "`--socket-buffer-size=-1`, its default would be 2 MiB.")
    L.append("- Contenders:")
    for c, d in m["contenders"].items():
        L.append(f"  - **{c}**: {d}")
    L.append("- Datasets produced once with `ProducerPerformance` (random A–Z values, null keys; "
             + ", ".join(f"`{k}={v}`" for k, v in m["producer_settings"].items())
             + "), 8 partitions each.")
    L.append(f"- {m['runs_per_contender']} run(s) of each contender per dataset, each a fresh "
             "process; rounds interleaved (round 1 of every contender, then round 2, ...; the "
             "order rotates by one each round). Before its runs, each dataset is read once "
             "untimed by `ours` so that every run is served from the page cache.")
    L.append("- records/s and MB/s (10^6 bytes of record values per second) use each "
             "contender's own elapsed time: from just before the first poll to the poll that "
             "returned the last record (ours, rdkafka); `fetch.time.ms` of ConsumerPerformance "
             "(java: from the end of the group join to the last record, ms resolution).")
    L.append("- CPU s per M records: user+system CPU of the whole consumer process (`wait4` "
             "rusage) / records × 10^6. For java this includes JVM start-up, JIT warm-up, "
             "class loading and the group join; the *fetch window only* figure is the JVM's "
             "CPU between the start and end of `fetch.time.ms`, from /proc/PID/stat samples "
             "every 20 ms. Peak RSS: `ru_maxrss` of the process. Broker CPU s: CPU the broker "
             "process used from the consumer's start to its exit. Other CPU s: CPU used by "
             "everything else on the machine meanwhile (from /proc/stat; includes the "
             "benchmark driver's own sampling; ±0.2 s is accounting noise): near 0 means "
             "nothing else competed for the cores.")
    if m.get("notes"):
        for n in m["notes"]:
            L.append(f"- Note: {n}")
    d = m.get("duration_s", {})
    L.append(f"- Time taken: datasets check/produce {d.get('datasets')} s, runs {d.get('runs')} s.")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("Each cell: median [min–max] over the successful runs.")
    L.append("")
    L.extend(table_lines)
    return "\n".join(L) + "\n"


def main():
    if len(sys.argv) != 2:
        print("usage: report.py DIR (containing runs.json)", file=sys.stderr)
        return 2
    d = sys.argv[1]
    with open(os.path.join(d, "runs.json")) as f:
        data = json.load(f)
    contenders, stats = build(data)
    tl = tables(data, contenders, stats)
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(readme(data, contenders, stats, tl))
    with open(os.path.join(d, "throughput.svg"), "w") as f:
        f.write(svg_chart(data, contenders, stats))
    print("\n".join(tl))
    print(f"report.py: wrote {d}/README.md, {d}/throughput.svg (raw data {d}/runs.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
