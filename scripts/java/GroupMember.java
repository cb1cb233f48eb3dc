// A Java KafkaConsumer as a member of a consumer group, for the kafka-consumer group and
// interop tests (tests/common/java_member.rs drives it). It subscribes with a rebalance
// listener and reports every event on stdout, one line each, flushed at once.
//
// Java 17 single-file source program (the tests compile it with javac):
//
//   LIBS=$(scripts/broker.sh libs | tail -n1)
//   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
//        -cp "$LIBS/*" scripts/java/GroupMember.java --bootstrap 127.0.0.1:19092 --group G --topics T
//
// Options:
//   --bootstrap HOST:PORT --group G    (required)
//   --topics T1,T2 | --pattern REGEX   (one required) the topics, or a regex subscription:
//                                      consumer protocol: subscribe(SubscriptionPattern),
//                                      matched by the broker (RE2J, whole name); classic:
//                                      subscribe(java.util.regex.Pattern), matched here
//   --protocol classic|consumer        group.protocol (default classic)
//   --assignor range|roundrobin|sticky|cooperative-sticky
//                                      classic: partition.assignment.strategy (default: the
//                                      Java client's default)
//   --remote-assignor uniform|range    consumer protocol: group.remote.assignor
//   --instance-id ID                   group.instance.id (static membership)
//   --session-timeout-ms N             classic: session.timeout.ms
//   --heartbeat-ms N                   classic: heartbeat.interval.ms
//   --max-poll-interval-ms N           max.poll.interval.ms
//   --commit revoke|none               revoke (default): commitSync of the consumed offsets of
//                                      the revoked partitions in onPartitionsRevoked
//   --auto-offset-reset earliest|latest|none   (default: the Java client's, latest)
//   --commit-every-ms N                also commitSync of the consumed offsets of the owned
//                                      partitions every N ms, after the records were printed;
//                                      a failed one (e.g. refused during a classic rebalance)
//                                      prints "warn MESSAGE" and the member goes on
//   --format lines|stamped|json        lines (default): the lines below; stamped: the same
//                                      lines, each after "@MS " (wall-clock milliseconds when
//                                      written); json: the JSON lines below
//   --prop KEY=VALUE                   a consumer property, set after (so overriding) all of
//                                      the above; may be repeated, e.g. for SASL_SSL:
//                                      --prop security.protocol=SASL_SSL
//                                      --prop sasl.mechanism=SCRAM-SHA-512
//                                      --prop 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";'
//                                      --prop ssl.truststore.type=PEM
//                                      --prop ssl.truststore.location=target/kafka/certs/ca.pem
//
// Output lines (partitions as TOPIC-PARTITION, sorted by topic then partition, comma
// separated, "-" for none; GEN is groupMetadata().generationId() at the callback: the
// generation (classic) or member epoch (consumer protocol)):
//   ready                              the consumer is created and subscribed
//   assigned GEN PARTS                 onPartitionsAssigned (printed on entry: owned from now)
//   revoked GEN PARTS                  onPartitionsRevoked (printed last, after the commit:
//                                      no longer owned from now)
//   lost GEN PARTS                     onPartitionsLost
//   record TOPIC PARTITION OFFSET VALUE   every record polled; VALUE is the UTF-8 value, the
//                                      field is missing for a null value
//   committed TOPIC-PARTITION=OFFSET,...  after each successful commitSync ("committed -" for
//                                      a `commit` command with nothing consumed)
//   left                               closed cleanly (left the group); exits 0
//   error MESSAGE                      anything failed; exits 1 (stack trace on stderr)
//
// With --format json (the rebalance benchmark, benches/rebalance.py, whose members of ours
// and of librdkafka print the same): one JSON object a line, each with "t", the wall-clock
// time in milliseconds since the Unix epoch (when the callback ran, or when poll returned the
// records), and "ev": {"ev":"ready"}; {"ev":"assigned"|"revoked"|"lost","gen":GEN,
// "parts":["T-P",...]} (at the same moments as the lines above); {"ev":"records","tp":"T-P",
// "ranges":[[FIRST,LAST],...],"n":N,"ts":TS} (one per partition and poll: the offsets
// returned, as runs of consecutive offsets, how many, and the first one's record timestamp); {"ev":"committed","offsets":{"T-P":OFFSET,...}};
// {"ev":"warn"|"error","msg":"..."}; {"ev":"left"}; {"ev":"metrics",...} (on the metrics
// command, and just before the consumer closes: the client's own figures from
// consumer.metrics(), consumer-coordinator-metrics and consumer-fetch-manager-metrics, under
// the names examples/group_member.rs prints: rebalance_total, rebalance_latency_total_ms,
// rebalance_latency_avg_ms, rebalance_latency_max_ms, last_rebalance_latency_ms (null: the
// Java client has no such metric), last_rebalance_seconds_ago, failed_rebalance_total,
// records_consumed_total, commit_total, commit_latency_avg_ms, commit_latency_max_ms,
// assigned_partitions; null where the client reports NaN or lacks the metric).
//
// Commands on stdin, one per line:
//   pause-poll MS   do not call poll for MS milliseconds (to exceed max.poll.interval.ms)
//   commit          commitSync of the consumed offsets of the owned partitions
//   metrics         print the metrics line (--format json only)
//   close           close the consumer (leaves the group), print "left", exit 0
//   EOF             as close
//
// Offsets committed are the last polled record's offset + 1 per partition, only for
// partitions that returned records since they were (last) assigned.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupMember {
    static final Map<String, String> opts = new HashMap<>();
    /** The --prop options, in order (the only option that may be repeated). */
    static final List<String[]> props = new ArrayList<>();
    static final Comparator<TopicPartition> ORDER =
            Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

    static KafkaConsumer<byte[], byte[]> consumer;
    /** Next offset to commit per partition: the last record polled + 1. */
    static final Map<TopicPartition, Long> consumed = new HashMap<>();
    static boolean commitOnRevoke = true;
    /** The first exception a listener callback threw (the client may swallow it in close). */
    static Throwable listenerError;
    /** --format json. */
    static boolean json;
    /** --format stamped: each plain line after "@MS " (wall-clock milliseconds when written). */
    static boolean stamped;
    /** --commit-every-ms (0: only on revoke and on the commit command). */
    static long commitEveryMs;

    public static void main(String[] args) {
        try {
            quietLogging();
            for (int k = 0; k < args.length; k += 2) {
                if (k + 1 >= args.length) throw new IllegalArgumentException("missing value for " + args[k]);
                if (args[k].equals("--prop")) {
                    int eq = args[k + 1].indexOf('=');
                    if (eq <= 0) throw new IllegalArgumentException("--prop needs KEY=VALUE, not " + args[k + 1]);
                    props.add(new String[] {args[k + 1].substring(0, eq), args[k + 1].substring(eq + 1)});
                } else {
                    opts.put(args[k], args[k + 1]);
                }
            }
            run();
            System.exit(0);
        } catch (Throwable t) {
            String msg = String.valueOf(t);
            for (Throwable c = t.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                msg += " / caused by " + c;
            }
            if (json) {
                outJson("error", ",\"msg\":" + quoted(msg));
            } else {
                out("error " + msg.replace('\n', ' ').replace('\r', ' '));
            }
            t.printStackTrace(System.err);
            System.exit(1);
        }
    }

    static synchronized void out(String line) {
        System.out.println(stamped ? "@" + System.currentTimeMillis() + " " + line : line);
        System.out.flush();
    }

    /** {"t":NOW,"ev":EV<rest>} (rest starts with a comma, or is empty). */
    static void outJson(String ev, String rest) {
        out("{\"t\":" + System.currentTimeMillis() + ",\"ev\":\"" + ev + "\"" + rest + "}");
    }

    static String quoted(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    /** A line without data: ready, left. */
    static void plain(String word) {
        if (json) outJson(word, "");
        else out(word);
    }

    /** An assigned, revoked or lost line. */
    static void ownership(String word, Collection<TopicPartition> tps) {
        if (json) {
            List<TopicPartition> sorted = new ArrayList<>(tps);
            sorted.sort(ORDER);
            StringBuilder sb = new StringBuilder();
            for (TopicPartition tp : sorted) {
                if (sb.length() > 0) sb.append(',');
                sb.append(quoted(tp.topic() + "-" + tp.partition()));
            }
            outJson(word, ",\"gen\":" + generation() + ",\"parts\":[" + sb + "]");
        } else {
            out(word + " " + generation() + " " + parts(tps));
        }
    }

    /** The {"ev":"records"} lines of what one poll returned. */
    static void recordsJson(ConsumerRecords<byte[], byte[]> records) {
        long t = System.currentTimeMillis();
        StringBuilder lines = new StringBuilder();
        for (TopicPartition tp : records.partitions()) {
            StringBuilder ranges = new StringBuilder();
            long first = -1, last = -2, n = 0;
            for (ConsumerRecord<byte[], byte[]> r : records.records(tp)) {
                if (r.offset() != last + 1) {
                    if (first >= 0) ranges.append(ranges.length() > 0 ? "," : "").append('[').append(first).append(',').append(last).append(']');
                    first = r.offset();
                }
                last = r.offset();
                n++;
            }
            if (first >= 0) ranges.append(ranges.length() > 0 ? "," : "").append('[').append(first).append(',').append(last).append(']');
            if (lines.length() > 0) lines.append('\n');
            lines.append("{\"t\":").append(t).append(",\"ev\":\"records\",\"tp\":")
                    .append(quoted(tp.topic() + "-" + tp.partition())).append(",\"ranges\":[")
                    .append(ranges).append("],\"n\":").append(n).append(",\"ts\":")
                    .append(records.records(tp).get(0).timestamp()).append('}');
        }
        if (lines.length() > 0) out(lines.toString());
    }

    static String opt(String name) {
        String v = opts.get(name);
        if (v == null) throw new IllegalArgumentException(name + " is required");
        return v;
    }

    /** Sets the log4j2 root level to WARN unless a config file was given. */
    static void quietLogging() {
        if (System.getProperty("log4j2.configurationFile") != null) {
            return;
        }
        try {
            Class<?> configurator = Class.forName("org.apache.logging.log4j.core.config.Configurator");
            Class<?> level = Class.forName("org.apache.logging.log4j.Level");
            Object warn = level.getField("WARN").get(null);
            configurator.getMethod("setRootLevel", level).invoke(null, warn);
        } catch (Throwable ignored) {
            // log4j2 not on the class path: nothing to do.
        }
    }

    static Properties config() {
        List<String> known = Arrays.asList("--bootstrap", "--group", "--topics", "--pattern", "--protocol", "--assignor",
                "--remote-assignor", "--instance-id", "--session-timeout-ms", "--heartbeat-ms",
                "--max-poll-interval-ms", "--commit", "--auto-offset-reset", "--commit-every-ms", "--format");
        for (String k : opts.keySet()) {
            if (!known.contains(k)) throw new IllegalArgumentException("unknown option " + k);
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("--bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, opt("--group"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "group-member-" + ProcessHandle.current().pid());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, opts.getOrDefault("--protocol", "classic"));
        String assignor = opts.get("--assignor");
        if (assignor != null) {
            String cls;
            switch (assignor) {
                case "range": cls = "org.apache.kafka.clients.consumer.RangeAssignor"; break;
                case "roundrobin": cls = "org.apache.kafka.clients.consumer.RoundRobinAssignor"; break;
                case "sticky": cls = "org.apache.kafka.clients.consumer.StickyAssignor"; break;
                case "cooperative-sticky": cls = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"; break;
                default: throw new IllegalArgumentException("unknown --assignor " + assignor);
            }
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls);
        }
        putIf(p, "--remote-assignor", ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG);
        putIf(p, "--instance-id", ConsumerConfig.GROUP_INSTANCE_ID_CONFIG);
        putIf(p, "--session-timeout-ms", ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
        putIf(p, "--heartbeat-ms", ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        putIf(p, "--max-poll-interval-ms", ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG);
        putIf(p, "--auto-offset-reset", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG);
        String commit = opts.getOrDefault("--commit", "revoke");
        if (!commit.equals("revoke") && !commit.equals("none")) {
            throw new IllegalArgumentException("--commit must be revoke or none");
        }
        commitOnRevoke = commit.equals("revoke");
        commitEveryMs = Long.parseLong(opts.getOrDefault("--commit-every-ms", "0"));
        String format = opts.getOrDefault("--format", "lines");
        if (!format.equals("lines") && !format.equals("stamped") && !format.equals("json")) {
            throw new IllegalArgumentException("--format must be lines, stamped or json");
        }
        json = format.equals("json");
        stamped = format.equals("stamped");
        for (String[] kv : props) p.put(kv[0], kv[1]);
        return p;
    }

    static void putIf(Properties p, String option, String key) {
        String v = opts.get(option);
        if (v != null) p.put(key, v);
    }

    static String parts(Collection<TopicPartition> tps) {
        if (tps.isEmpty()) return "-";
        List<TopicPartition> sorted = new ArrayList<>(tps);
        sorted.sort(ORDER);
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : sorted) {
            if (sb.length() > 0) sb.append(',');
            sb.append(tp.topic()).append('-').append(tp.partition());
        }
        return sb.toString();
    }

    static int generation() {
        return consumer.groupMetadata().generationId();
    }

    /** commitSync of these offsets, then prints them. */
    static void commit(Map<TopicPartition, Long> offsets) {
        Map<TopicPartition, OffsetAndMetadata> o = new TreeMap<>(ORDER);
        for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
            o.put(e.getKey(), new OffsetAndMetadata(e.getValue()));
        }
        if (!o.isEmpty()) consumer.commitSync(o, Duration.ofSeconds(30));
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : o.entrySet()) {
            if (sb.length() > 0) sb.append(',');
            if (json) {
                sb.append(quoted(e.getKey().topic() + "-" + e.getKey().partition()))
                        .append(':').append(e.getValue().offset());
            } else {
                sb.append(e.getKey().topic()).append('-').append(e.getKey().partition())
                        .append('=').append(e.getValue().offset());
            }
        }
        if (json) outJson("committed", ",\"offsets\":{" + sb + "}");
        else out("committed " + (sb.length() == 0 ? "-" : sb.toString()));
    }

    /** A client-wide metric's value (tags: client-id only) as a JSON number, or null. */
    static String metric(Map<MetricName, ? extends Metric> all, String group, String name, boolean integer) {
        for (Map.Entry<MetricName, ? extends Metric> e : all.entrySet()) {
            MetricName n = e.getKey();
            if (!n.group().equals(group) || !n.name().equals(name)) continue;
            if (n.tags().containsKey("topic") || n.tags().containsKey("partition")) continue;
            Object v = e.getValue().metricValue();
            if (!(v instanceof Number)) return "null";
            double d = ((Number) v).doubleValue();
            if (!Double.isFinite(d)) return "null";
            return integer ? Long.toString(Math.round(d)) : String.format(java.util.Locale.ROOT, "%.3f", d);
        }
        return "null";
    }

    /** The {"ev":"metrics"} line (the names examples/group_member.rs prints). */
    static void metricsJson() {
        Map<MetricName, ? extends Metric> all = consumer.metrics();
        String c = "consumer-coordinator-metrics", f = "consumer-fetch-manager-metrics";
        String ago = metric(all, c, "last-rebalance-seconds-ago", true);
        outJson("metrics", ",\"rebalance_total\":" + metric(all, c, "rebalance-total", true)
                + ",\"rebalance_latency_total_ms\":" + metric(all, c, "rebalance-latency-total", false)
                + ",\"rebalance_latency_avg_ms\":" + metric(all, c, "rebalance-latency-avg", false)
                + ",\"rebalance_latency_max_ms\":" + metric(all, c, "rebalance-latency-max", false)
                + ",\"last_rebalance_latency_ms\":null"
                + ",\"last_rebalance_seconds_ago\":" + (ago.startsWith("-") ? "null" : ago)
                + ",\"failed_rebalance_total\":" + metric(all, c, "failed-rebalance-total", true)
                + ",\"records_consumed_total\":" + metric(all, f, "records-consumed-total", true)
                + ",\"commit_total\":" + metric(all, c, "commit-total", true)
                + ",\"commit_latency_avg_ms\":" + metric(all, c, "commit-latency-avg", false)
                + ",\"commit_latency_max_ms\":" + metric(all, c, "commit-latency-max", false)
                + ",\"assigned_partitions\":" + metric(all, c, "assigned-partitions", true));
    }

    static final ConsumerRebalanceListener LISTENER = new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> tps) {
            guard(() -> ownership("assigned", tps));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> tps) {
            guard(() -> {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                for (TopicPartition tp : tps) {
                    Long o = consumed.remove(tp);
                    if (o != null) offsets.put(tp, o);
                }
                if (commitOnRevoke && !offsets.isEmpty()) commit(offsets);
                ownership("revoked", tps);
            });
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> tps) {
            guard(() -> {
                for (TopicPartition tp : tps) consumed.remove(tp);
                ownership("lost", tps);
            });
        }
    };

    static void guard(Runnable r) {
        try {
            r.run();
        } catch (RuntimeException | Error e) {
            if (listenerError == null) listenerError = e;
            throw e;
        }
    }

    static void checkListener() throws Throwable {
        if (listenerError != null) throw listenerError;
    }

    static void run() throws Throwable {
        Properties p = config();
        String topicList = opts.get("--topics");
        String pattern = opts.get("--pattern");
        if ((topicList == null) == (pattern == null)) {
            throw new IllegalArgumentException("one of --topics and --pattern is required");
        }
        LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) commands.add(line);
            } catch (Exception ignored) {
                // as EOF
            }
            commands.add("close");
        }, "stdin");
        reader.setDaemon(true);

        consumer = new KafkaConsumer<>(p);
        if (topicList != null) {
            consumer.subscribe(Arrays.asList(topicList.split(",")), LISTENER);
        } else if (p.get(ConsumerConfig.GROUP_PROTOCOL_CONFIG).toString().equalsIgnoreCase("consumer")) {
            consumer.subscribe(new SubscriptionPattern(pattern), LISTENER);
        } else {
            consumer.subscribe(Pattern.compile(pattern), LISTENER);
        }
        plain("ready");
        reader.start();
        long lastCommit = System.nanoTime();
        while (true) {
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
            if (json) recordsJson(records);
            for (ConsumerRecord<byte[], byte[]> r : records) {
                if (!json) {
                    String line = "record " + r.topic() + " " + r.partition() + " " + r.offset();
                    if (r.value() != null) line += " " + new String(r.value(), StandardCharsets.UTF_8);
                    out(line);
                }
                consumed.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
            }
            checkListener();
            if (commitEveryMs > 0 && System.nanoTime() - lastCommit >= commitEveryMs * 1_000_000L) {
                lastCommit = System.nanoTime();
                Map<TopicPartition, Long> offsets = new HashMap<>(consumed);
                offsets.keySet().retainAll(consumer.assignment());
                if (!offsets.isEmpty()) {
                    try {
                        commit(offsets);
                    } catch (KafkaException e) {
                        // E.g. the classic protocol refuses commits during a rebalance
                        // (RebalanceInProgressException): the revoke callback commits what is
                        // given up, the next round the rest.
                        if (json) outJson("warn", ",\"msg\":" + quoted(String.valueOf(e)));
                        else out("warn " + String.valueOf(e).replace('\n', ' '));
                    }
                }
            }
            String cmd;
            while ((cmd = commands.poll()) != null) {
                String[] w = cmd.trim().split("\\s+");
                switch (w[0]) {
                    case "":
                        break;
                    case "pause-poll":
                        if (w.length != 2) throw new IllegalArgumentException("usage: pause-poll MS");
                        Thread.sleep(Long.parseLong(w[1]));
                        break;
                    case "commit":
                        Map<TopicPartition, Long> offsets = new HashMap<>(consumed);
                        offsets.keySet().retainAll(consumer.assignment());
                        commit(offsets);
                        break;
                    case "metrics":
                        if (!json) throw new IllegalArgumentException("metrics: --format json only");
                        metricsJson();
                        break;
                    case "close":
                        if (json) metricsJson();
                        consumer.close();
                        checkListener();
                        plain("left");
                        return;
                    default:
                        throw new IllegalArgumentException("unknown command: " + cmd);
                }
            }
        }
    }
}
