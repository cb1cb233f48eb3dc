#!/usr/bin/env python3
"""Turns DIR/runs.json (written by benches/bench.py) into DIR/README.md (tables) and
DIR/throughput.svg (grouped bar chart of median records/s), and prints the tables. If
DIR/tls.json (bench.py --tls) exists, README.md ends with its TLS section (also printed).

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
    # The group path against assign (issue 17 item 3: within 5 %).
    ("ours-subscribe-classic", "ours"),
    ("ours-subscribe-consumer", "ours"),
]
COLORS = {
    "ours": "#1f77b4",
    "ours-nocrc": "#6baed6",
    "ours-zstd-native": "#17becf",
    "java": "#d62728",
    "rdkafka": "#2ca02c",
    "rdkafka-nocrc": "#98df8a",
    "rdkafka-tuned": "#8c564b",
    "ours-subscribe-classic": "#9467bd",
    "ours-subscribe-consumer": "#c5b0d5",
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
        elif key == "user_per_m":
            v = r["cpu_user_s"] / r["records"] * 1e6
        elif key == "cpu_window_per_m":
            v = (r["cpu_fetch_window_s"] / r["records"] * 1e6
                 if r.get("cpu_fetch_window_s") is not None else None)
        elif key == "rec_s_nojoin":
            # The group path without its join: from the assignment to the last record.
            v = (r["records"] / (r["elapsed_s"] - r["join_s"])
                 if r.get("join_s") is not None and 0 <= r["join_s"] < r["elapsed_s"] else None)
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
                          "broker_cpu_s", "other_cpu_s", "wall_s", "join_s", "rec_s_nojoin")
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
            rate = fmt(s["rec_s"])
            if s["join_s"]:
                rate += (f"<br>join {fmt(s['join_s'], 3, unit=' s')}; without it "
                         f"{fmt(s['rec_s_nojoin'])}")
            out.append(f"| {c} | {rate} | {fmt(s['mb_s'], 1)} | {cpu} | "
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
                join = ""
                if sa["rec_s_nojoin"]:
                    join = f" (join excluded: {sa['rec_s_nojoin']['median'] / sb['rec_s']['median']:.3g})"
                ratio_rows.append(f"| {a} / {b} | {rr:.3g}{join} | {cr:.3g}{extra} |")
        if ratio_rows:
            out.append("")
            out.append("| ratio (medians) | records/s (>1: first faster) | "
                       "CPU per record (<1: first cheaper) |")
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
    if any(not c.startswith("ours") for c in contenders):
        L.append("# Consumer throughput: kafka-consumer vs Java vs librdkafka")
    else:
        L.append("# Consumer throughput: kafka-consumer only (" + ", ".join(contenders) + ")")
    L.append("")
    L.append(f"Generated by `bash scripts/bench.sh` ({m['mode']} mode) on {m['date_utc']}; "
             "raw per-run data in [`runs.json`](runs.json), chart in "
             "[`throughput.svg`](throughput.svg). How it works and its caveats: "
             f"[`benches/README.md`]({BENCH_README}).")
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
             + f", release build, default features: pure-Rust codecs, our own decoder for zstd, "
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


# ---------------------------------------------------------------------------- TLS mode

TRANSPORTS = ("plaintext", "ssl")
# The goal of the TLS mode: the relative TLS cost of each of our builds against each
# librdkafka variant (records/s over TLS / records/s over PLAINTEXT, same contender, same session).
OURS_TLS = ("ours-graviola", "ours-ring", "ours")
RDKAFKA_TLS = ("rdkafka", "rdkafka-tuned", "rdkafka-nocrc")
TLS_GOAL = "TLS costs us less than it costs librdkafka"


def tls_build(data):
    runs = data["runs"]
    contenders = list(dict.fromkeys(r["contender"] for r in runs))
    stats = {}
    for ds in data["datasets"]:
        t = ds["topic"]
        for c in contenders:
            for tr in TRANSPORTS:
                rs = [r for r in ok_runs(runs, t, c) if r.get("transport") == tr]
                st = {k: summary(metric_values(rs, k))
                      for k in ("rec_s", "cpu_per_m", "user_per_m", "cpu_window_per_m",
                                "broker_cpu_s", "other_cpu_s")}
                st["failed"] = sum(1 for r in runs if r["dataset"] == t and r["contender"] == c
                                   and r.get("transport") == tr and "error" in r)
                stats[t, c, tr] = st
            # TLS cost per round: the SSL run's records/s over the PLAINTEXT run's, same round.
            by_round = {}
            for r in ok_runs(runs, t, c):
                by_round.setdefault(r.get("round"), {})[r.get("transport")] = r
            pairs = [p for p in by_round.values() if "ssl" in p and "plaintext" in p]
            per_round = [p["ssl"]["records"] / p["ssl"]["elapsed_s"]
                         / (p["plaintext"]["records"] / p["plaintext"]["elapsed_s"]) for p in pairs]
            # User CPU only: the TLS work (rustls, OpenSSL, SunJSSE) is user time, while the
            # system time of a run varies with page faults and the like far more than TLS
            # changes it (the socket reads are the same bytes plus ~0.1 % TLS framing).
            added_per_round = [(p["ssl"]["cpu_user_s"] / p["ssl"]["records"]
                                - p["plaintext"]["cpu_user_s"] / p["plaintext"]["records"]) * 1e6
                               for p in pairs]
            plain, ssl = stats[t, c, "plaintext"], stats[t, c, "ssl"]
            stats[t, c] = {
                "cost": (ssl["rec_s"]["median"] / plain["rec_s"]["median"]
                         if plain["rec_s"] and ssl["rec_s"] else None),
                "cost_rounds": summary(per_round),
                "cpu_factor": (ssl["cpu_per_m"]["median"] / plain["cpu_per_m"]["median"]
                               if plain["cpu_per_m"] and ssl["cpu_per_m"] else None),
                # User CPU seconds per million records that TLS adds to the client's own.
                "cpu_added": (ssl["user_per_m"]["median"] - plain["user_per_m"]["median"]
                              if plain["user_per_m"] and ssl["user_per_m"] else None),
                "cpu_added_rounds": summary(added_per_round),
            }
    return contenders, stats


def tls_goal(data, contenders, stats, ds):
    """(verdict line, per-pair lines) for one dataset, from the same session's numbers."""
    t = ds["topic"]
    ours = [c for c in OURS_TLS if c in contenders and stats[t, c]["cost"]]
    rdk = [c for c in RDKAFKA_TLS if c in contenders and stats[t, c]["cost"]]
    if not ours or not rdk:
        return f"`{t}`: not decided (needs an ours and a librdkafka contender over both transports)", []
    pairs = []
    for o in ours:
        for r in rdk:
            so, sr = stats[t, o], stats[t, r]
            holds = so["cost"] > sr["cost"]
            ro, rr = so["cost_rounds"], sr["cost_rounds"]
            if not (ro and rr and ro["n"] > 1 and rr["n"] > 1):
                spread = "one round only, no spread to compare with"
            elif ro["min"] > rr["max"] if holds else ro["max"] < rr["min"]:
                spread = "beyond the run-to-run spread (per-round ranges do not overlap)"
            else:
                spread = "within the run-to-run spread (per-round ranges overlap)"
            pairs.append((o, r, holds, f"{o} keeps {so['cost']:.2f} of its PLAINTEXT records/s, "
                                      f"{r} {sr['cost']:.2f}: "
                                      + ("holds" if holds else "does not hold") + f", {spread}"))
    n_hold = sum(1 for p in pairs if p[2])
    if n_hold == len(pairs):
        verdict = "**holds**"
    elif n_hold == 0:
        verdict = "**does not hold**"
    else:
        verdict = "**holds only in part**"
    costs = ", ".join(f"{c} {stats[t, c]['cost']:.2f}" for c in ours + rdk)
    lines = [p[3] for p in pairs]
    # The client's own side: CPU seconds per million records that TLS adds (absolute, so
    # that a client with a small PLAINTEXT cost is not penalised by the ratio).
    added = [(c, stats[t, c]["cpu_added"]) for c in ours + rdk if stats[t, c]["cpu_added"] is not None]
    if added and any(c in ours for c, _ in added) and any(c in rdk for c, _ in added):
        def rng(c):
            x = stats[t, c]["cpu_added_rounds"]
            return f" [{x['min']:+.3f}–{x['max']:+.3f}]" if x and x["n"] > 1 else ""
        fewer = [(o, r) for o, vo in added if o in ours for r, vr in added if r in rdk and vo < vr]
        n_pairs = sum(1 for c, _ in added if c in ours) * sum(1 for c, _ in added if c in rdk)
        lines.append("by the client's own CPU instead (user CPU s per M records that TLS adds to "
                     "the consumer process, medians [per-round range]: "
                     + ", ".join(f"{c} {v:+.3f}{rng(c)}" for c, v in added) + "): ours adds less in "
                     + f"{len(fewer)} of {n_pairs} ours/librdkafka pairs"
                     + (f" ({', '.join(f'{o} < {r}' for o, r in fewer)})" if fewer else ""))
    return (f"`{t}`: {verdict} ({n_hold} of {len(pairs)} ours/librdkafka pairs; records/s kept "
            f"over TLS: {costs})", lines)


