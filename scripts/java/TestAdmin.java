// Admin and group helper for the kafka-consumer integration tests: what the Rust tests
// need a real Java client for (deleting topics, a group's committed offsets as the Java
// consumer sees them, committing from Java, an active group member).
//
// Java 17 single-file source program, no build step:
//
//   LIBS=$(scripts/broker.sh libs | tail -n1)
//   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
//        -cp "$LIBS/*" scripts/java/TestAdmin.java COMMAND --bootstrap 127.0.0.1:19092 ...
//
// Commands:
//   delete-topic --topic T
//       deletes T and waits until the broker no longer lists it; prints "deleted T"
//   create-topics --topics T1,T2,... --partitions P
//       creates the topics (P partitions each, replication factor 1) in one request and
//       waits until every partition of each has a leader that answers ListOffsets (right
//       after creation a leader may still say NOT_LEADER_OR_FOLLOWER); prints "created N"
//   committed --group G --topic T --partitions P
//       prints, per partition p of 0..P-1, the committed offset as the Java consumer's
//       committed() sees it: "committed p OFFSET METADATA" or "committed p none"
//   commit --group G --topic T --partition p --offset O [--metadata M]
//       commits O (with metadata M) for T-p as a consumer outside the group (assign +
//       commitSync); prints "committed"
//   member --group G --topic T [--protocol classic|consumer]
//       subscribes to T in group G, polls until it has an assignment, prints
//       "joined [partitions]", then keeps polling (staying in the group) until its stdin
//       closes; then leaves the group and prints "left"
//   delete-records --topic T --partition p --before O
//       deletes T-p's records before offset O (the log start offset becomes O); prints
//       "log start O"
//   consume-metrics --topic T --partitions P --count N
//       assigns T-0..T-(P-1) (no group), reads N records from the beginning, and prints the
//       Java consumer's own figures for them: "consumed RECORDS BYTES" (its
//       records-consumed-total and bytes-consumed-total)
//   acl-add --principal User:bob --resource topic|group|cluster|transactional-id --name N
//           --operation READ|DESCRIBE|ALL|... [--pattern literal|prefixed]
//           [--permission allow|deny] [--host H]
//       creates the ACL (pattern literal, permission allow and host * by default) and waits
//       until describeAcls lists it, i.e. the broker's authorizer applies it; prints
//       "acl added". Run it against the PLAINTEXT listener: its principal, ANONYMOUS, is a
//       super user of the scripts/broker.sh broker.
//   acl-remove (the same options)
//       deletes the ACLs matching exactly these options and waits until describeAcls no
//       longer lists them; prints "acl removed" (also when there was none)
//
// Exits 0 on success; prints the error and exits non-zero on failure.

