package bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.WindowedSerdes;

/**
 * The benchmarks' count-and-sum topologies written the way a Kafka Streams user would: the
 * DSL, JSON values through Jackson, RocksDB stores with changelogs, one stream thread (a
 * worker process has one processing thread).
 *
 * <p>Usage: {@code Baseline count_sum|windowed BOOTSTRAP APPLICATION_ID STATE_DIR
 * at_least_once|exactly_once_v2 COMMIT_INTERVAL_MS [CACHE_MAX_BYTES]}: the record cache is
 * off (0) unless CACHE_MAX_BYTES is given. Every 50 ms it prints the records
 * processed so far ({@code processed N}) on stdout; it runs until SIGTERM, then closes.
 */
public final class Baseline {
  static final String INPUT = "amounts";
  static final String SUMS_OUTPUT = "amount-totals";
  static final String WINDOWED_OUTPUT = "amount-minutes";

  /** An input value: {"amount": n}. */
  public record Amount(long amount) {}

  /** A stored and output value: {"count": c, "sum": s}. */
  public record Totals(long count, long sum) {
    Totals add(Amount value) {
      return new Totals(count + 1, sum + value.amount());
    }
  }

  static final ObjectMapper JSON = new ObjectMapper();

  static <T> Serde<T> json(Class<T> type) {
    Serializer<T> serializer =
        (topic, value) -> {
          try {
            return value == null ? null : JSON.writeValueAsBytes(value);
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        };
    Deserializer<T> deserializer =
        (topic, bytes) -> {
          try {
            return bytes == null ? null : JSON.readValue(bytes, type);
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        };
    return Serdes.serdeFrom(serializer, deserializer);
  }

  static Topology topology(String name, LongAdder processed) {
    Serde<String> keys = Serdes.String();
    Serde<Amount> amounts = json(Amount.class);
    Serde<Totals> totals = json(Totals.class);
    StreamsBuilder builder = new StreamsBuilder();
    KGroupedStream<String, Amount> grouped =
        builder.stream(INPUT, Consumed.with(keys, amounts))
            .peek((k, v) -> processed.increment())
            .groupByKey(Grouped.with(keys, amounts));
    if (name.equals("count_sum")) {
      grouped
          .aggregate(
              () -> new Totals(0, 0),
              (key, value, current) -> current.add(value),
              Materialized.<String, Totals, org.apache.kafka.streams.state.KeyValueStore<
                          org.apache.kafka.common.utils.Bytes, byte[]>>as("totals")
                  .withKeySerde(keys)
                  .withValueSerde(totals))
          .toStream()
          .to(SUMS_OUTPUT, Produced.with(keys, totals));
    } else if (name.equals("windowed")) {
      long size = 60_000L;
      grouped
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(size), Duration.ofSeconds(10)))
          .aggregate(
              () -> new Totals(0, 0),
              (key, value, current) -> current.add(value),
              Materialized.<String, Totals, org.apache.kafka.streams.state.WindowStore<
                          org.apache.kafka.common.utils.Bytes, byte[]>>as("per-minute")
                  .withKeySerde(keys)
                  .withValueSerde(totals))
          .toStream()
          .to(
              WINDOWED_OUTPUT,
              Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, size), totals));
    } else {
      throw new IllegalArgumentException("unknown topology " + name);
    }
    return builder.build();
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 6 && args.length != 7) {
      System.err.println(
          "usage: Baseline count_sum|windowed BOOTSTRAP APPLICATION_ID STATE_DIR GUARANTEE"
              + " COMMIT_INTERVAL_MS [CACHE_MAX_BYTES]");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[4]);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[5]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    // By default every update is forwarded, as the worker's topologies do (one output per
    // input): the record cache would otherwise fold updates of a key between commits.
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, args.length == 7 ? args[6] : "0");
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    LongAdder processed = new LongAdder();
    KafkaStreams streams = new KafkaStreams(topology(args[0], processed), props);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setUncaughtExceptionHandler(
        e -> {
          e.printStackTrace();
          System.exit(1);
          return null;
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(20));
                  stopped.countDown();
                }));
    streams.start();
    while (stopped.getCount() > 0) {
      System.out.println("processed " + processed.sum() + " " + streams.state());
      System.out.flush();
      Thread.sleep(50);
    }
  }
}
