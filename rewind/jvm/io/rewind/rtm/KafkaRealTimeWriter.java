package io.rewind.rtm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * Rewind's exactly-once Kafka sink for Spark's real-time mode, where no foreachBatch runs (issue 38).
 *
 * <p>One instance per (Spark partition, epoch). The Spark plan has already encoded every row as the micro-batch
 * Kafka sink encodes it (rewind.sink.kafka_realtime: columns {@code rewind_topic}, {@code rewind_key},
 * {@code rewind_value}); this writer only routes bytes, adding {@code batch_id} (the epoch) to the value.
 *
 * <p>Every {@code flushMs} (and when the epoch closes) the buffered records are written in one Kafka transaction
 * together with this partition's ledger record (key {@code stream/epoch/partition} on the ledger topic): the
 * highest source offset + 1 per topic-partition committed so far. So a read_committed reader sees a record
 * about {@code flushMs} after the writer got it, and never a record of an aborted transaction.
 *
 * <p>Exactly once: Spark's real-time mode writes {@code offsets/N} and {@code commits/N} only after every task
 * of epoch N closed, and after a crash it purges an uncommitted {@code offsets/N} and runs epoch N again from the
 * end of N-1, for a new full interval (MicroBatchExecution.initializeExecution). So records this writer
 * committed can be read again. Each source record carries its Kafka coordinates; a record below the committed
 * end of its topic-partition (read from the ledger when the producer starts, then kept up to date here) is
 * skipped. The producer's transactional id is per (stream, Spark partition): starting it aborts a transaction a
 * crashed or older driver left open and fences that driver's producer; after starting it, the writer reads the
 * stream's fence record (the newest driver's lease epoch, written by the driver before its query starts) and
 * refuses to write when a newer driver holds the stream. Producers live for the JVM, one per partition, reused
 * by every epoch.
 */
public class KafkaRealTimeWriter extends ForeachWriter<Row> {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ConcurrentHashMap<String, Slot> SLOTS = new ConcurrentHashMap<>();

  private final String bootstrap;
  private final String clientConf;
  private final String stream;
  private final long leaseEpoch;
  private final String transactionalPrefix;
  private final String ledgerTopic;
  private final String batchIdTopics;
  private final long flushMs;
  private final long transactionTimeoutMs;

  private transient Slot slot;
  private transient long partition;
  private transient long epoch;
  private transient Set<String> withBatchId;
  private transient List<ProducerRecord<byte[], byte[]>> buffer;
  private transient TreeMap<String, Long> ends;
  private transient long rows;
  private transient long skipped;
  private transient ScheduledExecutorService timer;
  private transient volatile Exception failure;

  /** The transactional producer of one Spark partition in this JVM, and the committed ends it knows. */
  private static final class Slot {
    KafkaProducer<byte[], byte[]> producer;
    long leaseEpoch;
    final Map<String, Long> committed = new TreeMap<>();
  }

  /**
   * @param clientConf the sink's Kafka client settings, one {@code key=value} a line (security and the like).
   * @param batchIdTopics comma-separated topics whose table has a {@code batch_id} column (it takes the epoch).
   */
  public KafkaRealTimeWriter(String bootstrap, String clientConf, String stream, long leaseEpoch,
      String transactionalPrefix, String ledgerTopic, String batchIdTopics, long flushMs, long transactionTimeoutMs) {
    this.bootstrap = bootstrap;
    this.clientConf = clientConf;
    this.stream = stream;
    this.leaseEpoch = leaseEpoch;
    this.transactionalPrefix = transactionalPrefix;
    this.ledgerTopic = ledgerTopic;
    this.batchIdTopics = batchIdTopics;
    this.flushMs = flushMs;
    this.transactionTimeoutMs = transactionTimeoutMs;
  }

  private Properties client() {
    Properties props = new Properties();
    for (String line : clientConf.split("\n")) {
      int eq = line.indexOf('=');
      if (eq > 0) {
        props.setProperty(line.substring(0, eq), line.substring(eq + 1));
      }
    }
    props.setProperty("bootstrap.servers", bootstrap);
    return props;
  }

  private String transactionalId() {
    return transactionalPrefix + partition;
  }

