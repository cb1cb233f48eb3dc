#!/usr/bin/env python3
"""Interleaved A/B of two perf_consume binaries on the benchmark broker (127.0.0.1:29092).

    python3 benches/profile-1k/ab.py 16 bench-1k-none:500000,bench-1k-lz4:500000 old=/tmp/pc-old new=/tmp/pc-new

PAIRS rounds; in each, every dataset is read once by each binary (under nice -n 10), the
order alternating by round. Per run: records/s (perf_consume's own elapsed time), CPU s
per million records (user + system, wait4), and the CPU everything else on the machine
used meanwhile (/proc/stat busy time minus ours and the broker's). Prints medians, the
ratio of the medians and the median of the per-pair ratios, and the same over the pairs
where both runs had under 0.1 s of other CPU.
"""
import json, os, subprocess, sys, statistics, time
pairs = int(sys.argv[1]); datasets = [d.split(':') for d in sys.argv[2].split(',')]
bins = [a.split('=', 1) for a in sys.argv[3:]]
res = {}
BROKER = subprocess.run(['pgrep', '-f', 'kafka/bench/server.properties'], capture_output=True, text=True).stdout.split()[0]
HZ = os.sysconf('SC_CLK_TCK')
def busy():
    with open('/proc/stat') as f: v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / HZ
def pcpu(pid):
    with open(f'/proc/{pid}/stat') as f: v = f.read().rsplit(')', 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ
OTHER = {}
def run(path, ds, n):
    b0, k0 = busy(), pcpu(BROKER)
    p = subprocess.Popen(['nice', '-n', '10', path, '127.0.0.1:29092', ds, n], stdout=subprocess.PIPE)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    other = busy() - b0 - (pcpu(BROKER) - k0) - (ru.ru_utime + ru.ru_stime)
    j = json.loads(out.decode().strip().splitlines()[-1])
    assert j['records'] == int(n), j
    return j['records'] / j['elapsed_s'], (ru.ru_utime + ru.ru_stime) / j['records'] * 1e6, ru.ru_utime, ru.ru_stime, other
def load():
    with open('/proc/loadavg') as f: return f.read().split()[0]
for i in range(pairs):
    for ds, n in datasets:
        order = bins if i % 2 == 0 else bins[::-1]
        for name, path in order:
            r = run(path, ds, n)
            res.setdefault((ds, name), []).append(r)
            print(f"pair {i} {ds} {name}: {r[0]/1e6:.3f} M rec/s, {r[1]:.3f} CPU s/M, other CPU {r[4]:.2f} s (load {load()})", flush=True)
print("\nsummary (median [min-max]):")
for ds, n in datasets:
    meds = {}
    for name, _ in bins:
        v = res[(ds, name)]
        rs = [x[0] for x in v]; cpu = [x[1] for x in v]; us=[x[2] for x in v]; ss=[x[3] for x in v]
        meds[name] = (statistics.median(rs), statistics.median(cpu))
        print(f"  {ds:16s} {name:6s} n={len(v)} records/s {statistics.median(rs)/1e6:.3f} M [{min(rs)/1e6:.3f}-{max(rs)/1e6:.3f}], CPU s/M {statistics.median(cpu):.3f} [{min(cpu):.3f}-{max(cpu):.3f}] (user {statistics.median(us):.3f} s, sys {statistics.median(ss):.3f} s)")
    (a, (ra, ca)), (b, (rb, cb)) = list(meds.items())[:2]
    # paired ratios
    pr = [y[0]/x[0] for x, y in zip(res[(ds, a)], res[(ds, b)])]
    print(f"  {ds:16s} {b}/{a}: records/s x{rb/ra:.3f} (paired ratios median x{statistics.median(pr):.3f}, {sum(1 for p in pr if p>1)}/{len(pr)} pairs faster), CPU/record x{cb/ca:.3f}")

print("\nquiet pairs only (other CPU < 0.10 s in both runs):")
for ds, n in datasets:
    (a, _), (b, _) = bins[0], bins[1]
    qp = [(x, y) for x, y in zip(res[(ds, a)], res[(ds, b)]) if x[4] < 0.10 and y[4] < 0.10]
    if not qp: print(f"  {ds}: none"); continue
    ra = statistics.median(x[0] for x, _ in qp); rb = statistics.median(y[0] for _, y in qp)
    ca = statistics.median(x[1] for x, _ in qp); cb = statistics.median(y[1] for _, y in qp)
    pr = [y[0]/x[0] for x, y in qp]
    print(f"  {ds:16s} {len(qp)} pairs: {a} {ra/1e6:.3f} M/s {ca:.3f} CPU s/M, {b} {rb/1e6:.3f} M/s {cb:.3f} CPU s/M; {b}/{a} x{rb/ra:.3f} (paired median x{statistics.median(pr):.3f})")
