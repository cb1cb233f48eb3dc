"""The fetch cycle of one perf_consume run, from syscall and scheduler events.

    perf sched record -e syscalls:sys_enter_sendto -e syscalls:sys_enter_recvfrom \
        -e syscalls:sys_exit_recvfrom -o cycles.data -- \
        target/release/examples/perf_consume 127.0.0.1:29092 bench-1k-none 500000
    python3 benches/profile-1k/cycles.py cycles.data

The fetch connection is the socket our I/O thread received the most bytes on; a cycle
runs from one Fetch request written on it (sendto) to the next. Per cycle: request to
the answer's first byte read, first to last byte, last byte to the next request; and in
each phase, the on-CPU time of our I/O thread and of the busiest broker data-plane thread
(the network thread that writes the answers). Cycles under 100 kB (empty long polls at
the end) are left out.
"""
import sys, re, subprocess, collections, statistics
data=sys.argv[1]
out=subprocess.run(['perf','script','-i',data,'-F','comm,tid,time,event,trace'],capture_output=True,text=True).stdout
ev=[]
for line in out.splitlines():
    m=re.match(r'\s*(.*?)\s+(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$',line)
    if not m: continue
    ev.append((m.group(1),int(m.group(2)),float(m.group(3)),m.group(4),m.group(5)))
iotid=[t for c,t,_,e,_ in ev if c=='kafka-consumer'][0]
# fd -> bytes received, to find the fetch connection
pending_fd=None; byfd=collections.Counter()
for c,t,ts,e,a in ev:
    if t!=iotid: continue
    if e=='syscalls:sys_enter_recvfrom': pending_fd=int(re.search(r'fd: (0x[0-9a-f]+)',a).group(1),16)
    elif e=='syscalls:sys_exit_recvfrom':
        r=int(a.strip(),16)
        if r<2**63 and pending_fd is not None: byfd[pending_fd]+=r
fetchfd=byfd.most_common(1)[0][0]
cyc=[]; cur=None; pending_fd=None
oncpu=[]; last_in=None
bron=[]; blast={}
for c,t,ts,e,a in ev:
    if e=='sched:sched_switch':
        prev=int(re.search(r'prev_pid=(\d+)',a).group(1)); nxt=int(re.search(r'next_pid=(\d+)',a).group(1))
        if nxt==iotid: last_in=ts
        if prev==iotid and last_in is not None: oncpu.append((last_in,ts)); last_in=None
        nc=re.search(r'next_comm=(.*?) next_pid',a).group(1); pc=re.search(r'prev_comm=(.*?) prev_pid',a).group(1)
        if nc.startswith('data-plane'): blast[nxt]=ts
        if pc.startswith('data-plane') and prev in blast: bron.append((blast.pop(prev),ts,prev))
        continue
    if t!=iotid: continue
    if e=='syscalls:sys_enter_sendto' and int(re.search(r'fd: (0x[0-9a-f]+)',a).group(1),16)==fetchfd:
        if cur: cyc.append(cur)
        cur={'send':ts,'first':None,'last':None,'bytes':0,'recvs':0}
    elif e=='syscalls:sys_enter_recvfrom': pending_fd=int(re.search(r'fd: (0x[0-9a-f]+)',a).group(1),16)
    elif e=='syscalls:sys_exit_recvfrom' and pending_fd==fetchfd and cur:
        r=int(a.strip(),16)
        if r<2**63 and r>0:
            cur['first']=cur['first'] or ts; cur['last']=ts; cur['bytes']+=r; cur['recvs']+=1
for i in range(len(cyc)-1): cyc[i]['next']=cyc[i+1]['send']
cyc=[x for x in cyc if 'next' in x and x['first'] and x['bytes']>100000]
def cpu_in(a,b): return sum(max(0,min(y,b)-max(x,a)) for x,y in oncpu)
import collections as C
bt=C.Counter()
for x,y,t in bron: bt[t]+=y-x
btid=bt.most_common(1)[0][0]; print("broker threads on CPU (ms):", [(t, round(v*1000,1)) for t,v in bt.most_common(4)])
bon=[(x,y) for x,y,t in bron if t==btid]
def bcpu_in(a,b): return sum(max(0,min(y,b)-max(x,a)) for x,y in bon)
rows=[]
for x in cyc:
    wait=x['first']-x['send']; recv=x['last']-x['first']; post=x['next']-x['last']
    rows.append((wait,recv,post,x['bytes'],cpu_in(x['send'],x['first']),cpu_in(x['first'],x['last']),cpu_in(x['last'],x['next']),bcpu_in(x['send'],x['first']),bcpu_in(x['first'],x['last']),bcpu_in(x['last'],x['next'])))
n=len(rows); tot=sum(r[0]+r[1]+r[2] for r in rows)
print(f"fetch fd {fetchfd}: {n} full fetch cycles, {tot*1000:.1f} ms, median response {statistics.median(r[3] for r in rows)/1e6:.2f} MB")
for i,name in enumerate(['send -> first byte','first -> last byte','last byte -> next send']):
    s=sum(r[i] for r in rows); c=sum(r[4+i] for r in rows); b=sum(r[7+i] for r in rows)
    print(f"  {name:24s} total {s*1000:7.1f} ms ({s/tot*100:4.1f} %), median {statistics.median(r[i] for r in rows)*1000:6.2f} ms; on CPU: io thread {c*1000:6.1f} ms, broker network thread {b*1000:6.1f} ms")
