// The Java side of the real log truncation test (tests/cluster_truncation.rs): a producer
// that can write with acks=1, and Java KafkaConsumers that read a partition up to a given
// offset, wait while the test truncates the log under them (an unclean leader election),
// and then say what they saw: a LogTruncationException and its divergent offset, and where
// reading resumed.
//
// Java 17 single-file source program:
//
//   java -cp "$(scripts/broker.sh libs | tail -n1)/*" scripts/java/TruncationClient.java \
//        produce --bootstrap 127.0.0.1:19301,... --topic T --acks 1 --prefix old- --count 10
//
// Commands (all options required unless a default is given):
//   produce --bootstrap B --topic T [--partition 0] --acks all|1 --prefix P --count N
//       writes N records to the partition, value UTF-8 "<P><i>" (i = 0..N-1), key null,
//       one at a time, each acknowledged before the next (no idempotence: acks=1 is allowed);
//       prints "produced N first=O last=O" (the offsets the leader gave them)
//   consume --bootstrap B --topic T [--partition 0] --resets none,earliest,latest --until N
//       one KafkaConsumer per auto.offset.reset policy (assign, seek to 0, no group), each
//       reads until its position is N; prints "ready RESET position=P epoch=E" (E: the
//       leader epoch of the last record read) for each, then "ready". Then it waits for a
//       line "go END" on stdin and polls every consumer until its position reaches END:
//         - a LogTruncationException prints "truncation RESET position=P divergent=D
//           epoch=E" (P: the position it names for the partition, D and E: the divergent
//           offset and its leader epoch from divergentOffsets(); - when unknown), and the
//           consumer seeks to D, as an application would;
//         - any other exception prints "exception RESET CLASS MESSAGE" and fails;
//         - records after the go print "resumed RESET first=O values=V1,V2,..." once
//           reading reached END (O: the offset of the first record returned after "go").
//       Prints "done" and exits 0; 60 s without reaching END fails.
//       --held H adds a consumer "held" (auto.offset.reset=earliest, max.poll.records=5) that
//       stops polling at position H (a multiple of 5) while the records after it that it
//       fetched wait in its buffer; reported like the others.
//   committed --bootstrap B --topic T [--partition 0] --group G --resets none,earliest --end END
//       one new KafkaConsumer per policy with group.id G (assign, no seek: each starts from
//       G's committed offset and the leader epoch committed with it, which it validates),
//       polled until its position reaches END, reporting as consume does after "go"
//       ("truncation ...", "resumed ..." with the first record it returned), then "done".
//
// Errors print "error MESSAGE" and exit 1; bad usage exits 2.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TruncationClient {
    static final Map<String, String> opts = new HashMap<>();

    public static void main(String[] args) {
        try {
            quietLogging();
            if (args.length == 0) usage("no command");
            for (int k = 1; k < args.length; k += 2) {
                if (k + 1 >= args.length) usage("missing value for " + args[k]);
                opts.put(args[k], args[k + 1]);
            }
            switch (args[0]) {
                case "produce": produce(); break;
                case "consume": consume(); break;
                case "committed": committed(); break;
                default: usage("unknown command " + args[0]);
            }
            System.out.flush();
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("error " + t);
            t.printStackTrace(System.err);
            System.out.flush();
            System.exit(1);
        }
    }

    static void usage(String why) {
        System.err.println("TruncationClient: " + why + " (see the comment at the top of scripts/java/TruncationClient.java)");
        System.exit(2);
    }

    static void quietLogging() {
        if (System.getProperty("log4j2.configurationFile") != null) return;
        try {
            Class<?> configurator = Class.forName("org.apache.logging.log4j.core.config.Configurator");
            Class<?> level = Class.forName("org.apache.logging.log4j.Level");
            configurator.getMethod("setRootLevel", level).invoke(null, level.getField("WARN").get(null));
        } catch (Throwable ignored) {
            // log4j2 not on the class path
        }
    }

    static String need(String key) {
        String v = opts.get(key);
        if (v == null) usage(key + " is required");
        return v;
    }

    static TopicPartition partition() {
        return new TopicPartition(need("--topic"), Integer.parseInt(opts.getOrDefault("--partition", "0")));
    }

    static void produce() throws Exception {
        String acks = need("--acks");
        if (!acks.equals("all") && !acks.equals("1")) usage("--acks must be all or 1");
        TopicPartition tp = partition();
        String prefix = need("--prefix");
        int count = Integer.parseInt(need("--count"));
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, need("--bootstrap"));
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "truncation-producer");
        long first = -1, last = -1;
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < count; i++) {
                byte[] value = (prefix + i).getBytes(StandardCharsets.UTF_8);
                RecordMetadata md = producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, value))
                        .get(60, TimeUnit.SECONDS);
                if (first < 0) first = md.offset();
                last = md.offset();
            }
        }
        System.out.println("produced " + count + " first=" + first + " last=" + last);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String label, String reset, String group, int maxPoll) {
        Properties p = new Properties();
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        if (maxPoll > 0) p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, reset);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "truncation-" + label);
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        p.put(ConsumerConfig.RETRY_BACKOFF_MAX_MS_CONFIG, 500);
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static final class Reader {
        final String reset;
        final KafkaConsumer<byte[], byte[]> consumer;
        Optional<Integer> lastEpoch = Optional.empty();
        long first = -1;
        final List<String> values = new ArrayList<>();

        long until;

        Reader(String bootstrap, String label, String reset, String group, int maxPoll) {
            this.reset = label;
            this.consumer = consumer(bootstrap, label, reset, group, maxPoll);
        }
    }

    static void consume() throws Exception {
        String bootstrap = need("--bootstrap");
        TopicPartition tp = partition();
        long until = Long.parseLong(need("--until"));
        Map<String, Reader> readers = new LinkedHashMap<>();
        for (String reset : need("--resets").split(",")) {
            Reader r = new Reader(bootstrap, reset, reset, null, 0);
            r.until = until;
            readers.put(reset, r);
        }
        if (opts.containsKey("--held")) {
            Reader r = new Reader(bootstrap, "held", "earliest", null, 5);
            r.until = Long.parseLong(opts.get("--held"));
            readers.put("held", r);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        for (Reader r : readers.values()) {
            r.consumer.assign(List.of(tp));
            r.consumer.seek(tp, 0);
            while (r.consumer.position(tp) < r.until) {
                if (System.nanoTime() > deadline) throw new IllegalStateException(r.reset + ": position "
                        + r.consumer.position(tp) + " did not reach " + r.until + " within 60 s");
                for (ConsumerRecord<byte[], byte[]> rec : r.consumer.poll(Duration.ofMillis(100))) {
                    r.lastEpoch = rec.leaderEpoch();
                }
            }
            System.out.println("ready " + r.reset + " position=" + r.consumer.position(tp) + " epoch="
                    + r.lastEpoch.map(String::valueOf).orElse("-"));
        }
        System.out.println("ready");
        System.out.flush();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line = in.readLine();
        if (line == null || !line.startsWith("go ")) throw new IllegalStateException("expected \"go END\" on stdin, got " + line);
        long end = Long.parseLong(line.substring(3).trim());
        readTo(readers, tp, end);
    }

    static void committed() throws Exception {
        String bootstrap = need("--bootstrap");
        TopicPartition tp = partition();
        String group = need("--group");
        long end = Long.parseLong(need("--end"));
        Map<String, Reader> readers = new LinkedHashMap<>();
        for (String reset : need("--resets").split(",")) {
            Reader r = new Reader(bootstrap, reset, reset, group, 0);
            r.consumer.assign(List.of(tp));
            readers.put(reset, r);
        }
        readTo(readers, tp, end);
    }

    /** Polls every reader until its position reaches `end`, reporting truncations and records. */
    static void readTo(Map<String, Reader> readers, TopicPartition tp, long end) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        List<Reader> left = new ArrayList<>(readers.values());
        while (!left.isEmpty()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("after 60 s still short of offset " + end + ": "
                        + left.stream().map(r -> r.reset + " after " + r.values.size() + " records").toList());
            }
            for (Reader r : new ArrayList<>(left)) {
                boolean reached;
                try {
                    ConsumerRecords<byte[], byte[]> recs = r.consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> rec : recs) {
                        if (r.first < 0) r.first = rec.offset();
                        r.values.add(rec.value() == null ? "null" : new String(rec.value(), StandardCharsets.UTF_8));
                    }
                    // (position() may validate too, so it is asked in here.)
                    reached = !recs.isEmpty() && r.consumer.position(tp, Duration.ofSeconds(10)) >= end;
                } catch (LogTruncationException e) {
                    Long position = e.offsetOutOfRangePartitions().get(tp);
                    OffsetAndMetadata d = e.divergentOffsets().get(tp);
                    System.out.println("truncation " + r.reset + " position=" + position
                            + " divergent=" + (d == null ? "-" : String.valueOf(d.offset()))
                            + " epoch=" + (d == null ? "-" : d.leaderEpoch().map(String::valueOf).orElse("-")));
                    System.out.flush();
                    if (d == null) throw new IllegalStateException(r.reset + ": truncation without a divergent offset");
                    r.consumer.seek(tp, d.offset());
                    continue;
                } catch (Exception e) {
                    System.out.println("exception " + r.reset + " " + e.getClass().getName() + " " + e.getMessage());
                    throw e;
                }
                if (reached) {
                    System.out.println("resumed " + r.reset + " first=" + r.first + " values=" + String.join(",", r.values));
                    System.out.flush();
                    r.consumer.close(Duration.ofSeconds(1));
                    left.remove(r);
                }
            }
        }
        System.out.println("done");
    }
}
