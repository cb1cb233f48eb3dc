// Prints the bytes the Java client's ConsumerProtocol writes for a few subscriptions and
// assignments, as "name hex" lines. The Rust tests in src/protocol/consumer_protocol.rs
// hold this output as fixtures (decoded there, and compared with what our encoder writes),
// and fuzz/corpus/consumer_protocol/ holds the same payloads as seeds.
//
// Java 17 single-file source program, no build step:
//
//   java -cp '/work/main/target/kafka/4.4.0/libs/*' scripts/java/ConsumerProtocolBytes.java
//
// (or LIBS=$(scripts/broker.sh libs | tail -n1); java -cp "$LIBS/*" ...)
//
// ConsumerProtocol.serializeSubscription / serializeAssignment are public in
// kafka-clients 4.x; without a version they write the highest (3), with one that version.

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicPartition;

public class ConsumerProtocolBytes {
    static String hex(ByteBuffer b) {
        StringBuilder s = new StringBuilder();
        ByteBuffer d = b.duplicate();
        while (d.hasRemaining()) {
            s.append(String.format("%02x", d.get() & 0xff));
        }
        return s.toString();
    }

    static void print(String name, ByteBuffer b) {
        System.out.println(name + " " + hex(b));
    }

    public static void main(String[] args) {
        List<TopicPartition> owned = List.of(
            new TopicPartition("orders", 0),
            new TopicPartition("orders", 2),
            new TopicPartition("audit", 1));
        // Every field set: topics, user data, owned partitions, generation, rack.
        Subscription full = new Subscription(
            List.of("orders", "audit"),
            ByteBuffer.wrap(new byte[] {1, 2, 3}),
            owned,
            7,
            Optional.of("rack-1"));
        print("subscription-v3-full", ConsumerProtocol.serializeSubscription(full));
        for (short v = 0; v <= 2; v++) {
            print("subscription-v" + v + "-full", ConsumerProtocol.serializeSubscription(full, v));
        }
        // Defaults: one topic, no user data (null), nothing owned, no generation, no rack.
        print("subscription-v3-minimal",
            ConsumerProtocol.serializeSubscription(new Subscription(List.of("t"))));
        // Empty (not null) user data, and no topics at all.
        print("subscription-v3-empty-user-data",
            ConsumerProtocol.serializeSubscription(
                new Subscription(List.of(), ByteBuffer.allocate(0))));

        Assignment assignment = new Assignment(owned, ByteBuffer.wrap(new byte[] {9, 8}));
        print("assignment-v3-full", ConsumerProtocol.serializeAssignment(assignment));
        print("assignment-v0-full", ConsumerProtocol.serializeAssignment(assignment, (short) 0));
        // Nothing assigned, no user data.
        print("assignment-v3-empty", ConsumerProtocol.serializeAssignment(new Assignment(List.of())));
    }
}
