// Admin helper for the local 3-node test cluster (scripts/cluster.sh): readiness, topics,
// partition leaders and epochs, group coordinators, the metadata quorum.
//
// Java 17 single-file source program (scripts/cluster.sh compiles it once into
// target/kafka/cluster-admin/ and runs the class; both ways work):
//
//   LIBS=$(scripts/broker.sh libs | tail -n1)
//   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
//        -cp "$LIBS/*" scripts/java/ClusterAdmin.java COMMAND --bootstrap 127.0.0.1:19301,... ...
//
// --bootstrap lists the nodes to ask (HOST:PORT, comma-separated); scripts/cluster.sh
// passes only the nodes whose process runs and is not frozen, so no request waits for a
// node that cannot answer. Partition state (leader, leader epoch, replicas, ISR) comes
// from a Metadata request (v12) sent straight to a node: the Admin API's TopicDescription
// has no leader epoch. Every command takes --timeout SECONDS (default 60).
//
// Commands:
//   wait-ready --nodes 1,2,3
//       until every --bootstrap node answers a Metadata request listing all of --nodes as
//       live (registered, unfenced) brokers, and the metadata quorum has a leader; prints
//       "ready brokers=1,2,3 quorum-leader=N"
//   create-topic --topic T --partitions P [--rf 3] [--replicas 1,2] [--config KEY=VALUE]...
//       creates T and waits as wait-isr does; prints "created T". --replicas places every
//       partition on exactly these nodes, the first the preferred leader (instead of --rf:
//       e.g. a topic on two nodes, so the third keeps the controller quorum while both are
//       disturbed)
//   describe --topic T
//       one line per partition, as the first answering node sees it:
//       "partition=P leader=L epoch=E replicas=1,2,3 isr=1,2,3 offline=-"
//       (leader -1: none; offline: replicas the node knows to be offline, - if none)
//   leader --topic T --partition P
//       prints the leader's node id (-1 if the partition has none)
//   wait-isr --topic T
//       until, on every --bootstrap node, every partition of T has a leader and all its
//       replicas in sync; prints the partitions as describe does
//   elect-preferred --topic T
//       preferred leader election for every partition of T (a partition already led by
//       its first replica is left alone), then waits until every --bootstrap node sees
//       the first replica of every partition as its leader; prints the partitions
//   elect-unclean --topic T [--nodes 2,3]
//       unclean leader election for every partition of T without a live leader (Admin
//       electLeaders(UNCLEAN): a live replica outside the ISR may become the leader, losing
//       what only the old leader had), retried until a replica is alive to elect; then waits
//       until every --bootstrap node sees every partition with a live leader; prints the
//       partitions as describe does. --nodes: the nodes known to be running; a leader not
//       among them is dead even while the controller has not fenced it yet (a node killed
//       a moment ago still leads until its broker session times out)
//   coordinator --group G
//       prints the node id of G's group coordinator (FindCoordinator, retried while the
//       coordinator is not available, e.g. while __consumer_offsets is being created)
//   quorum
//       "leader=N epoch=E high-watermark=H voters=1,2,3 lag=1:0,2:0,3:5" (lag: how far each
//       voter's log ends behind the high watermark; ? when the leader has not heard from it)
//
// Exits 0 on success; prints the error to stderr and exits 1 on failure, 2 on bad usage.

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.message.FindCoordinatorRequestData;
import org.apache.kafka.common.message.FindCoordinatorResponseData;
import org.apache.kafka.common.message.MetadataRequestData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.FindCoordinatorRequest;
import org.apache.kafka.common.requests.FindCoordinatorResponse;
import org.apache.kafka.common.requests.MetadataRequest;
import org.apache.kafka.common.requests.MetadataResponse;
import org.apache.kafka.common.requests.RequestHeader;

public class ClusterAdmin {
    static final short METADATA_VERSION = 12;
    static final short FIND_COORDINATOR_VERSION = 4;
    static final int CONNECT_TIMEOUT_MS = 2000;
    static final int READ_TIMEOUT_MS = 5000;

