// Scale benchmark, the Java side (bash scripts/bench.sh --scale, driven by benches/scale.py;
// see benches/README.md): the same measurement as examples/perf_scale.rs with the Java
// KafkaConsumer, printing one JSON line with the same keys ("impl":"java").
//
// Java 17 single-file source program, no build step:
//
//   java -Xmx1g -cp "$(scripts/broker.sh libs | tail -n1)/*" scripts/java/ScaleConsumer.java \
//        --bootstrap 127.0.0.1:29700 --topic T --partitions 10000 --per-partition 10 \
//        [--mode assign|classic|consumer] [--idle-secs 10] [--settle-secs 2] [--timeout-secs 120]
//
// --mode assign (default): partitionsFor (timed on its own), then the clock starts and
// assign() takes them all; no group.id, positions from auto.offset.reset=earliest. classic /
// consumer: the clock starts and subscribe() joins a fresh group as its only member with that
// group.protocol, auto.offset.reset=earliest, enable.auto.commit=false. Fetch settings: the
// client's defaults, spelled out as in the throughput benchmark.
//
// It polls (poll(100 ms)) until every partition has returned its record at offset
// PER_PARTITION - 1 ("caught up"), polls on for --settle-secs, then measures an idle window of
// --idle-secs while still polling. Figures as in perf_scale.rs, with these differences:
// - cpu_s: the JVM's process CPU (OperatingSystemMXBean.getProcessCpuTime) from just before
//   the KafkaConsumer was made to caught up: JIT compilation and GC of that time included,
//   JVM start-up and class loading before it not.
// - idle.io_thread_cpu_pct: only with --mode consumer, where the client has a background
//   thread (consumer_background_thread) that does the network I/O. The classic consumer
//   (assign, classic) fetches on the application's thread inside poll(): there is no I/O
//   thread to measure, and io_thread is null; compare idle.process_cpu_pct instead.
// - rss_bytes_per_partition: (VmRSS after the idle window - VmRSS just after the consumer
//   was made) / partitions. For a JVM this mostly measures how far the heap has grown, which
//   depends on the heap settings and the garbage collector's timing more than on the
//   consumer's needs.
// - metrics: the KafkaConsumer's own metrics() (the client-wide ones, tagged client-id only):
//   consumer-fetch-manager-metrics records-consumed-total, bytes-consumed-total, fetch-total,
//   fetch-latency-avg, and consumer-metrics request-total (every node), under the keys
//   perf_scale.rs prints; assigned_partitions from assignment().
//
// Exits 1 (after printing what it has, "error" set) if it does not catch up in time.

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ScaleConsumer {
    static final String BACKGROUND_THREAD = "consumer_background_thread";
    static final Duration POLL_TIMEOUT = Duration.ofMillis(100);

    // Figures, filled in as the run goes.
    static Double partitionsForS, assignedS, caughtUpS, closeS, idleIoPct;
    static List<Double> firstRecordS = new ArrayList<>();
    static long records, idleRecords, rssBaseKib, rssKib, rssPeakKib;
    static double cpuS, idleWindowS, idleProcessPct;
    static List<Double> pollMs = new ArrayList<>(), deliveryMs = new ArrayList<>();
    static String error;

    static String bootstrap, topic, mode = "assign";
    static int partitions;
    static long perPartition;
    static double idleSecs = 10, settleSecs = 2, timeoutSecs = 120;

    public static void main(String[] args) {
        try {
            for (int k = 0; k < args.length; k += 2) {
                if (k + 1 >= args.length) throw new IllegalArgumentException("missing value for " + args[k]);
                String v = args[k + 1];
                switch (args[k]) {
                    case "--bootstrap": bootstrap = v; break;
                    case "--topic": topic = v; break;
                    case "--partitions": partitions = Integer.parseInt(v); break;
                    case "--per-partition": perPartition = Long.parseLong(v); break;
                    case "--mode": mode = v; break;
                    case "--idle-secs": idleSecs = Double.parseDouble(v); break;
                    case "--settle-secs": settleSecs = Double.parseDouble(v); break;
                    case "--timeout-secs": timeoutSecs = Double.parseDouble(v); break;
                    default: throw new IllegalArgumentException("unknown option " + args[k]);
                }
            }
            if (bootstrap == null || topic == null || partitions <= 0 || perPartition <= 0
                    || !List.of("assign", "classic", "consumer").contains(mode)) {
                throw new IllegalArgumentException("--bootstrap, --topic, --partitions, --per-partition "
                        + "are required; --mode assign|classic|consumer");
            }
        } catch (RuntimeException e) {
            System.err.println("ScaleConsumer: " + e.getMessage());
            System.exit(2);
        }
        int code = 0;
        try {
            run();
        } catch (Exception e) {
            error = String.valueOf(e.getMessage());
            code = 1;
        }
        System.out.println(json());
        System.out.flush();
        if (code != 0) System.err.println("ScaleConsumer: " + error);
        System.exit(code);
    }

    static void run() throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "java-scale");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "52428800");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "1048576");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (!mode.equals("assign")) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, "java-scale-" + ProcessHandle.current().pid() + "-" + System.nanoTime());
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, mode);
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        }
        double cpuBefore = processCpuS();
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        rssBaseKib = statusKib("VmRSS:");
        long[] heard = {0};
        long[] allHeardAt = {0};
        long start;
        if (mode.equals("assign")) {
            long t = System.nanoTime();
            List<PartitionInfo> infos = consumer.partitionsFor(topic);
            partitionsForS = (System.nanoTime() - t) / 1e9;
            if (infos.size() != partitions) {
                throw new IllegalStateException(topic + " has " + infos.size() + " partitions, not " + partitions);
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo i : infos) tps.add(new TopicPartition(topic, i.partition()));
            start = System.nanoTime();
            consumer.assign(tps);
            assignedS = (System.nanoTime() - start) / 1e9;
        } else {
            start = System.nanoTime();
            consumer.subscribe(Collections.singletonList(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    heard[0] -= parts.size();
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    heard[0] += parts.size();
                    if (heard[0] >= partitions && allHeardAt[0] == 0) allHeardAt[0] = System.nanoTime();
                }
            });
        }

        long last = perPartition - 1;
        double[] first = new double[partitions];
        boolean[] caught = new boolean[partitions];
        int left = partitions;
        try {
            while (left > 0) {
                if ((System.nanoTime() - start) / 1e9 > timeoutSecs) {
                    throw new IllegalStateException(left + " of " + partitions + " partitions not caught up after "
                            + timeoutSecs + " s (" + countSet(first) + " returned a record)");
                }
                long t = System.nanoTime();
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(POLL_TIMEOUT);
                if (batch.isEmpty()) continue;
                pollMs.add((System.nanoTime() - t) / 1e6);
                double now = (System.nanoTime() - start) / 1e9;
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    int part = r.partition();
                    records++;
                    if (first[part] == 0) first[part] = now;
                    if (!caught[part] && r.offset() >= last) {
                        caught[part] = true;
                        left--;
                    }
                }
            }
        } finally {
            for (double f : first) if (f > 0) firstRecordS.add(f);
        }
        caughtUpS = (System.nanoTime() - start) / 1e9;
        cpuS = processCpuS() - cpuBefore;
        metrics[0] = snapshot(consumer);
        if (allHeardAt[0] != 0) assignedS = (allHeardAt[0] - start) / 1e9;

        long settleUntil = System.nanoTime() + (long) (settleSecs * 1e9);
        while (System.nanoTime() < settleUntil) consumer.poll(POLL_TIMEOUT);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long bg = mode.equals("consumer") ? threadId(threads, BACKGROUND_THREAD) : -1;
        long bgBefore = bg >= 0 ? threads.getThreadCpuTime(bg) : -1;
        double procBefore = processCpuS();
        metrics[1] = snapshot(consumer);
        long w0 = System.nanoTime();
        while (System.nanoTime() - w0 < (long) (idleSecs * 1e9)) {
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(POLL_TIMEOUT);
            if (batch.isEmpty()) continue;
            long nowMs = System.currentTimeMillis();
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                idleRecords++;
                deliveryMs.add((double) (nowMs - r.timestamp()));
            }
        }
        idleWindowS = (System.nanoTime() - w0) / 1e9;
        metrics[2] = snapshot(consumer);
        idleProcessPct = (processCpuS() - procBefore) / idleWindowS * 100;
        if (bg >= 0 && bgBefore >= 0) {
            long after = threads.getThreadCpuTime(bg);
            if (after >= 0) idleIoPct = (after - bgBefore) / 1e9 / idleWindowS * 100;
        }
        rssKib = statusKib("VmRSS:");
        rssPeakKib = statusKib("VmHWM:");
        long t = System.nanoTime();
        consumer.close();
        closeS = (System.nanoTime() - t) / 1e9;
    }

    /** metrics() at caught up, and at the start and the end of the idle window. */
    static final double[][] metrics = new double[3][];
    static final String[][] METRICS = {
        {"consumer-fetch-manager-metrics", "records-consumed-total"},
        {"consumer-fetch-manager-metrics", "bytes-consumed-total"},
        {"consumer-fetch-manager-metrics", "fetch-total"},
        {"consumer-fetch-manager-metrics", "fetch-latency-avg"},
        {"consumer-metrics", "request-total"},
    };

    /** The METRICS values (NaN: not there), then the number of assigned partitions. */
    static double[] snapshot(KafkaConsumer<byte[], byte[]> consumer) {
        double[] v = new double[METRICS.length + 1];
        java.util.Arrays.fill(v, Double.NaN);
        for (Map.Entry<MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
            MetricName n = e.getKey();
            if (n.tags().size() != 1) continue; // per topic, partition or node
            for (int i = 0; i < METRICS.length; i++) {
                if (n.group().equals(METRICS[i][0]) && n.name().equals(METRICS[i][1])
                        && e.getValue().metricValue() instanceof Number x) {
                    v[i] = x.doubleValue();
                }
            }
        }
        v[METRICS.length] = consumer.assignment().size();
        return v;
    }

    static String metricsJson() {
        double[] c = metrics[0], b = metrics[1], a = metrics[2];
        if (c == null) return "null";
        StringBuilder s = new StringBuilder();
        s.append(String.format(Locale.ROOT, "{\"records_consumed_total\":%s,\"bytes_consumed_total\":%s,"
                + "\"fetch_total\":%s,\"fetch_latency_avg_ms\":%s,\"requests_total\":%s,\"assigned_partitions\":%d",
                finite(c[0]), finite(c[1]), finite(c[2]), finite(c[3]), finite(c[4]), (long) c[5]));
        if (b != null && a != null && idleWindowS > 0) {
            s.append(",\"idle_fetches_per_s\":").append(finite((a[2] - b[2]) / idleWindowS))
                    .append(",\"idle_requests_per_s\":").append(finite((a[4] - b[4]) / idleWindowS))
                    .append(",\"idle_fetch_latency_avg_ms\":").append(finite(a[3]));
        }
        return s.append('}').toString();
    }

    static String finite(double v) {
        return Double.isFinite(v) ? String.format(Locale.ROOT, "%.6f", v) : "null";
    }

    static int countSet(double[] a) {
        int n = 0;
        for (double v : a) if (v > 0) n++;
        return n;
    }

    static long threadId(ThreadMXBean threads, String name) {
        for (ThreadInfo i : threads.getThreadInfo(threads.getAllThreadIds())) {
            if (i != null && i.getThreadName().equals(name)) return i.getThreadId();
        }
        return -1;
    }

    static double processCpuS() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1e9;
    }

    static long statusKib(String field) {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (l.startsWith(field)) return Long.parseLong(l.substring(field.length()).trim().split("\\s+")[0]);
            }
        } catch (Exception ignored) {
        }
        return 0;
    }

    static String num(Double v) {
        return v == null ? "null" : String.format(Locale.ROOT, "%.6f", v);
    }

    static String dist(List<Double> values) {
        if (values.isEmpty()) return "{\"n\":0,\"p50\":null,\"p99\":null,\"max\":null}";
        List<Double> v = new ArrayList<>(values);
        Collections.sort(v);
        int n = v.size();
        return String.format(Locale.ROOT, "{\"n\":%d,\"p50\":%.6f,\"p99\":%.6f,\"max\":%.6f}", n,
                v.get(Math.max(1, (int) Math.ceil(0.50 * n)) - 1), v.get(Math.max(1, (int) Math.ceil(0.99 * n)) - 1),
                v.get(n - 1));
    }

    static String json() {
        StringBuilder s = new StringBuilder();
        s.append(String.format(Locale.ROOT, "{\"impl\":\"java\",\"mode\":\"%s\",\"topic\":\"%s\",\"partitions\":%d,"
                + "\"per_partition\":%d", mode, topic, partitions, perPartition));
        s.append(",\"partitions_for_s\":").append(num(partitionsForS)).append(",\"assigned_s\":").append(num(assignedS));
        s.append(",\"first_record_s\":").append(dist(firstRecordS)).append(",\"partitions_with_records\":")
                .append(firstRecordS.size());
        Double rate = caughtUpS != null && caughtUpS > 0 ? records / caughtUpS : null;
        Double perRecord = records > 0 ? cpuS / records * 1e6 : null;
        s.append(",\"caught_up_s\":").append(num(caughtUpS)).append(",\"records\":").append(records)
                .append(",\"records_per_s\":").append(num(rate))
                .append(String.format(Locale.ROOT, ",\"cpu_s\":%.3f", cpuS))
                .append(",\"cpu_us_per_record\":").append(num(perRecord));
        Double perPart = rssKib > 0 ? (rssKib - rssBaseKib) * 1024.0 / partitions : null;
        s.append(",\"rss_base_kib\":").append(rssBaseKib).append(",\"rss_kib\":").append(rssKib)
                .append(",\"rss_peak_kib\":").append(rssPeakKib).append(",\"rss_bytes_per_partition\":").append(num(perPart));
        s.append(",\"poll_ms\":").append(dist(pollMs));
        s.append(String.format(Locale.ROOT, ",\"idle\":{\"window_s\":%.3f,\"io_thread\":%s,\"io_thread_cpu_pct\":%s,"
                        + "\"process_cpu_pct\":%.3f,\"records\":%d,\"delivery_ms\":%s}", idleWindowS,
                mode.equals("consumer") ? "\"" + BACKGROUND_THREAD + "\"" : "null", num(idleIoPct), idleProcessPct,
                idleRecords, dist(deliveryMs)));
        s.append(",\"close_s\":").append(num(closeS));
        s.append(",\"metrics\":").append(metricsJson());
        if (error != null) s.append(",\"error\":\"").append(error.replace('"', ' ').replace('\\', ' ').replace('\n', ' ')).append('"');
        return s.append('}').toString();
    }
}
