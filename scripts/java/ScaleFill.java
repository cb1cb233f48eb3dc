// Creates and fills a topic for the scale benchmark (benches/scale.py): exactly
// --per-partition records in every partition, each partition's records sent one after the
// other (so they form one batch or a few), values of --size random letters, null keys, acks=1.
//
// Java 17 single-file source program, no build step:
//
//   java -cp "$(scripts/broker.sh libs | tail -n1)/*" scripts/java/ScaleFill.java \
//        --bootstrap 127.0.0.1:29700 --topic T --partitions 10000 --per-partition 10 [--size 100] [--create]
//
// --create first creates the topic (replication factor 1; it must not exist), in steps: a
// KRaft controller refuses an operation of more than 10,000 metadata records ("Unable to
// perform excessively large batch operation"), one per partition, so it creates STEP (5,000)
// partitions and adds the rest STEP at a time (CreatePartitions); then it waits until every
// partition has a leader. Prints "created PARTITIONS SECONDS".
//
// Prints "filled RECORDS SECONDS" and exits 0 once every record was acknowledged; prints
// "error MESSAGE" and exits 1 if one was not.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ScaleFill {
    static final int STEP = 5000;

    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        int partitions = 0, perPartition = 0, size = 100;
        boolean create = false;
        for (int k = 0; k < args.length; k += 2) {
            if (args[k].equals("--create")) {
                create = true;
                k--;
                continue;
            }
            if (k + 1 >= args.length) {
                System.out.println("error missing value for " + args[k]);
                System.exit(2);
            }
            String v = args[k + 1];
            switch (args[k]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--partitions": partitions = Integer.parseInt(v); break;
                case "--per-partition": perPartition = Integer.parseInt(v); break;
                case "--size": size = Integer.parseInt(v); break;
                default:
                    System.out.println("error unknown option " + args[k]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || partitions <= 0 || perPartition <= 0) {
            System.out.println("error --bootstrap, --topic, --partitions, --per-partition are required");
            System.exit(2);
        }
        quietLogs();
        if (create) create(bootstrap, topic, partitions);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "65536");
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(256L << 20));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        Random rnd = new Random(17);
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        long t0 = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int part = 0; part < partitions && failed.get() == null; part++) {
                for (int i = 0; i < perPartition; i++) {
                    byte[] value = new byte[size];
                    for (int b = 0; b < size; b++) value[b] = (byte) ('A' + rnd.nextInt(26));
                    producer.send(new ProducerRecord<>(topic, part, null, value), (md, e) -> {
                        if (e == null) acked.incrementAndGet();
                        else failed.compareAndSet(null, e);
                    });
                }
            }
            producer.flush();
            producer.close(Duration.ofMinutes(2));
        }
        long want = (long) partitions * perPartition;
        if (failed.get() != null || acked.get() != want) {
            System.out.println("error " + acked.get() + " of " + want + " acknowledged"
                    + (failed.get() != null ? ": " + failed.get().getMessage() : ""));
            System.exit(1);
        }
        System.out.printf("filled %d %.1f%n", want, (System.nanoTime() - t0) / 1e9);
    }

    static void create(String bootstrap, String topic, int partitions) throws Exception {
        long t0 = System.nanoTime();
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "300000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "120000");
        try (Admin admin = Admin.create(p)) {
            int n = Math.min(partitions, STEP);
            admin.createTopics(List.of(new NewTopic(topic, n, (short) 1))).all().get();
            while (n < partitions) {
                n = Math.min(partitions, n + STEP);
                // Right after a creation the controller may not know the topic yet everywhere.
                for (int attempt = 0; ; attempt++) {
                    try {
                        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(n))).all().get();
                        break;
                    } catch (Exception e) {
                        if (attempt >= 30) throw e;
                        Thread.sleep(500);
                    }
                }
            }
            long deadline = System.nanoTime() + 300_000_000_000L;
            while (true) {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                long led = d.partitions().stream().filter(i -> i.leader() != null && !i.leader().isEmpty()).count();
                if (d.partitions().size() == partitions && led == partitions) break;
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(topic + ": " + led + " of " + partitions + " partitions have a leader");
                }
                Thread.sleep(500);
            }
            // A leader in the metadata may not have made the partition's log yet (a produce
            // would get NOT_LEADER_OR_FOLLOWER): the Admin client retries ListOffsets until
            // every leader answers.
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int i = 0; i < partitions; i++) latest.put(new TopicPartition(topic, i), OffsetSpec.latest());
            admin.listOffsets(latest).all().get();
        }
        System.out.printf("created %d %.1f%n", partitions, (System.nanoTime() - t0) / 1e9);
    }

    /// The clients' retries right after a creation log at WARN, one line per partition:
    /// errors only.
    static void quietLogs() {
        try {
            Class<?> c = Class.forName("org.apache.logging.log4j.core.config.Configurator");
            Class<?> level = Class.forName("org.apache.logging.log4j.Level");
            c.getMethod("setRootLevel", level).invoke(null, level.getField("ERROR").get(null));
        } catch (Exception ignored) {
        }
    }
}