  /** This partition's producer: started (older ones fenced), the fence checked, the committed ends read. */
  private Slot acquire() {
    String id = transactionalId();
    Slot s = SLOTS.get(id);
    if (s != null && s.leaseEpoch == leaseEpoch) {
      return s;
    }
    if (s != null) {
      drop(id, s);
    }
    Properties props = client();
    props.setProperty("transactional.id", id);
    props.setProperty("enable.idempotence", "true");
    props.setProperty("acks", "all");
    props.setProperty("linger.ms", "0");
    props.setProperty("transaction.timeout.ms", Long.toString(transactionTimeoutMs));
    s = new Slot();
    s.leaseEpoch = leaseEpoch;
    s.producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    try {
      s.producer.initTransactions(); // fences older producers of this id, aborts what they left open
      long fence = readLedger(s.committed);
      if (fence > leaseEpoch) {
        throw new IllegalStateException("stream '" + stream + "': real-time epoch " + epoch + " refused: it is "
            + "written under driver lease epoch " + leaseEpoch + ", and epoch " + fence + " has taken the stream "
            + "over (this driver is fenced); nothing was written");
      }
    } catch (RuntimeException e) {
      s.producer.close(Duration.ofSeconds(5));
      throw e;
    }
    SLOTS.put(id, s);
    return s;
  }

  private static void drop(String id, Slot s) {
    SLOTS.remove(id, s);
    try {
      s.producer.close(Duration.ofSeconds(5));
    } catch (RuntimeException ignored) {
      // a fenced producer: nothing to flush
    }
  }