import java.io.InputStream;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class TestAdmin {
    static final Map<String, String> opts = new HashMap<>();

    public static void main(String[] args) {
        try {
            quietLogging();
            if (args.length == 0) throw new IllegalArgumentException("no command");
            String cmd = args[0];
            for (int k = 1; k < args.length; k += 2) {
                if (k + 1 >= args.length) throw new IllegalArgumentException("missing value for " + args[k]);
                opts.put(args[k], args[k + 1]);
            }
            switch (cmd) {
                case "delete-topic": deleteTopic(); break;
                case "create-topics": createTopics(); break;
                case "committed": committed(); break;
                case "commit": commit(); break;
                case "member": member(); break;
                case "consume-metrics": consumeMetrics(); break;
                case "delete-records": deleteRecords(); break;
                case "acl-add": aclAdd(); break;
                case "acl-remove": aclRemove(); break;
                default: throw new IllegalArgumentException("unknown command " + cmd);
            }
            System.out.flush();
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("TestAdmin: FAILED: " + t);
            t.printStackTrace(System.err);
            System.exit(1);
        }
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

    static void deleteTopic() throws Exception {
        String topic = opt("--topic");
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opt("--bootstrap"));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 30000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60000);
        try (Admin admin = Admin.create(p)) {
            admin.deleteTopics(Collections.singleton(topic)).all().get(60, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                boolean gone = false;
                try {
                    admin.describeTopics(Collections.singleton(topic)).allTopicNames().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                    gone = true;
                }
                if (gone && !admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic)) break;
                if (System.nanoTime() > deadline) throw new IllegalStateException("topic " + topic + " still listed");
                Thread.sleep(100);
            }
        }
        System.out.println("deleted " + topic);
    }

    static void createTopics() throws Exception {
        java.util.List<String> topics = java.util.Arrays.asList(opt("--topics").split(","));
        int partitions = Integer.parseInt(opt("--partitions"));
        try (Admin admin = admin()) {
            java.util.List<NewTopic> wanted = new java.util.ArrayList<>();
            for (String t : topics) wanted.add(new NewTopic(t, partitions, (short) 1));
            admin.createTopics(wanted).all().get(60, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                boolean ready = false;
                try {
                    Map<String, TopicDescription> d = admin.describeTopics(topics).allTopicNames().get(30, TimeUnit.SECONDS);
                    ready = d.values().stream().allMatch(td -> td.partitions().size() == partitions
                            && td.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty()));
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                }
                if (ready) break;
                if (System.nanoTime() > deadline) throw new IllegalStateException("no leaders for all of " + topics);
                Thread.sleep(100);
            }
            // The Admin client retries NOT_LEADER_OR_FOLLOWER itself until every leader answers.
            Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> latest = new HashMap<>();
            for (String t : topics) {
                for (int p = 0; p < partitions; p++) {
                    latest.put(new TopicPartition(t, p), org.apache.kafka.clients.admin.OffsetSpec.latest());
                }
            }
            admin.listOffsets(latest).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("created " + topics.size());
    }

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opt("--bootstrap"));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 30000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60000);
        return Admin.create(p);
    }

    /** The ACL the acl-add / acl-remove options describe. */
    static AclBinding acl() {
        ResourceType type;
        String resource = opt("--resource");
        switch (resource) {
            case "topic": type = ResourceType.TOPIC; break;
            case "group": type = ResourceType.GROUP; break;
            case "cluster": type = ResourceType.CLUSTER; break;
            case "transactional-id": type = ResourceType.TRANSACTIONAL_ID; break;
            default: throw new IllegalArgumentException("unknown --resource " + resource);
        }
        String pattern = opts.getOrDefault("--pattern", "literal");
        PatternType patternType = PatternType.fromString(pattern.toUpperCase(Locale.ROOT));
        if (patternType != PatternType.LITERAL && patternType != PatternType.PREFIXED) {
            throw new IllegalArgumentException("--pattern must be literal or prefixed, not " + pattern);
        }
        String operation = opt("--operation");
        AclOperation op = AclOperation.fromString(operation.toUpperCase(Locale.ROOT));
        if (op == AclOperation.UNKNOWN || op == AclOperation.ANY) {
            throw new IllegalArgumentException("unknown --operation " + operation);
        }
        String permission = opts.getOrDefault("--permission", "allow");
        AclPermissionType perm = AclPermissionType.fromString(permission.toUpperCase(Locale.ROOT));
        if (perm != AclPermissionType.ALLOW && perm != AclPermissionType.DENY) {
            throw new IllegalArgumentException("--permission must be allow or deny, not " + permission);
        }
        String principal = opt("--principal");
        if (!principal.contains(":")) throw new IllegalArgumentException("--principal must be TYPE:NAME, e.g. User:bob");
        return new AclBinding(new ResourcePattern(type, opt("--name"), patternType),
                new AccessControlEntry(principal, opts.getOrDefault("--host", "*"), op, perm));
    }

    /** Waits until describeAcls lists the binding (listed true) or no longer does. */
    static void awaitAcl(Admin admin, AclBinding acl, boolean listed) throws Exception {
        AclBindingFilter filter = acl.toFilter();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            Collection<AclBinding> got = admin.describeAcls(filter).values().get(30, TimeUnit.SECONDS);
            if (got.contains(acl) == listed) return;
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("ACL " + acl + (listed ? " not listed" : " still listed") + " after 60 s");
            }
            Thread.sleep(50);
        }
    }

    static void aclAdd() throws Exception {
        AclBinding acl = acl();
        try (Admin admin = admin()) {
            admin.createAcls(Collections.singleton(acl)).all().get(60, TimeUnit.SECONDS);
            awaitAcl(admin, acl, true);
        }
        System.out.println("acl added");
    }

    static void aclRemove() throws Exception {
        AclBinding acl = acl();
        try (Admin admin = admin()) {
            admin.deleteAcls(Collections.singleton(acl.toFilter())).all().get(60, TimeUnit.SECONDS);
            awaitAcl(admin, acl, false);
        }
        System.out.println("acl removed");
    }

    static Properties consumerProps(String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("--bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-consumer-test-admin");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    static void deleteRecords() throws Exception {
        TopicPartition tp = new TopicPartition(opt("--topic"), Integer.parseInt(opt("--partition")));
        long before = Long.parseLong(opt("--before"));
        try (Admin admin = admin()) {
            long low = admin.deleteRecords(Collections.singletonMap(tp, org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(before)))
                    .lowWatermarks().get(tp).get(60, TimeUnit.SECONDS).lowWatermark();
            System.out.println("log start " + low);
        }
    }

    static void consumeMetrics() {
        String topic = opt("--topic");
        int partitions = Integer.parseInt(opt("--partitions"));
        long count = Long.parseLong(opt("--count"));
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("--bootstrap"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-consumer-test-metrics");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            java.util.List<TopicPartition> tps = new java.util.ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            long read = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (read < count) {
                read += c.poll(Duration.ofMillis(200)).count();
                if (System.nanoTime() > deadline) throw new IllegalStateException("read " + read + " of " + count);
            }
            double records = Double.NaN;
            double bytes = Double.NaN;
            for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e : c.metrics().entrySet()) {
                org.apache.kafka.common.MetricName n = e.getKey();
                if (!n.group().equals("consumer-fetch-manager-metrics") || n.tags().containsKey("topic")) continue;
                if (n.name().equals("records-consumed-total")) records = ((Number) e.getValue().metricValue()).doubleValue();
                if (n.name().equals("bytes-consumed-total")) bytes = ((Number) e.getValue().metricValue()).doubleValue();
            }
            System.out.println("consumed " + (long) records + " " + (long) bytes);
        }
    }

    static void committed() {
        String topic = opt("--topic");
        int partitions = Integer.parseInt(opt("--partitions"));
        Set<TopicPartition> tps = new HashSet<>();
        for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(opt("--group")))) {
            Map<TopicPartition, OffsetAndMetadata> got = c.committed(tps, Duration.ofSeconds(60));
            for (int i = 0; i < partitions; i++) {
                OffsetAndMetadata o = got.get(new TopicPartition(topic, i));
                if (o == null) {
                    System.out.println("committed " + i + " none");
                } else {
                    System.out.println("committed " + i + " " + o.offset() + " " + o.metadata());
                }
            }
        }
    }

    static void commit() {
        TopicPartition tp = new TopicPartition(opt("--topic"), Integer.parseInt(opt("--partition")));
        long offset = Long.parseLong(opt("--offset"));
        String metadata = opts.getOrDefault("--metadata", "");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(opt("--group")))) {
            c.assign(Collections.singleton(tp));
            c.commitSync(Collections.singletonMap(tp, new OffsetAndMetadata(offset, metadata)),
                    Duration.ofSeconds(60));
        }
        System.out.println("committed");
    }

    static void member() throws Exception {
        Properties p = consumerProps(opt("--group"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, opts.getOrDefault("--protocol", "classic"));
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        AtomicBoolean stdinClosed = new AtomicBoolean(false);
        Thread watcher = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) {
                    // keep reading until EOF
                }
            } catch (Exception ignored) {
                // treat as closed
            }
            stdinClosed.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(Collections.singleton(opt("--topic")));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (c.assignment().isEmpty()) {
                c.poll(Duration.ofMillis(100));
                if (System.nanoTime() > deadline) throw new IllegalStateException("no assignment within 60 s");
            }
            System.out.println("joined " + c.assignment());
            System.out.flush();
            while (!stdinClosed.get()) {
                c.poll(Duration.ofMillis(100));
            }
        }
        System.out.println("left");
    }
}
