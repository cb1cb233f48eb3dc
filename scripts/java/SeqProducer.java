// A steady producer of sequence-numbered records, for the chaos test and the rebalance
// benchmark: it writes to an existing topic at a fixed rate for as long as it runs and says
// which records the cluster acknowledged, so a consumer test can check that every one of
// them was consumed.
//
// Java 17 single-file source program, no build step:
//
//   java -cp "$(scripts/broker.sh libs | tail -n1)/*" scripts/java/SeqProducer.java \
//        --bootstrap 127.0.0.1:19301,127.0.0.1:19302 --topic T --partitions 12 --rate 200
//
// Options:
//   --bootstrap HOSTS      (required) comma-separated
//   --topic NAME           (required) must exist with --partitions partitions
//   --partitions P         (required) record i goes to partition i % P
//   --rate R               records per second (default 100), evenly spaced
//   --start I              first sequence number (default 0)
//   --acks all|1           (default all); all also turns on idempotence
//
// Record i: key null, value UTF-8 "seq-<i>", header "seq" = UTF-8 decimal i.
//
// Output on stdout, one line each:
//   ack P OFFSET I     the cluster acknowledged record i at that partition and offset
//   fail I MESSAGE     record i was given up (delivery.timeout.ms passed, or fatal)
//   done SENT ACKED FAILED   after stdin closed or said "stop": everything sent was
//                      acknowledged or failed (close waits up to 2 minutes)
// Errors that stop the program print "error MESSAGE" and exit 1. Retries are unbounded
// within delivery.timeout.ms (120 s), so brokers dying and coming back lose nothing the
// producer was told was written.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SeqProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, acks = "all";
        int partitions = 0;
        double rate = 100;
        long start = 0;
        for (int k = 0; k + 1 < args.length; k += 2) {
            String v = args[k + 1];
            switch (args[k]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--partitions": partitions = Integer.parseInt(v); break;
                case "--rate": rate = Double.parseDouble(v); break;
                case "--start": start = Long.parseLong(v); break;
                case "--acks": acks = v; break;
                default:
                    System.out.println("error unknown option " + args[k]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || partitions <= 0 || rate <= 0) {
            System.out.println("error --bootstrap, --topic, --partitions (> 0) are required; --rate > 0");
            System.exit(2);
        }
        quietLogs();
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, acks.equals("all") ? "true" : "false");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("stop")) break;
                }
            } catch (Exception ignored) {
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        long sent = 0;
        long intervalNanos = (long) (1_000_000_000L / rate);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long next = System.nanoTime();
            long lastFlush = next;
            while (!stop.get()) {
                long now = System.nanoTime();
                if (now < next) {
                    long sleep = Math.min(next - now, 50_000_000L);
                    Thread.sleep(sleep / 1_000_000L, (int) (sleep % 1_000_000L));
                    continue;
                }
                long i = start + sent;
                int partition = (int) (i % partitions);
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, partition, null,
                        ("seq-" + i).getBytes(StandardCharsets.UTF_8));
                rec.headers().add("seq", Long.toString(i).getBytes(StandardCharsets.UTF_8));
                producer.send(rec, (md, e) -> {
                    synchronized (out) {
                        if (e == null) {
                            acked.incrementAndGet();
                            out.println("ack " + md.partition() + " " + md.offset() + " " + i);
                        } else {
                            failed.incrementAndGet();
                            out.println("fail " + i + " " + String.valueOf(e.getMessage()).replace('\n', ' '));
                        }
                    }
                });
                sent++;
                next += intervalNanos;
                if (now - lastFlush > 200_000_000L) {
                    synchronized (out) {
                        out.flush();
                    }
                    lastFlush = now;
                }
            }
            producer.close(Duration.ofMinutes(2));
        } catch (Exception e) {
            synchronized (out) {
                out.println("error " + String.valueOf(e.getMessage()).replace('\n', ' '));
                out.flush();
            }
            System.exit(1);
        }
        synchronized (out) {
            out.println("done " + sent + " " + acked.get() + " " + failed.get());
            out.flush();
        }
    }

    /// The clients log at WARN unless a log4j2 configuration says otherwise (a broker
    /// going away makes the producer log every retry at INFO).
    static void quietLogs() {
        if (System.getProperty("log4j2.configurationFile") == null) {
            try {
                Class<?> c = Class.forName("org.apache.logging.log4j.core.config.Configurator");
                Class<?> level = Class.forName("org.apache.logging.log4j.Level");
                Object warn = level.getField("WARN").get(null);
                c.getMethod("setRootLevel", level).invoke(null, warn);
            } catch (Exception ignored) {
            }
        }
    }
}