  /** Read the ledger topic read_committed to its end: the committed ends of this stream (into {@code into}),
   * and the newest fence (lease epoch) recorded for it. */
  private long readLedger(Map<String, Long> into) {
    Properties props = client();
    props.setProperty("isolation.level", "read_committed");
    props.setProperty("enable.auto.commit", "false");
    long fence = -1;
    String prefix = stream + "/";
    try (KafkaConsumer<byte[], byte[]> c =
        new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      TopicPartition tp = new TopicPartition(ledgerTopic, 0);
      List<TopicPartition> tps = Collections.singletonList(tp);
      c.assign(tps);
      c.seekToBeginning(tps);
      long end = c.endOffsets(tps, Duration.ofSeconds(60)).get(tp); // read_committed: the last stable offset
      while (c.position(tp, Duration.ofSeconds(60)) < end) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
          String key = r.key() == null ? "" : new String(r.key(), StandardCharsets.UTF_8);
          if (!key.startsWith(prefix) || r.value() == null) {
            continue;
          }
          JsonNode v = JSON.readTree(r.value());
          if (v.has("fence")) {
            fence = Math.max(fence, v.get("fence").asLong());
          }
          JsonNode offsets = v.get("end_offsets");
          if (offsets != null) {
            for (Iterator<Map.Entry<String, JsonNode>> it = offsets.fields(); it.hasNext(); ) {
              Map.Entry<String, JsonNode> e = it.next();
              into.merge(e.getKey(), e.getValue().asLong(), Math::max);
            }
          }
        }
      }
    } catch (java.io.IOException e) {
      throw new IllegalStateException("stream '" + stream + "': the real-time ledger " + ledgerTopic
          + " holds a record that is not JSON: " + e, e);
    }
    return fence;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    partition = partitionId;
    epoch = epochId;
    withBatchId = new HashSet<>();
    for (String t : batchIdTopics.split(",")) {
      if (!t.isEmpty()) {
        withBatchId.add(t);
      }
    }
    buffer = new ArrayList<>();
    ends = new TreeMap<>();
    rows = 0;
    skipped = 0;
    try {
      slot = acquire();
    } catch (RuntimeException e) {
      throw new RuntimeException("stream " + stream + ": the real-time Kafka sink could not open: " + e, e);
    }
    if (flushMs > 0) {
      timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "rewind-rtm-kafka-" + partitionId);
        t.setDaemon(true);
        return t;
      });
      timer.scheduleWithFixedDelay(this::flushQuietly, flushMs, flushMs, TimeUnit.MILLISECONDS);
    }
    return true;
  }

  @Override
  public void process(Row row) {
    if (failure != null) {
      throw new RuntimeException("stream " + stream + ": the real-time Kafka sink failed: " + failure, failure);
    }
    Object topic = row.getAs("topic");
    Object part = row.getAs("partition");
    Object off = row.getAs("offset");
    if (topic == null || part == null || off == null) {
      throw new IllegalStateException("stream " + stream + ": a row without its Kafka coordinates (topic, "
          + "partition, offset): the real-time Kafka sink skips re-read records by them");
    }
    String source = topic + "/" + part;
    long offset = ((Number) off).longValue();
    String target = row.getAs("rewind_topic");
    if (target == null) {
      throw new IllegalStateException("stream " + stream + ": a row of kind '" + row.getAs("kind")
          + "' goes to no table (the transform's kinds and tables disagree)");
    }
    String key = row.getAs("rewind_key");
    String value = row.getAs("rewind_value");
    if (withBatchId.contains(target)) {
      value = value.substring(0, value.length() - 1) + (value.length() > 2 ? "," : "") + "\"batch_id\":" + epoch
          + "}";
    }
    RecordHeaders headers = new RecordHeaders();
    headers.add(new RecordHeader("rewind.stream", stream.getBytes(StandardCharsets.UTF_8)));
    headers.add(new RecordHeader("rewind.batch", Long.toString(epoch).getBytes(StandardCharsets.UTF_8)));
    headers.add(new RecordHeader("rewind.epoch", Long.toString(leaseEpoch).getBytes(StandardCharsets.UTF_8)));
    ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(target, null, key.getBytes(StandardCharsets.UTF_8),
        value.getBytes(StandardCharsets.UTF_8), headers);
    synchronized (this) {
      Long committed = slot.committed.get(source);
      if (committed != null && offset < committed) {
        skipped++; // written by a transaction committed before the crash: Spark read it again
        return;
      }
      buffer.add(record);
      rows++;
      ends.merge(source, offset + 1, Math::max);
    }
  }

  private void flushQuietly() {
    try {
      flush(false);
    } catch (Exception e) {
      failure = e; // process() and close() raise it: the task fails
    }
  }

  private synchronized void flush(boolean closing) throws Exception {
    if (buffer.isEmpty() && !closing) {
      return;
    }
    KafkaProducer<byte[], byte[]> p = slot.producer;
    TreeMap<String, Long> through = new TreeMap<>(slot.committed);
    for (Map.Entry<String, Long> e : ends.entrySet()) {
      through.merge(e.getKey(), e.getValue(), Math::max);
    }
    try {
      p.beginTransaction();
      for (ProducerRecord<byte[], byte[]> r : buffer) {
        p.send(r);
      }
      p.send(new ProducerRecord<>(ledgerTopic, 0, ledgerKey(), ledgerValue(through, closing)));
      p.commitTransaction(); // flushes: every record acknowledged, then the commit marker
    } catch (ProducerFencedException | InvalidProducerEpochException e) {
      drop(transactionalId(), slot);
      throw new IllegalStateException("stream '" + stream + "': real-time epoch " + epoch + " refused: another "
          + "driver started this partition's transactional producer (" + transactionalId() + "); this driver is "
          + "fenced, and nothing of the transaction was committed", e);
    } catch (RuntimeException e) {
      try {
        p.abortTransaction();
      } catch (RuntimeException ignored) {
        drop(transactionalId(), slot); // the next epoch starts a new producer, which aborts what is left
      }
      throw e;
    }
    slot.committed.putAll(through);
    buffer.clear();
  }

  private byte[] ledgerKey() {
    return (stream + "/" + epoch + "/" + partition).getBytes(StandardCharsets.UTF_8);
  }

  private byte[] ledgerValue(Map<String, Long> through, boolean closing) throws Exception {
    ObjectNode v = JSON.createObjectNode();
    v.put("stream", stream);
    v.put("epoch", epoch);
    v.put("spark_partition", partition);
    v.put("lease_epoch", leaseEpoch);
    v.put("rows_written", rows);
    v.put("rows_skipped", skipped);
    v.put("closed", closing);
    ObjectNode offsets = v.putObject("end_offsets");
    for (Map.Entry<String, Long> e : through.entrySet()) {
      offsets.put(e.getKey(), e.getValue());
    }
    v.put("committed_at", Instant.now().toString());
    return JSON.writeValueAsBytes(v);
  }

  @Override
  public void close(Throwable error) {
    try {
      if (timer != null) {
        timer.shutdown();
        timer.awaitTermination(30, TimeUnit.SECONDS);
      }
      if (error == null && failure == null && slot != null) {
        flush(true); // the epoch closed: its last records and its closing ledger record
      }
    } catch (Exception e) {
      throw new RuntimeException("stream " + stream + ": the real-time Kafka sink could not close epoch " + epoch
          + ": " + e, e);
    }
    if (failure != null && error == null) {
      throw new RuntimeException("stream " + stream + ": the real-time Kafka sink failed: " + failure, failure);
    }
  }
}