    static final Map<String, String> opts = new HashMap<>();
    static final List<String> configs = new ArrayList<>();
    static List<String> bootstrap;
    static long deadline;
    static int correlation = 0;

    public static void main(String[] args) {
        try {
            quietLogging();
            if (args.length == 0) throw new UsageException("no command");
            String cmd = args[0];
            for (int k = 1; k < args.length; k += 2) {
                if (k + 1 >= args.length) throw new UsageException("missing value for " + args[k]);
                if (args[k].equals("--config")) {
                    if (!args[k + 1].contains("=")) throw new UsageException("--config wants KEY=VALUE, not " + args[k + 1]);
                    configs.add(args[k + 1]);
                } else {
                    opts.put(args[k], args[k + 1]);
                }
            }
            bootstrap = List.of(need("--bootstrap").split(","));
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(intOpt("--timeout", 60));
            switch (cmd) {
                case "wait-ready": waitReady(); break;
                case "create-topic": createTopic(); break;
                case "describe": printPartitions(describe(bootstrap.get(0), need("--topic"), true)); break;
                case "leader": leader(); break;
                case "wait-isr": printPartitions(waitIsr(need("--topic"), false)); break;
                case "elect-preferred": electPreferred(); break;
                case "elect-unclean": electUnclean(); break;
                case "coordinator": coordinator(); break;
                case "quorum": quorum(); break;
                default: throw new UsageException("unknown command " + cmd);
            }
            System.out.flush();
            System.exit(0);
        } catch (UsageException e) {
            System.err.println("ClusterAdmin: " + e.getMessage() + " (see the comment at the top of scripts/java/ClusterAdmin.java)");
            System.exit(2);
        } catch (Throwable t) {
            System.err.println("ClusterAdmin: " + t.getMessage());
            if (!(t instanceof Failure)) t.printStackTrace(System.err);
            System.exit(1);
        }
    }

    static final class UsageException extends Exception {
        UsageException(String msg) {
            super(msg);
        }
    }

    /** An expected failure (timeout, unknown topic): its message says all. */
    static final class Failure extends Exception {
        Failure(String msg) {
            super(msg);
        }
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

    static String need(String key) throws UsageException {
        String v = opts.get(key);
        if (v == null) throw new UsageException(key + " is required");
        return v;
    }

    static int intOpt(String key, int dflt) throws UsageException {
        String v = opts.get(key);
        if (v == null) return dflt;
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new UsageException(key + ": not a number: " + v);
        }
    }

    static boolean timedOut() {
        return System.nanoTime() > deadline;
    }

    static long millisLeft() {
        return Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
    }

    static void pause() throws InterruptedException {
        Thread.sleep(200);
    }

    // ---- Requests sent straight to one node ----

