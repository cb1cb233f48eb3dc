// Test data producer for the kafka-consumer integration tests.
//
// Java 17 single-file source program, no build step:
//
//   LIBS=$(scripts/broker.sh libs | tail -n1)
//   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
//        -cp "$LIBS/*" scripts/java/TestProducer.java \
//        --bootstrap 127.0.0.1:19092 --topic T --partitions 6 --count 100000 --compression zstd
//
// (Without -Dlog4j2.configurationFile the program sets the log4j2 root level to
// WARN itself.)
//
// Options:
//   --bootstrap HOST:PORT        (required)
//   --topic NAME                 (required)
//   --partitions P               (default 1) topic is created with P partitions, RF 1,
//                                if missing; an existing topic must have P partitions
//   --create-only                only create the topic
//   --count N --start I          produce sequence numbers i = I .. I+N-1 (defaults 0, 0)
//   --compression none|gzip|snappy|lz4|zstd   (default none)
//   --value-size S               pad values with '.' to S bytes (default 0)
//   --transactional-id ID --txn commit|abort  produce everything in one transaction
//   --hold                       with a transaction: once the records are written, print
//                                "open" and keep the transaction open until a line (or
//                                EOF) arrives on stdin, then commit or abort it
//   --timestamp-start MS --timestamp-step MS  CreateTime of record i = start + (i-I)*step
//   --batch-size B --linger-ms L (defaults 65536, 5)
//
// Record i (the Rust tests check exactly this):
//   partition = i % P
//   key       = null if i % 5 == 1, else UTF-8 "key-<i>"
//   value     = null if i % 7 == 3, else UTF-8 "value-<i>" padded with '.' to --value-size
//   headers   = "seq" = UTF-8 decimal i; if i % 3 == 0 also "dup"="a", "dup"="b", "nul"=null
//
// Prints "produced N records to TOPIC (txn=commit|abort|none)" and exits 0, or
// prints the error and exits non-zero.

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TestProducer {
    static String bootstrap;
    static String topic;
    static int partitions = 1;
    static boolean createOnly = false;
    static boolean hold = false;
    static long count = 0;
    static long start = 0;
    static String compression = "none";
    static int valueSize = 0;
    static String transactionalId;
    static String txn;
    static Long timestampStart;
    static Long timestampStep;
    static int batchSize = 65536;
    static int lingerMs = 5;

    public static void main(String[] args) {
        try {
            quietLogging();
            parseArgs(args);
            ensureTopic();
            long produced = 0;
            if (!createOnly) {
                produced = produce();
            }
            String txnLabel = transactionalId == null ? "none" : txn;
            System.out.println("produced " + produced + " records to " + topic + " (txn=" + txnLabel + ")");
            System.out.flush();
            System.exit(0);
        } catch (UsageException e) {
            System.err.println("TestProducer: " + e.getMessage());
            System.exit(2);
        } catch (Throwable t) {
            System.err.println("TestProducer: FAILED: " + t);
            t.printStackTrace(System.err);
            System.exit(1);
        }
    }

    static final class UsageException extends Exception {
        UsageException(String msg) {
            super(msg);
        }
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

    static void parseArgs(String[] args) throws UsageException {
        for (int k = 0; k < args.length; k++) {
            String a = args[k];
            switch (a) {
                case "--create-only":
                    createOnly = true;
                    continue;
                case "--hold":
                    hold = true;
                    continue;
                case "-h":
                case "--help":
                    throw new UsageException("see the comment at the top of scripts/java/TestProducer.java");
                default:
                    break;
            }
            if (k + 1 >= args.length) {
                throw new UsageException("missing value for " + a);
            }
            String v = args[++k];
            switch (a) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--partitions": partitions = (int) parseLong(a, v, 1); break;
                case "--count": count = parseLong(a, v, 0); break;
                case "--start": start = parseLong(a, v, 0); break;
                case "--compression": compression = v; break;
                case "--value-size": valueSize = (int) parseLong(a, v, 0); break;
                case "--transactional-id": transactionalId = v; break;
                case "--txn": txn = v; break;
                case "--timestamp-start": timestampStart = parseLong(a, v, Long.MIN_VALUE); break;
                case "--timestamp-step": timestampStep = parseLong(a, v, Long.MIN_VALUE); break;
                case "--batch-size": batchSize = (int) parseLong(a, v, 0); break;
                case "--linger-ms": lingerMs = (int) parseLong(a, v, 0); break;
                default: throw new UsageException("unknown option " + a);
            }
        }
        if (bootstrap == null) throw new UsageException("--bootstrap is required");
        if (topic == null) throw new UsageException("--topic is required");
        if (!Arrays.asList("none", "gzip", "snappy", "lz4", "zstd").contains(compression)) {
            throw new UsageException("--compression must be none|gzip|snappy|lz4|zstd");
        }
        if ((transactionalId == null) != (txn == null)) {
            throw new UsageException("--transactional-id and --txn must be given together");
        }
        if (txn != null && !txn.equals("commit") && !txn.equals("abort")) {
            throw new UsageException("--txn must be commit or abort");
        }
        if (hold && transactionalId == null) {
            throw new UsageException("--hold needs --transactional-id and --txn");
        }
        if (timestampStep != null && timestampStart == null) {
            throw new UsageException("--timestamp-step needs --timestamp-start");
        }
        if (timestampStart != null && timestampStep == null) {
            timestampStep = 0L;
        }
    }

    static long parseLong(String opt, String v, long min) throws UsageException {
        long n;
        try {
            n = Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new UsageException(opt + ": not a number: " + v);
        }
        if (n < min) throw new UsageException(opt + " must be >= " + min);
        return n;
    }

    static void ensureTopic() throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 30000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60000);
        try (Admin admin = Admin.create(p)) {
            try {
                admin.createTopics(Collections.singleton(new NewTopic(topic, partitions, (short) 1)))
                        .all().get(60, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                TopicDescription d = null;
                try {
                    d = admin.describeTopics(Collections.singleton(topic)).allTopicNames()
                            .get(30, TimeUnit.SECONDS).get(topic);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                }
                if (d != null) {
                    List<TopicPartitionInfo> ps = d.partitions();
                    if (ps.size() != partitions) {
                        throw new IllegalStateException("topic " + topic + " already exists with "
                                + ps.size() + " partitions, but --partitions " + partitions + " was requested");
                    }
                    boolean allLeaders = ps.stream().allMatch(tp -> tp.leader() != null && !tp.leader().isEmpty());
                    if (allLeaders) return;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("timed out waiting for leaders of all partitions of " + topic);
                }
                Thread.sleep(100);
            }
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static ProducerRecord<byte[], byte[]> record(long i) {
        int partition = (int) (i % partitions);
        byte[] key = (i % 5 == 1) ? null : utf8("key-" + i);
        byte[] value = null;
        if (i % 7 != 3) {
            StringBuilder sb = new StringBuilder("value-").append(i);
            while (sb.length() < valueSize) sb.append('.');
            value = utf8(sb.toString());
        }
        Header[] headers;
        if (i % 3 == 0) {
            headers = new Header[] {
                new RecordHeader("seq", utf8(Long.toString(i))),
                new RecordHeader("dup", utf8("a")),
                new RecordHeader("dup", utf8("b")),
                new RecordHeader("nul", (byte[]) null),
            };
        } else {
            headers = new Header[] {new RecordHeader("seq", utf8(Long.toString(i)))};
        }
        Long ts = timestampStart == null ? null : timestampStart + (i - start) * timestampStep;
        return new ProducerRecord<>(topic, partition, ts, key, value, Arrays.asList(headers));
    }

    static long produce() throws Exception {
        Map<String, Object> c = new HashMap<>();
        c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        c.put(ProducerConfig.ACKS_CONFIG, "all");
        c.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5);
        c.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        c.put(ProducerConfig.BATCH_SIZE_CONFIG, batchSize);
        c.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        c.put(ProducerConfig.BUFFER_MEMORY_CONFIG, 128L * 1024 * 1024);
        c.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Math.max(1024 * 1024, batchSize + 64 * 1024));
        c.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120000);
        c.put(ProducerConfig.CLIENT_ID_CONFIG, "kafka-consumer-test-producer");
        if (transactionalId != null) {
            c.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            c.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 120000);
        }

        AtomicReference<Exception> firstError = new AtomicReference<>();
        AtomicLong acked = new AtomicLong();
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(c, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (transactionalId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (long i = start; i < start + count; i++) {
                if (firstError.get() != null) break;
                producer.send(record(i), (md, e) -> {
                    if (e != null) {
                        firstError.compareAndSet(null, e);
                    } else {
                        acked.incrementAndGet();
                    }
                });
            }
            producer.flush();
            if (firstError.get() != null) {
                if (transactionalId != null) {
                    try {
                        producer.abortTransaction();
                    } catch (Exception ignored) {
                        // report the original error
                    }
                }
                throw firstError.get();
            }
            if (transactionalId != null) {
                if (hold) {
                    System.out.println("open");
                    System.out.flush();
                    new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
                }
                if (txn.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
        }
        if (acked.get() != count) {
            throw new IllegalStateException("only " + acked.get() + " of " + count + " records were acknowledged");
        }
        return count;
    }
}