def tls_tables(data, contenders, stats):
    out = []
    out.append(f"Goal: \"{TLS_GOAL}\", i.e. each of our builds keeps a larger share of its "
               "PLAINTEXT records/s over TLS than librdkafka keeps of its own (medians of the "
               "same session):")
    out.append("")
    for ds in data["datasets"]:
        line, pairs = tls_goal(data, contenders, stats, ds)
        out.append(f"- {line}")
        for p in pairs:
            out.append(f"  - {p}")
    out.append("")
    for ds in data["datasets"]:
        t = ds["topic"]
        out.append(f"### TLS: `{t}`: {ds['records']:,} records x {ds['size']} B, "
                   f"compression {ds['compression']}")
        out.append("")
        out.append("| contender | records/s PLAINTEXT | records/s TLS | TLS cost: TLS / PLAINTEXT "
                   "records/s (per round) | CPU s per M records PLAINTEXT | CPU s per M records TLS "
                   "| TLS / PLAINTEXT CPU per record | user CPU s per M records TLS adds "
                   "| broker CPU s PLAINTEXT / TLS | failed runs |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        above_one = False
        for c in contenders:
            p, q, x = stats[t, c, "plaintext"], stats[t, c, "ssl"], stats[t, c]
            if p["rec_s"] is None and q["rec_s"] is None and not p["failed"] and not q["failed"]:
                continue

            def cpu(st):
                v = fmt(st["cpu_per_m"], 2)
                if st["cpu_window_per_m"]:
                    v += f"<br>fetch window only: {fmt(st['cpu_window_per_m'], 2)}"
                return v
            cost = "–"
            if x["cost"] is not None:
                cost = f"**{x['cost']:.2f}** ({(x['cost'] - 1) * 100:+.0f} %)"
                if x["cost_rounds"] and x["cost_rounds"]["n"] > 1:
                    cost += f" [{x['cost_rounds']['min']:.2f}–{x['cost_rounds']['max']:.2f}]"
            if x["cost"] is not None and x["cost"] > 1:
                cost += " ¹"
                above_one = True
            factor = f"{x['cpu_factor']:.2f}" if x["cpu_factor"] is not None else "–"
            added = "–"
            if x["cpu_added"] is not None:
                added = f"{x['cpu_added']:+.3f}"
                ar = x["cpu_added_rounds"]
                if ar and ar["n"] > 1:
                    added += f" [{ar['min']:+.3f}–{ar['max']:+.3f}]"
            out.append(f"| {c} | {fmt(p['rec_s'])} | {fmt(q['rec_s'])} | {cost} | {cpu(p)} | "
                       f"{cpu(q)} | {factor} | {added} | {fmt(p['broker_cpu_s'], 1)} / "
                       f"{fmt(q['broker_cpu_s'], 1)} | {p['failed'] + q['failed']} |")
        if above_one:
            out.append("")
            out.append("¹ Above 1: this contender's PLAINTEXT runs were the slower ones; TLS did "
                       "not make it faster. For `rdkafka` (librdkafka's defaults) this is the "
                       "fetch back-off stall described in benches/README.md, which depends on how "
                       "fast records arrive, so its TLS cost is not meaningful here: compare with "
                       "`rdkafka-tuned`.")
        rows = []
        ours = [c for c in OURS_TLS if c in contenders]
        peers = [c for c in ("java",) + RDKAFKA_TLS if c in contenders]
        pairs = [(a, b) for a in ours for b in peers]
        if "ours-graviola" in contenders and "ours-ring" in contenders:
            pairs.append(("ours-graviola", "ours-ring"))
        for a, b in pairs:
            sa, sb = stats[t, a, "ssl"], stats[t, b, "ssl"]
            if not (sa["rec_s"] and sb["rec_s"]):
                continue
            rr = sa["rec_s"]["median"] / sb["rec_s"]["median"]
            cr = sa["cpu_per_m"]["median"] / sb["cpu_per_m"]["median"]
            extra = ""
            if sb["cpu_window_per_m"]:
                extra = f" (vs fetch window only: {sa['cpu_per_m']['median'] / sb['cpu_window_per_m']['median']:.3g})"
            rows.append(f"| {a} / {b} | {rr:.3g} | {cr:.3g}{extra} |")
        if rows:
            out.append("")
            out.append("| ratio over TLS (medians) | records/s (>1: first faster) | "
                       "CPU per record (<1: first cheaper) |")
            out.append("|---|---|---|")
            out.extend(rows)
        out.append("")
    return out


def tls_section(data, contenders, stats, table_lines):
    m = data["meta"]
    tls = m.get("tls", {})
    runs = data["runs"]
    L = ["## TLS", ""]
    mod = m.get("git_src_modified_files")
    L.append(f"Generated by `bash scripts/bench.sh {'--smoke' if m['mode'] == 'smoke' else '--tls'}` "
             f"on {m['date_utc']} (this repository at {m.get('git_commit')}"
             + (f" plus uncommitted changes in {mod} file(s) under src/" if mod else "")
             + "); raw per-run data in [`tls.json`](tls.json). Every contender reads each dataset "
             f"over PLAINTEXT ({m['broker']['bootstrap']}) and over one-way TLS (the broker's `SSL` "
             f"listener, {tls.get('ssl_bootstrap')}), {m['runs_per_contender']} run(s) each, the two "
             "transports of every contender being entries of the same interleaved rotation; the "
             "TLS cost of a contender compares its own TLS and PLAINTEXT runs of this session. "
             f"How it works: [`benches/README.md`]({BENCH_README}).")
    L.append("")
    L.append("### TLS: machine, load, versions")
    L.append("")
    L.append(f"- Machine: {m['nproc']} cores (`nproc`), {m['cpu_model']}, {m['mem_total_gib']} GiB "
             f"RAM, Linux {m['kernel']} ({m.get('os')}); broker and consumer share the machine. "
             f"Crypto extensions: {', '.join(tls.get('cpu_flags', [])) or '?'}.")
    la = m.get("loadavg_1m", {})
    before = [r["loadavg_1m_before"] for r in runs if r.get("loadavg_1m_before") is not None]
    other = [r["other_cpu_s"] for r in runs if r.get("other_cpu_s") is not None]
    load = f"- Load: 1-minute load average {la.get('start')} when the runs started, {la.get('end')} at the end"
    if before:
        load += f", {min(before):.2f}–{max(before):.2f} (median {statistics.median(before):.2f}) before the individual runs"
    if other:
        load += (f"; CPU used by anything but the consumer and the broker during a run: median "
                 f"{statistics.median(other):.2f} s, max {max(other):.2f} s")
    L.append(load + ".")
    for n in m.get("notes") or []:
        L.append(f"- Note: {n}")
    L.append(f"- Broker: Apache Kafka {m['broker']['version']}, JVM `{m['broker']['jvm']}` (TLS by "
             f"the JDK's SunJSSE), {m.get('java', ['?'])[0]}.")
    crates = tls.get("crates", {})
    L.append("- ours: rustls " + crates.get("rustls", "?") + ", rustls-graviola "
             + crates.get("rustls-graviola", "?") + " (graviola " + crates.get("graviola", "?")
             + "), ring " + crates.get("ring", "?") + f"; {m['rustc']}.")
    for c, v in sorted(tls.get("ours_reported", {}).items()):
        L.append(f"  - {c} reported (provider; protocol, cipher suite): {'; '.join(v)}")
    rdk = m.get("librdkafka")
    if isinstance(rdk, dict):
        L.append(f"- librdkafka {rdk['librdkafka']} (rdkafka crate {rdk['rdkafka_crate']}, built "
                 f"from source with the `ssl` feature; builtin.features {rdk['builtin_features']}), "
                 f"{tls.get('openssl') or 'OpenSSL ?'} (system library, dynamically linked).")
    if tls.get("broker_with_openssl_client"):
        L.append("- The broker with an OpenSSL client (`openssl s_client`, as librdkafka): "
                 + "; ".join(l.strip() for l in tls["broker_with_openssl_client"].splitlines()) + ".")
    L.append("- Contenders:")
    for c, d in m["contenders"].items():
        L.append(f"  - **{c}**: {d}")
    L.append("- Security settings over TLS: ours `security.protocol=SSL`, `ssl.truststore.type=PEM`, "
             "`ssl.truststore.location=<ca.pem>`; java the same in its consumer config; librdkafka "
             "`security.protocol=ssl`, `ssl.ca.location=<ca.pem>`. Hostname verification on "
             "(every client's default; the certificate's SAN has 127.0.0.1). Fetch settings as above.")
    d = m.get("duration_s", {})
    L.append(f"- Time taken: datasets check/produce {d.get('datasets')} s, runs {d.get('runs')} s.")
    L.append("")
    L.append("### TLS: results")
    L.append("")
    L.append("Each cell: median [min–max] over the successful runs. TLS cost: median records/s over "
             "TLS / median over PLAINTEXT of the same contender (1.00: TLS is free), with the range "
             "of the per-round ratios. CPU: user+system CPU of the consumer process; *user CPU s per "
             "M records TLS adds*: median user CPU per M records over TLS minus over PLAINTEXT "
             "[range of the per-round differences], user time only because that is where the TLS "
             "work runs, while system time varies between runs far more than TLS changes it.")
    L.append("")
    L.append("Reading the TLS cost: over TLS the broker encrypts every byte it sends (no `sendfile`), "
             "in its JVM on the same 2 cores, so every contender's TLS records/s is capped by what "
             "the broker can encrypt. A contender already limited by its own CPU below that cap "
             "(librdkafka, Java on 100-byte records) loses little records/s to TLS; one that reads "
             "faster than the cap loses more. The ratio therefore says how close a client was to "
             "the broker's TLS ceiling as much as what TLS costs it; the client's own cost is the "
             "user CPU it adds per record (the column before the broker's, and the last line of "
             "each goal verdict).")
    L.append("")
    L.extend(table_lines)
    return L


# benches/README.md relative to the report's directory (set by main).
BENCH_README = "../README.md"


def main():
    global BENCH_README
    if len(sys.argv) != 2:
        print("usage: report.py DIR (containing runs.json and/or tls.json)", file=sys.stderr)
        return 2
    d = sys.argv[1]
    BENCH_README = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md"),
                                   os.path.abspath(d))
    runs_path, tls_path = os.path.join(d, "runs.json"), os.path.join(d, "tls.json")
    if not os.path.exists(runs_path) and not os.path.exists(tls_path):
        print(f"report.py: neither {runs_path} nor {tls_path} exists", file=sys.stderr)
        return 2
    text = ""
    if os.path.exists(runs_path):
        with open(runs_path) as f:
            data = json.load(f)
        contenders, stats = build(data)
        tl = tables(data, contenders, stats)
        text = readme(data, contenders, stats, tl)
        with open(os.path.join(d, "throughput.svg"), "w") as f:
            f.write(svg_chart(data, contenders, stats))
        print("\n".join(tl))
    wrote = [f"{d}/README.md"] + ([f"{d}/throughput.svg"] if text else [])
    if os.path.exists(tls_path):
        with open(tls_path) as f:
            tdata = json.load(f)
        tcontenders, tstats = tls_build(tdata)
        ttl = tls_tables(tdata, tcontenders, tstats)
        if not text:
            text = ("# Consumer throughput over TLS: kafka-consumer vs Java vs librdkafka\n\n"
                    "No plaintext results (runs.json) here.\n")
        text += "\n" + "\n".join(tls_section(tdata, tcontenders, tstats, ttl)) + "\n"
        print("\n".join(ttl))
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(text)
    raw = [p for p in (runs_path, tls_path) if os.path.exists(p)]
    print(f"report.py: wrote {', '.join(wrote)} (raw data in {', '.join(raw)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