    /** Sends one request to HOST:PORT and returns the parsed response. */
    static AbstractResponse send(String node, AbstractRequest.Builder<?> builder, short version) throws IOException {
        int colon = node.lastIndexOf(':');
        if (colon < 0) throw new IOException("not HOST:PORT: " + node);
        String host = node.substring(0, colon);
        int port = Integer.parseInt(node.substring(colon + 1));
        AbstractRequest request = builder.build(version);
        RequestHeader header = new RequestHeader(request.apiKey(), version, "cluster-admin", ++correlation);
        ByteBuffer out = request.serializeWithHeader(header);
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), CONNECT_TIMEOUT_MS);
            s.setSoTimeout(READ_TIMEOUT_MS);
            OutputStream os = s.getOutputStream();
            byte[] frame = new byte[4 + out.remaining()];
            ByteBuffer.wrap(frame).putInt(out.remaining()).put(out);
            os.write(frame);
            os.flush();
            DataInputStream in = new DataInputStream(s.getInputStream());
            int size = in.readInt();
            byte[] body = new byte[size];
            in.readFully(body);
            return AbstractResponse.parseResponse(ByteBuffer.wrap(body), header);
        }
    }

    /** Metadata of `topic` (null: no topics, only the brokers) as `node` sees it. */
    static MetadataResponseData metadata(String node, String topic) throws IOException {
        MetadataRequestData data = new MetadataRequestData()
                .setAllowAutoTopicCreation(false)
                .setTopics(new ArrayList<>());
        if (topic != null) {
            data.topics().add(new MetadataRequestData.MetadataRequestTopic().setName(topic));
        }
        return ((MetadataResponse) send(node, new MetadataRequest.Builder(data), METADATA_VERSION)).data();
    }

    /** One partition's state. */
    record Part(int partition, int leader, int epoch, List<Integer> replicas, List<Integer> isr, List<Integer> offline) {
        String line() {
            return "partition=" + partition + " leader=" + leader + " epoch=" + epoch
                    + " replicas=" + ids(replicas) + " isr=" + ids(isr) + " offline=" + ids(offline);
        }

        boolean fullIsr() {
            return leader >= 0 && new TreeSet<>(isr).equals(new TreeSet<>(replicas));
        }
    }

    static String ids(List<Integer> ids) {
        return ids.isEmpty() ? "-" : ids.stream().map(String::valueOf).collect(Collectors.joining(","));
    }

    /**
     * The partitions of `topic` as `node` sees them (sorted). With `firstAnswering`, asks the
     * --bootstrap nodes in turn until one answers. Unknown topic: a Failure.
     */
    static List<Part> describe(String node, String topic, boolean firstAnswering) throws Exception {
        List<String> nodes = firstAnswering ? bootstrap : List.of(node);
        IOException last = null;
        for (String n : nodes) {
            MetadataResponseData md;
            try {
                md = metadata(n, topic);
            } catch (IOException e) {
                last = e;
                continue;
            }
            MetadataResponseData.MetadataResponseTopic t = md.topics().iterator().next();
            Errors err = Errors.forCode(t.errorCode());
            if (err != Errors.NONE) throw new Failure("topic " + topic + " on " + n + ": " + err.name());
            List<Part> parts = new ArrayList<>();
            for (MetadataResponseData.MetadataResponsePartition p : t.partitions()) {
                parts.add(new Part(p.partitionIndex(), p.leaderId(), p.leaderEpoch(), p.replicaNodes(), p.isrNodes(),
                        p.offlineReplicas()));
            }
            parts.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
            return parts;
        }
        throw new Failure("no node answered a Metadata request (" + String.join(",", nodes) + "): " + last);
    }

    static void printPartitions(List<Part> parts) {
        for (Part p : parts) System.out.println(p.line());
    }

    // ---- Commands ----

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, String.join(",", bootstrap));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) Math.min(Integer.MAX_VALUE, millisLeft()));
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "cluster-admin");
        return Admin.create(p);
    }

    static void waitReady() throws Exception {
        Set<Integer> want = new TreeSet<>();
        for (String s : need("--nodes").split(",")) want.add(Integer.parseInt(s.trim()));
        String why = "";
        while (true) {
            boolean ok = true;
            for (String n : bootstrap) {
                try {
                    Set<Integer> live = new TreeSet<>();
                    for (MetadataResponseData.MetadataResponseBroker b : metadata(n, null).brokers()) live.add(b.nodeId());
                    if (!live.containsAll(want)) {
                        ok = false;
                        why = n + " lists live brokers " + live + ", not all of " + want;
                        break;
                    }
                } catch (IOException e) {
                    ok = false;
                    why = n + " does not answer: " + e;
                    break;
                }
            }
            if (ok) {
                try (Admin admin = admin()) {
                    QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(Math.min(millisLeft(), 10000), TimeUnit.MILLISECONDS);
                    if (q.leaderId() >= 0) {
                        System.out.println("ready brokers=" + ids(new ArrayList<>(want)) + " quorum-leader=" + q.leaderId());
                        return;
                    }
                    why = "the metadata quorum has no leader";
                } catch (Exception e) {
                    why = "describing the metadata quorum failed: " + e;
                }
            }
            if (timedOut()) throw new Failure("cluster not ready: " + why);
            pause();
        }
    }

    static void createTopic() throws Exception {
        String topic = need("--topic");
        int partitions = intOpt("--partitions", 1);
        short rf = (short) intOpt("--rf", 3);
        Map<String, String> cfg = new LinkedHashMap<>();
        for (String c : configs) cfg.put(c.substring(0, c.indexOf('=')), c.substring(c.indexOf('=') + 1));
        NewTopic nt;
        if (opts.containsKey("--replicas")) {
            List<Integer> replicas = new ArrayList<>();
            for (String id : opts.get("--replicas").split(",")) {
                try {
                    replicas.add(Integer.parseInt(id.trim()));
                } catch (NumberFormatException e) {
                    throw new UsageException("--replicas wants node ids like 1,2, not " + opts.get("--replicas"));
                }
            }
            Map<Integer, List<Integer>> assignment = new HashMap<>();
            for (int p = 0; p < partitions; p++) assignment.put(p, replicas);
            nt = new NewTopic(topic, assignment);
        } else {
            nt = new NewTopic(topic, partitions, rf);
        }
        try (Admin admin = admin()) {
            admin.createTopics(Collections.singleton(nt.configs(cfg)))
                    .all().get(millisLeft(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw new Failure("creating topic " + topic + ": " + e.getCause());
        }
        waitIsr(topic, false);
        System.out.println("created " + topic);
    }

    static void leader() throws Exception {
        String topic = need("--topic");
        int partition = intOpt("--partition", -1);
        for (Part p : describe(null, topic, true)) {
            if (p.partition() == partition) {
                System.out.println(p.leader());
                return;
            }
        }
        throw new Failure("topic " + topic + " has no partition " + partition);
    }

    /**
     * Until every --bootstrap node sees every partition of `topic` with a leader and all
     * replicas in sync (and, with `preferred`, led by its first replica). Returns the state
     * the first node sees.
     */
    static List<Part> waitIsr(String topic, boolean preferred) throws Exception {
        String why;
        while (true) {
            List<Part> first = null;
            why = null;
            for (String n : bootstrap) {
                List<Part> parts;
                try {
                    parts = describe(n, topic, false);
                } catch (IOException | Failure e) {
                    why = n + ": " + e.getMessage();
                    break;
                }
                if (first == null) first = parts;
                for (Part p : parts) {
                    if (!p.fullIsr()) {
                        why = n + " sees " + topic + " " + p.line();
                    } else if (preferred && p.leader() != p.replicas().get(0)) {
                        why = n + " sees " + topic + " " + p.line() + " (not its preferred leader)";
                    }
                    if (why != null) break;
                }
                if (why != null) break;
            }
            if (why == null && first != null && !first.isEmpty()) return first;
            if (why == null) why = "topic " + topic + " has no partitions";
            if (timedOut()) throw new Failure("timed out: " + why);
            pause();
        }
    }

    static void electPreferred() throws Exception {
        String topic = need("--topic");
        Set<Integer> running = opts.containsKey("--nodes")
                ? java.util.Arrays.stream(need("--nodes").split(",")).map(Integer::parseInt).collect(Collectors.toSet())
                : null;
        List<Part> parts = describe(null, topic, true);
        Set<TopicPartition> tps = new java.util.HashSet<>();
        for (Part p : parts) tps.add(new TopicPartition(topic, p.partition()));
        try (Admin admin = admin()) {
            Map<TopicPartition, java.util.Optional<Throwable>> result =
                    admin.electLeaders(ElectionType.PREFERRED, tps).partitions().get(millisLeft(), TimeUnit.MILLISECONDS);
            for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : result.entrySet()) {
                if (e.getValue().isPresent() && !(e.getValue().get() instanceof ElectionNotNeededException)) {
                    throw new Failure("electing the preferred leader of " + e.getKey() + ": " + e.getValue().get());
                }
            }
        }
        printPartitions(waitIsr(topic, true));
    }

    static void electUnclean() throws Exception {
        String topic = need("--topic");
        Set<Integer> running = opts.containsKey("--nodes")
                ? java.util.Arrays.stream(need("--nodes").split(",")).map(Integer::parseInt).collect(Collectors.toSet())
                : null;
        List<Part> parts = describe(null, topic, true);
        Set<TopicPartition> tps = new java.util.HashSet<>();
        for (Part p : parts) tps.add(new TopicPartition(topic, p.partition()));
        String why;
        try (Admin admin = admin()) {
            while (true) {
                why = null;
                Map<TopicPartition, java.util.Optional<Throwable>> result;
                try {
                    result = admin.electLeaders(ElectionType.UNCLEAN, tps).partitions()
                            .get(Math.min(millisLeft(), 10000), TimeUnit.MILLISECONDS);
                } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                    result = Map.of();
                    why = "electLeaders: " + (e.getCause() != null ? e.getCause() : e);
                }
                for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : result.entrySet()) {
                    // Not needed: the partition has a live leader already.
                    if (e.getValue().isPresent() && !(e.getValue().get() instanceof ElectionNotNeededException)) {
                        why = "electing a leader of " + e.getKey() + ": " + e.getValue().get();
                    }
                }
                if (why == null) {
                    for (String n : bootstrap) {
                        for (Part p : describe(n, topic, false)) {
                            if (p.leader() < 0 || p.offline().contains(p.leader())
                                    || (running != null && !running.contains(p.leader()))) {
                                why = n + " sees " + topic + " " + p.line();
                            }
                        }
                    }
                }
                if (why == null) break;
                if (timedOut()) throw new Failure("unclean election timed out: " + why);
                pause();
            }
        }
        printPartitions(describe(null, topic, true));
    }

    static void coordinator() throws Exception {
        String group = need("--group");
        String why = "";
        while (true) {
            for (String n : bootstrap) {
                try {
                    FindCoordinatorRequestData data = new FindCoordinatorRequestData()
                            .setKeyType((byte) 0)
                            .setCoordinatorKeys(List.of(group));
                    FindCoordinatorResponseData r = ((FindCoordinatorResponse)
                            send(n, new FindCoordinatorRequest.Builder(data), FIND_COORDINATOR_VERSION)).data();
                    FindCoordinatorResponseData.Coordinator c = r.coordinators().get(0);
                    if (c.errorCode() == 0) {
                        System.out.println(c.nodeId());
                        return;
                    }
                    why = n + ": " + Errors.forCode(c.errorCode()).name();
                } catch (IOException e) {
                    why = n + " does not answer: " + e;
                }
            }
            if (timedOut()) throw new Failure("no coordinator for group " + group + ": " + why);
            pause();
        }
    }

    static void quorum() throws Exception {
        try (Admin admin = admin()) {
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(millisLeft(), TimeUnit.MILLISECONDS);
            List<Integer> voters = new ArrayList<>();
            List<String> lag = new ArrayList<>();
            for (QuorumInfo.ReplicaState v : q.voters()) {
                voters.add(v.replicaId());
                // (A voter that has not answered the leader yet has no known end: "?".)
                lag.add(v.replicaId() + ":"
                        + (v.logEndOffset() < 0 ? "?" : String.valueOf(Math.max(0, q.highWatermark() - v.logEndOffset()))));
            }
            Collections.sort(voters);
            Collections.sort(lag);
            System.out.println("leader=" + q.leaderId() + " epoch=" + q.leaderEpoch() + " high-watermark=" + q.highWatermark()
                    + " voters=" + ids(voters) + " lag=" + String.join(",", lag));
        } catch (ExecutionException e) {
            throw new Failure("describing the metadata quorum: " + e.getCause());
        }
    }
}
