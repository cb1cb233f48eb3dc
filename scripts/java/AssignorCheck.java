// The assignments kafka-clients' client-side assignors compute, for comparison with the
// crate's (tests/assignors.rs). Reads cases from stdin, all of them before computing any,
// and prints each case's assignments by RangeAssignor, RoundRobinAssignor and
// CooperativeStickyAssignor, computed through the public
// ConsumerPartitionAssignor.assign(Cluster, GroupSubscription) with a Cluster whose nodes
// carry the replicas' racks. It also prints the cooperative-sticky target assignment (before
// the cooperative adjustment that leaves out partitions changing owner), computed by
// AbstractStickyAssignor with CooperativeStickyAssignor's member data.
//
// Java 17 single-file source program (the tests compile it with javac):
//
//   LIBS=$(scripts/broker.sh libs | tail -n1)
//   java -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
//        -cp "$LIBS/*" scripts/java/AssignorCheck.java < cases.txt
//
// Input (UTF-8), one item per line, fields separated by single spaces, "-" for none/empty:
//   CASE <name>
//   TOPIC <topic> <partition count> <racks of partition 0> ... <racks of partition n-1>
//       racks: comma-separated rack names of the partition's replicas, "-" for replicas
//       without a rack
//   MEMBER <member id> <group instance id> <rack> <generation> <topics> <owned>
//       topics: comma-separated; owned: comma-separated topic:partition; generation -1 =
//       unknown, u<n> = none in the subscription, <n> in the user data (as a peer older
//       than subscription v2 sends it, CooperativeStickyAssignor's int32)
//   END
// Output (UTF-8), per case:
//   @CASE <name>
//   @ASSIGN <assignor> <member id> <comma-separated topic:partition, sorted, or "-">
//       for assignor range, roundrobin, cooperative-sticky, cooperative-sticky-target
//   @ERROR <assignor> <exception and where>     when an assignor throws
//   @END
// Exits 0 unless the input is malformed.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class AssignorCheck {

    /** The sticky assignment without the cooperative adjustment, from the same member data. */
    static final class Target extends AbstractStickyAssignor {
        @Override
        public String name() {
            return "cooperative-sticky-target";
        }

        @Override
        protected MemberData memberData(Subscription subscription) {
            // CooperativeStickyAssignor.memberData: the subscription's generation, else the
            // int32 of the user data.
            if (subscription.generationId().isPresent() || subscription.userData() == null)
                return new MemberData(subscription.ownedPartitions(), subscription.generationId());
            // From the start: CooperativeStickyAssignor, run before on the same
            // subscriptions, moved the buffer's position.
            ByteBuffer data = subscription.userData().duplicate();
            data.rewind();
            Optional<Integer> generation = data.remaining() >= 4 ? Optional.of(data.getInt()) : Optional.of(-1);
            return new MemberData(subscription.ownedPartitions(), generation, subscription.rackId());
        }
    }

    static final class Case {
        String name;
        final List<PartitionInfo> partitions = new ArrayList<>();
        final Map<String, Node> nodes = new LinkedHashMap<>();
        final Map<String, Subscription> members = new HashMap<>();
    }

    static List<String> list(String field) {
        return field.equals("-") ? Collections.emptyList() : Arrays.asList(field.split(","));
    }

    static Node node(Case c, String rack) {
        return c.nodes.computeIfAbsent(rack, r -> {
            int id = c.nodes.size();
            return new Node(id, "host" + id, 9092, r.equals("-") ? null : r);
        });
    }

    static void topic(Case c, String[] f) {
        String topic = f[1];
        int count = Integer.parseInt(f[2]);
        for (int p = 0; p < count; p++) {
            List<Node> replicas = new ArrayList<>();
            if (f[3 + p].equals("-")) {
                replicas.add(node(c, "-"));
            } else {
                for (String rack : list(f[3 + p])) replicas.add(node(c, rack));
            }
            Node[] r = replicas.toArray(new Node[0]);
            c.partitions.add(new PartitionInfo(topic, p, r[0], r, r));
        }
        if (count == 0) node(c, "-");
    }

    static void member(Case c, String[] f) {
        List<TopicPartition> owned = new ArrayList<>();
        for (String tp : list(f[6])) {
            int colon = tp.lastIndexOf(':');
            owned.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
        }
        boolean inUserData = f[4].startsWith("u");
        int generation = Integer.parseInt(inUserData ? f[4].substring(1) : f[4]);
        ByteBuffer userData = null;
        if (inUserData) {
            userData = ByteBuffer.allocate(4).putInt(generation);
            userData.flip();
        }
        Subscription s = new Subscription(
            new ArrayList<>(list(f[5])),
            userData,
            owned,
            inUserData ? -1 : generation,
            f[3].equals("-") ? Optional.empty() : Optional.of(f[3]));
        s.setGroupInstanceId(f[2].equals("-") ? Optional.empty() : Optional.of(f[2]));
        c.members.put(f[1], s);
    }

    static void print(PrintStream out, Case c, String name, ConsumerPartitionAssignor assignor) {
        Cluster cluster = new Cluster("cluster", new ArrayList<>(c.nodes.values()), c.partitions,
            Collections.emptySet(), Collections.emptySet());
        Map<String, Assignment> result;
        try {
            result = assignor.assign(cluster, new GroupSubscription(c.members)).groupAssignment();
        } catch (RuntimeException e) {
            StringBuilder where = new StringBuilder();
            StackTraceElement[] stack = e.getStackTrace();
            for (int i = 0; i < Math.min(2, stack.length); i++) where.append(" at ").append(stack[i]);
            out.println("@ERROR " + name + " " + e.toString().replace('\n', ' ') + where);
            return;
        }
        for (Map.Entry<String, Assignment> e : result.entrySet()) {
            List<String> tps = new ArrayList<>();
            List<TopicPartition> sorted = new ArrayList<>(e.getValue().partitions());
            sorted.sort((a, b) -> a.topic().equals(b.topic())
                ? Integer.compare(a.partition(), b.partition())
                : a.topic().compareTo(b.topic()));
            for (TopicPartition tp : sorted) tps.add(tp.topic() + ":" + tp.partition());
            out.println("@ASSIGN " + name + " " + e.getKey() + " " + (tps.isEmpty() ? "-" : String.join(",", tps)));
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        List<Case> cases = new ArrayList<>();
        Case current = null;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isEmpty()) continue;
            String[] f = line.split(" ", -1);
            switch (f[0]) {
                case "CASE":
                    current = new Case();
                    current.name = f[1];
                    break;
                case "TOPIC":
                    topic(current, f);
                    break;
                case "MEMBER":
                    member(current, f);
                    break;
                case "END":
                    cases.add(current);
                    current = null;
                    break;
                default:
                    throw new IllegalArgumentException("bad input line: " + line);
            }
        }
        for (Case c : cases) {
            out.println("@CASE " + c.name);
            // A fresh assignor per case: the sticky ones keep state between calls.
            print(out, c, "range", new RangeAssignor());
            print(out, c, "roundrobin", new RoundRobinAssignor());
            print(out, c, "cooperative-sticky", new CooperativeStickyAssignor());
            print(out, c, "cooperative-sticky-target", new Target());
            out.println("@END");
        }
        out.flush();
    }
}
