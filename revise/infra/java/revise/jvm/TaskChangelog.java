package revise.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The changelog written by the stateful tasks: one Kafka transaction per (micro-batch, state
 * partition), on the executor that computed the partition ({@code revise/spark/task_output.py}
 * is its Python side, {@code docs/SEMANTICS.md} the argument).
 *
 * <p>{@link #write} maps each partition of a micro-batch's operator output (rows {@code kind,
 * rows, payload}). Rows of kind {@code msg:<topic index>} hold Kafka messages already encoded by
 * the Python worker ({@link #frames}); this task produces them in one transaction of the
 * producer whose {@code transactional.id} is {@code revise-<query id>-p<partition>}, together with
 * the partition's progress: the offset {@code batch + 1} of partition {@code p} of the progress
 * topic, committed for the group {@code revise-<query id>} through {@code
 * sendOffsetsToTransaction}, its metadata the JSON {@code {"epoch", "batch", "emitted_at_ms"}}.
 * The messages are produced as their rows arrive ({@link PartitionOutput}): a task holds one
 * row's payload, not its output. Every other row passes through to the driver, followed by one
 * row of kind {@code kafka} (the task's report, JSON).
 *
 * <p>Producers are kept per executor and partition ({@link #PRODUCERS}): a stateful partition
 * runs where its state is, so one producer serves it batch after batch. A producer that has not
 * been fenced since its {@code initTransactions} is the only writer of its partition since then,
 * so the last batch it committed is the partition's progress; a new one reads the progress from
 * the group's committed offsets ({@code read_committed}: a pending transactional commit is waited
 * for). A batch at or below the progress is a replay: nothing is produced. A kept producer found
 * fenced by its first messages (another attempt of this task, on another executor, took the id)
 * is replaced, which reads the progress again ({@link PartitionOutput.Transaction}). The job's
 * epoch ({@code revise.spark.task_output.adopt}, at the job's start: every partition's progress
 * rewritten with it) stops a zombie job: progress written under a higher epoch fails the task.
 *
 * <p>A kept producer or progress reader is closed when its query stops ({@link #release}, called
 * by the driver: in local mode its JVM is the executor) or, on an executor the driver cannot
 * reach, once it has been unused for the settings' {@code idle_ms}; the next batch of its
 * partition opens a new one, which reads the progress again.
 */
public final class TaskChangelog {
  private TaskChangelog() {}

  /** Producers of this executor, by {@code transactional.id} and settings. */
  private static final Map<String, Slot> PRODUCERS = new ConcurrentHashMap<>();

  /** Progress readers of this executor, by group and settings (used under their own lock). */
  private static final Map<String, Reader> READERS = new ConcurrentHashMap<>();

  /** How long a kept producer or reader may stay unused before it is closed (nanoseconds). */
  private static volatile long idleNanos = Duration.ofMinutes(5).toNanos();

  /** Closes what has been idle too long, once a second (a daemon thread, from the class's load). */
  private static final java.util.concurrent.ScheduledExecutorService REAPER =
      java.util.concurrent.Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "revise-changelog-reaper");
        t.setDaemon(true);
        return t;
      });

  static {
    REAPER.scheduleWithFixedDelay(() -> close(null, idleNanos),
        1, 1, java.util.concurrent.TimeUnit.SECONDS);
  }

  static final ObjectMapper JSON = new ObjectMapper();
  static final int ATTEMPTS = 3;

  /**
   * Ends the committed metadata: confluent-kafka (2.16) reads an offset's metadata as a C
   * string, past its length unless a NUL ends it, which the readers strip.
   */
  static final String NUL = "\u0000";

  /**
   * The micro-batch's operator output with its messages written by the tasks (see the class).
   *
   * @param batch the operator's rows ({@code kind string, rows bigint, payload binary})
   * @param settings JSON: {@code query_id, batch_id, epoch, emitted_at_ms, progress_topic,
   *     topics} (topic names by index) and {@code producer}, {@code consumer}: Java client
   *     properties
   */
  public static Dataset<Row> write(Dataset<Row> batch, String settings) {
    return batch.mapPartitions(new Writer(settings), Encoders.row(batch.schema()));
  }

  /**
   * The messages of one {@code msg:} payload, column by column ({@code
   * sinks.kafka.partitions.frame_parts}): {@code [int32 n][int32 key length x n, -1 = none][int32
   * value length x n][keys][values]}, big-endian, each handed to {@code each} as (key or null,
   * value).
   */
  static void frames(byte[] payload,
      java.util.function.BiConsumer<byte[], byte[]> each) {
    ByteBuffer buf = ByteBuffer.wrap(payload);
    int n = buf.getInt();
    int key = 4 + 8 * n;
    int value = key;
    for (int i = 0; i < n; i++) {
      value += Math.max(buf.getInt(4 + 4 * i), 0);
    }
    for (int i = 0; i < n; i++) {
      int keyLength = buf.getInt(4 + 4 * i);
      int valueLength = buf.getInt(4 + 4 * n + 4 * i);
      byte[] k = null;
      if (keyLength >= 0) {
        k = java.util.Arrays.copyOfRange(payload, key, key + keyLength);
        key += keyLength;
      }
      each.accept(k, java.util.Arrays.copyOfRange(payload, value, value + valueLength));
      value += valueLength;
    }
    if (value != payload.length) {
      throw new IllegalArgumentException(
          "a msg payload of " + payload.length + " bytes holds " + value + " bytes of messages");
    }
  }

  /**
   * A kept producer and what it knows of its partition's progress. A transaction holds {@link
   * #lock} from its first message to its commit; a plain producer's tasks share it, counted in
   * {@link #users}. Neither is closed while in use.
   */
  static final class Slot {
    final String query;
    final KafkaProducer<byte[], byte[]> producer;
    final java.util.concurrent.locks.ReentrantLock lock =
        new java.util.concurrent.locks.ReentrantLock();
    int users;
    long lastBatch;
    long epoch;
    boolean open;
    /** Closed by {@link #close}: whoever holds it takes a new one from {@link #PRODUCERS}. */
    boolean closed;
    long usedAt = System.nanoTime();

    Slot(String query, KafkaProducer<byte[], byte[]> producer, long lastBatch, long epoch) {
      this.query = query;
      this.producer = producer;
      this.lastBatch = lastBatch;
      this.epoch = epoch;
    }
  }

  /** The kept producer of {@code key} (opened by {@code opener} if none), locked, not closed. */
  static Slot locked(String key, java.util.function.Supplier<Slot> opener) {
    while (true) {
      Slot slot = PRODUCERS.computeIfAbsent(key, k -> opener.get());
      slot.lock.lock();
      if (!slot.closed) {
        slot.usedAt = System.nanoTime();
        return slot;
      }
      slot.lock.unlock();  // closed while idle between the lookup and the lock: take a new one
    }
  }

  /** A progress reader of one query's group. */
  static final class Reader {
    final String query;
    final KafkaConsumer<byte[], byte[]> consumer;
    boolean closed;
    long usedAt = System.nanoTime();

    Reader(String query, KafkaConsumer<byte[], byte[]> consumer) {
      this.query = query;
      this.consumer = consumer;
    }
  }

  /**
   * Close this JVM's producers and progress readers of {@code query} (the driver, when the query
   * stops; in local mode the executor's are the driver's JVM's).
   *
   * @return how many were closed
   */
  public static int release(String query) {
    return close(query, -1L);
  }

  /** How many producers and readers of {@code query} this JVM keeps (tests). */
  public static int kept(String query) {
    int n = 0;
    for (Slot slot : PRODUCERS.values()) {
      n += slot.query.equals(query) ? 1 : 0;
    }
    for (Reader reader : READERS.values()) {
      n += reader.query.equals(query) ? 1 : 0;
    }
    return n;
  }

  /**
   * Close the producers and readers of {@code query} (null: any) unused for more than {@code
   * idle} nanoseconds (negative: every one not in use; one a task is writing with is left to
   * the reaper).
   */
  private static int close(String query, long idle) {
    long now = System.nanoTime();
    int n = 0;
    for (Map.Entry<String, Slot> e : PRODUCERS.entrySet()) {
      Slot slot = e.getValue();
      if (!slot.lock.tryLock()) {
        continue;  // a task's transaction is using it
      }
      try {
        boolean mine = query == null || slot.query.equals(query);
        if (mine && !slot.closed && slot.users == 0 && (idle < 0 || now - slot.usedAt > idle)) {
          // A transaction left open is aborted by the next initTransactions of its id.
          drop(e.getKey(), slot);
          n++;
        }
      } finally {
        slot.lock.unlock();
      }
    }
    for (Map.Entry<String, Reader> e : READERS.entrySet()) {
      Reader reader = e.getValue();
      synchronized (reader) {
        boolean mine = query == null || reader.query.equals(query);
        if (mine && !reader.closed && (idle < 0 || now - reader.usedAt > idle)) {
          READERS.remove(e.getKey(), reader);
          reader.closed = true;
          try {
            reader.consumer.close(Duration.ZERO);
          } catch (RuntimeException ignored) {
            // nothing more to do
          }
          n++;
        }
      }
    }
    return n;
  }

  /** Thrown when a newer instance of the query has taken the partition over. */
  public static final class ZombieException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    ZombieException(String message) {
      super(message);
    }
  }

  static final class Writer implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;
    private final String settings;

    Writer(String settings) {
      this.settings = settings;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> rows) throws Exception {
      JsonNode s = JSON.readTree(settings);
      if (s.hasNonNull("idle_ms")) {
        idleNanos = s.get("idle_ms").asLong() * 1_000_000L;
      }
      TaskContext ctx = TaskContext.get();
      int partition = ctx.partitionId();
      List<Row> passed = new ArrayList<>();
      List<String> topics = new ArrayList<>();
      for (JsonNode t : s.get("topics")) {
        topics.add(t.isNull() ? null : t.asText());
      }
      PartitionOutput out = s.get("transactional").asBoolean()
          ? new PartitionOutput.Transaction(s, partition) : new PartitionOutput.Plain(s);
      boolean skipped;
      try {
        while (rows.hasNext()) {
          Row r = rows.next();
          String kind = r.getString(0);
          if (!kind.startsWith("msg:")) {
            passed.add(r);
            continue;
          }
          String topic = topics.get(Integer.parseInt(kind.substring(4)));
          if (topic != null) {
            out.send(topic, (byte[]) r.get(2));
          }
        }
        skipped = out.finish();
      } catch (Throwable e) {
        out.abandon();
        throw e;
      }
      ObjectNode report = JSON.createObjectNode();
      report.put("partition", partition);
      report.put("attempt", ctx.attemptNumber());
      report.put("messages", out.count);
      report.put("skipped", skipped);
      report.put("seconds", out.nanos / 1e9);
      passed.add(RowFactory.create("kafka", (long) out.count, JSON.writeValueAsBytes(report)));
      return passed.iterator();
    }
  }

  private static final java.util.concurrent.atomic.AtomicBoolean CRASHED =
      new java.util.concurrent.atomic.AtomicBoolean();

  /**
   * A test's crash point ({@code settings.crash} = {@code point:batch:partition}): at the first
   * batch at or after {@code batch}, in that partition's task ({@code *}: the first task to get
   * there), SIGKILL the process that started this JVM (the job's Python driver, in local mode)
   * and halt. Tests only.
   */
  static void crash(JsonNode s, String point, int partition) {
    JsonNode spec = s.get("crash");
    if (spec == null || spec.isNull()) {
      return;
    }
    String[] f = spec.asText().split(":");
    if (!f[0].equals(point) || s.get("batch_id").asLong() < Long.parseLong(f[1])
        || !(f[2].equals("*") || partition == Integer.parseInt(f[2]))
        || !CRASHED.compareAndSet(false, true)) {
      return;
    }
    ProcessHandle.current().parent().ifPresent(ProcessHandle::destroyForcibly);
    Runtime.getRuntime().halt(137);
  }

  static boolean fenced(Throwable e) {
    for (Throwable c = e; c != null; c = c.getCause()) {
      if (c instanceof ProducerFencedException || c instanceof InvalidProducerEpochException) {
        return true;
      }
    }
    return false;
  }

  static ZombieException zombie(String query, int partition, long theirs, long ours) {
    return new ZombieException("another instance of query '" + query + "' has taken over "
        + "state partition " + partition + " (its epoch " + theirs + " > this instance's "
        + ours + "): this one is fenced and stops; run only one job per query id");
  }

  static void drop(String key, Slot slot) {
    PRODUCERS.remove(key, slot);
    slot.closed = true;
    try {
      slot.producer.close(Duration.ZERO);
    } catch (RuntimeException ignored) {
      // closing a fenced or failed producer: nothing more to do
    }
  }

  static Slot open(JsonNode s, String id, int partition) {
    Properties p = properties(s.get("producer"));
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    KafkaProducer<byte[], byte[]> producer = producer(p);
    try {
      producer.initTransactions();
      long[] progress = progress(s, partition);
      return new Slot(s.get("query_id").asText(), producer, progress[0], progress[1]);
    } catch (RuntimeException e) {
      producer.close(Duration.ZERO);
      throw e;
    }
  }

  /** A producer of the messages' bytes as they are, with the client settings {@code p}. */
  static KafkaProducer<byte[], byte[]> producer(Properties p) {
    return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
  }

  /** {@code {last committed batch (-1: none), its epoch (-1: none)}} of {@code partition}. */
  static long[] progress(JsonNode s, int partition) {
    String query = s.get("query_id").asText();
    String group = "revise-" + query;
    String key = group + "\u0000" + s.get("consumer").toString();
    TopicPartition tp = new TopicPartition(s.get("progress_topic").asText(), partition);
    OffsetAndMetadata committed;
    while (true) {
      Reader reader = READERS.computeIfAbsent(key, k -> new Reader(query, consumer(s, group)));
      synchronized (reader) {
        if (reader.closed) {
          continue;
        }
        reader.usedAt = System.nanoTime();
        committed = reader.consumer.committed(Collections.singleton(tp), Duration.ofSeconds(60))
            .get(tp);
        reader.usedAt = System.nanoTime();
        break;
      }
    }
    if (committed == null) {
      return new long[] {-1L, -1L};
    }
    long epoch = -1L;
    String meta = committed.metadata() == null ? "" : committed.metadata().replace(NUL, "");
    if (!meta.isEmpty()) {
      try {
        epoch = JSON.readTree(meta.getBytes(StandardCharsets.UTF_8)).path("epoch").asLong(-1L);
      } catch (java.io.IOException e) {
        throw new KafkaException("unreadable progress of " + tp + ": " + meta, e);
      }
    }
    return new long[] {committed.offset() - 1, epoch};
  }

  private static KafkaConsumer<byte[], byte[]> consumer(JsonNode s, String group) {
    Properties p = properties(s.get("consumer"));
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(p);
  }

  static Properties properties(JsonNode node) {
    Properties p = new Properties();
    node.fields().forEachRemaining(e -> p.put(e.getKey(), e.getValue().asText()));
    return p;
  }
}
