"""Who ran when during one perf_consume run, from `perf sched record` data.

    perf sched record -o sched.data -- target/release/examples/perf_consume 127.0.0.1:29092 bench-1k-none 500000
    python3 benches/profile-1k/overlap.py sched.data BROKER_PID

Prints each class of thread's on-CPU time within the run (from the I/O thread's first to
its last run): our I/O thread ("kafka-consumer"), our user thread, the broker's
data-plane threads (network and request handler), the rest of the broker, other tasks,
idle; then, sampled every 10 us, how often the I/O thread and the broker's data-plane
threads ran at the same time, one without the other, or neither.
"""
import sys, re, subprocess, collections
data = sys.argv[1]
BROKER = sys.argv[2]
out = subprocess.run(['perf','sched','timehist','-i',data],capture_output=True,text=True).stdout
iv = collections.defaultdict(list)
names = {}
for line in out.splitlines()[3:]:
    m = re.match(r'\s*([\d.]+)\s+\[(\d+)\]\s+(.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$', line)
    if not m: continue
    t=float(m.group(1)); cpu=int(m.group(2)); task=m.group(3); run=float(m.group(6))/1000
    iv[task].append((t-run,t,cpu))
def cls(task):
    if task.startswith('<idle>'): return 'idle'
    if 'kafka-consumer' in task: return 'io'
    if re.match(r'pc-\w+\[\d+\]$', task) or task.startswith('perf_consume['): return 'user'
    if task.endswith(f'/{BROKER}]') and 'data-plane' in task: return 'broker'
    if task.endswith(f'/{BROKER}]'): return 'broker-other'
    if task.startswith('perf['): return 'perf'
    return 'other'
# the run window: first and last run of the io thread
io = [x for k,v in iv.items() if cls(k)=='io' for x in v]
t0 = min(a for a,b,c in io); t1 = max(b for a,b,c in io)
print(f"window {t1-t0:.3f} s")
tot = collections.Counter()
for k,v in iv.items():
    for a,b,c in v:
        a=max(a,t0); b=min(b,t1)
        if b>a: tot[cls(k)] += b-a
for k,v in sorted(tot.items(), key=lambda x:-x[1]): print(f"  {k:14s} {v*1000:8.1f} ms  ({v/(t1-t0)*100:5.1f} % of one core)")
top = collections.Counter()
for k,v in iv.items():
    for a,b,c in v:
        a=max(a,t0); b=min(b,t1)
        if b>a: top[k]+=b-a
print("top tasks:")
for k,v in top.most_common(8): print(f"  {k:40s} {v*1000:8.1f} ms")
# overlap of io thread with the busiest broker thread, sampled every 10 us
step=1e-5
import bisect
def mk(task_pred):
    L=sorted((a,b) for k,v in iv.items() if task_pred(k) for a,b,c in v)
    return L
def busy(L, t):
    # any interval containing t
    i=bisect.bisect_right(L,(t,9e9))-1
    while i>=0 and i>=len(L)-len(L):
        a,b=L[i]
        if a<=t<b: return True
        if b< t - 0.02: break
        i-=1
    return False
ioL=mk(lambda k: cls(k)=='io'); usL=mk(lambda k: cls(k)=='user')
brL=mk(lambda k: cls(k) in ('broker',))
idL=mk(lambda k: cls(k)=='idle')
cnt=collections.Counter(); n=0
t=t0
while t<t1:
    key=('io' if busy(ioL,t) else '--')+'/'+('broker' if busy(brL,t) else '------')
    cnt[key]+=1; n+=1
    t+=step
print("io thread / broker data-plane threads (share of the window):")
for k,v in sorted(cnt.items()): print(f"  {k:16s} {v/n*100:5.1f} %")
