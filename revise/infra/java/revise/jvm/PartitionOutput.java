package revise.jvm;

import static revise.jvm.TaskChangelog.ATTEMPTS;
import static revise.jvm.TaskChangelog.JSON;
import static revise.jvm.TaskChangelog.NUL;
import static revise.jvm.TaskChangelog.crash;
import static revise.jvm.TaskChangelog.drop;
import static revise.jvm.TaskChangelog.fenced;
import static revise.jvm.TaskChangelog.frames;
import static revise.jvm.TaskChangelog.locked;
import static revise.jvm.TaskChangelog.open;
import static revise.jvm.TaskChangelog.producer;
import static revise.jvm.TaskChangelog.progress;
import static revise.jvm.TaskChangelog.properties;
import static revise.jvm.TaskChangelog.zombie;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import revise.jvm.TaskChangelog.Slot;

/**
 * A task's messages on their way out, for {@link TaskChangelog}: each {@code msg:} payload is
 * produced as it arrives from the operator, so a task holds one payload at a time, never its
 * whole output (the close of a day's windows is hundreds of MB of JSON). {@link #send} each
 * payload, then {@link #finish}; {@link #abandon} when the task fails in between.
 */
abstract class PartitionOutput {
  /** The first failure a send's callback reported (a new one for each producer tried). */
  AtomicReference<Exception> failed = new AtomicReference<>();
  int count;
  long nanos;

  /** Produce the messages of one payload (none: nothing happens). */
  final void send(String topic, byte[] payload) {
    int n = ByteBuffer.wrap(payload).getInt(0);
    if (n == 0) {
      return;
    }
    long t0 = System.nanoTime();
    count += n;
    accept(topic, payload);
    nanos += System.nanoTime() - t0;
  }

  /** After the last payload: true when the partition had committed the batch before. */
  final boolean finish() {
    long t0 = System.nanoTime();
    try {
      return count > 0 && end();
    } finally {
      nanos += System.nanoTime() - t0;
    }
  }

  abstract void accept(String topic, byte[] payload);

  abstract boolean end();

  /** The task failed before {@link #finish}: let go of the producer. */
  abstract void abandon();

  /** Send one payload's messages; the first one's acknowledgement. */
  final Future<RecordMetadata> produce(KafkaProducer<byte[], byte[]> producer, String topic,
      byte[] payload) {
    raise();
    AtomicReference<Exception> sink = failed;
    List<Future<RecordMetadata>> first = new ArrayList<>(1);
    frames(payload, (k, v) -> {
      Future<RecordMetadata> sent =
          producer.send(new ProducerRecord<>(topic, k, v), (meta, e) -> {
            if (e != null) {
              sink.compareAndSet(null, e);
            }
          });
      if (first.isEmpty()) {
        first.add(sent);
      }
    });
    return first.get(0);
  }

  /** Wait until every message sent so far is acknowledged; the first failure, if any. */
  final void flush(KafkaProducer<byte[], byte[]> producer) {
    producer.flush();
    raise();
  }

  private void raise() {
    Exception e = failed.get();
    if (e instanceof KafkaException) {
      throw (KafkaException) e;
    }
    if (e != null) {
      throw new KafkaException("the changelog could not be sent: " + e, e);
    }
  }

  /**
   * One partition's messages and progress in one transaction of its producer.
   *
   * <p>The payloads are held until the transaction's first message is acknowledged by a producer
   * that is not fenced: a kept producer learns only then that another attempt of this partition
   * (on another executor) took its id since its last batch. It is then replaced, which reads the
   * progress again (the other attempt may have committed the batch: then nothing is sent), and
   * the held payloads are sent again. Once it is acknowledged (a few milliseconds, a payload or
   * two) the payloads are produced as they come. A producer fenced after that (an attempt racing
   * this one) fails the task, which Spark retries; a newer instance of the query fails it as a
   * zombie.
   */
  static final class Transaction extends PartitionOutput {
    private final JsonNode s;
    private final int partition;
    private final String query;
    private final String id;
    private final String key;
    private final long batch;
    private final long epoch;
    private final List<String> heldTopics = new ArrayList<>();
    private final List<byte[]> held = new ArrayList<>();
    private Slot slot;
    private boolean skip;
    /** The first message's acknowledgement, until it came (null before and after). */
    private Future<RecordMetadata> probe;
    private int attempts;
    private KafkaException last;

    Transaction(JsonNode s, int partition) {
      this.s = s;
      this.partition = partition;
      this.query = s.get("query_id").asText();
      this.batch = s.get("batch_id").asLong();
      this.epoch = s.get("epoch").asLong();
      this.id = "revise-" + query + "-p" + partition;
      this.key = id + "\u0000" + s.get("producer").toString();
    }

    @Override
    void accept(String topic, byte[] payload) {
      if (skip) {
        return;
      }
      if (slot != null && probe == null) {
        try {
          produce(slot.producer, topic, payload);
        } catch (KafkaException e) {
          throw lost(e);
        }
        return;
      }
      heldTopics.add(topic);
      held.add(payload);
      if (slot == null) {
        start();
      } else {
        try {
          produce(slot.producer, topic, payload);
        } catch (KafkaException e) {
          restart(e);
        }
      }
      confirm(false);
    }

    /** Take the producer, begin, send the held payloads (or find the batch committed). */
    private void start() {
      while (true) {
        if (attempts++ >= ATTEMPTS) {
          throw last;
        }
        slot = locked(key, () -> open(s, id, partition));
        if (slot.epoch > epoch) {
          long theirs = slot.epoch;
          let();
          throw zombie(query, partition, theirs, epoch);
        }
        if (slot.lastBatch >= batch) {
          let();
          skip = true;
          held.clear();
          heldTopics.clear();
          return;
        }
        try {
          if (slot.open) {
            slot.producer.abortTransaction();
            slot.open = false;
          }
          slot.producer.beginTransaction();
          slot.open = true;
          for (int i = 0; i < held.size(); i++) {
            Future<RecordMetadata> sent = produce(slot.producer, heldTopics.get(i), held.get(i));
            if (i == 0) {
              probe = sent;
            }
          }
          return;
        } catch (KafkaException e) {
          discard(e);
        }
      }
    }

    /** A fenced producer replaced before its first message was acknowledged: start again. */
    private void restart(KafkaException e) {
      discard(e);
      start();
    }

    /** Drop a producer found fenced before its first acknowledgement (else: the task fails). */
    private void discard(KafkaException e) {
      if (!fenced(e)) {
        throw lost(e);
      }
      last = e;
      probe = null;
      failed = new AtomicReference<>();  // the dropped producer's failures are not ours
      drop(key, slot);
      let();
    }

    /** Release the held payloads once the first message is acknowledged ({@code wait}: wait). */
    private void confirm(boolean wait) {
      while (probe != null && (wait || probe.isDone())) {
        try {
          probe.get();
          probe = null;
          held.clear();
          heldTopics.clear();
        } catch (java.util.concurrent.ExecutionException e) {
          Throwable cause = e.getCause();
          restart(cause instanceof KafkaException
              ? (KafkaException) cause : new KafkaException("the changelog could not be sent", e));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw lost(new KafkaException("interrupted while sending the changelog", e));
        }
      }
    }

    @Override
    boolean end() {
      confirm(true);
      if (skip) {
        return true;
      }
      try {
        flush(slot.producer);  // acked before the offsets are sent
        TopicPartition tp = new TopicPartition(s.get("progress_topic").asText(), partition);
        ObjectNode meta = JSON.createObjectNode();
        meta.put("epoch", epoch);
        meta.put("batch", batch);
        meta.put("emitted_at_ms", s.get("emitted_at_ms").asLong());
        slot.producer.sendOffsetsToTransaction(
            Collections.singletonMap(tp, new OffsetAndMetadata(batch + 1, meta + NUL)),
            new ConsumerGroupMetadata("revise-" + query));
        crash(s, "before_kafka_commit", partition);
        slot.producer.commitTransaction();
      } catch (KafkaException e) {
        throw lost(e);
      }
      slot.open = false;
      slot.lastBatch = batch;
      slot.epoch = epoch;
      slot.usedAt = System.nanoTime();
      let();
      crash(s, "after_partition_commit", partition);
      return false;
    }

    @Override
    void abandon() {
      if (slot == null) {
        return;
      }
      try {
        slot.producer.abortTransaction();
        slot.open = false;
      } catch (RuntimeException e) {
        drop(key, slot);
      }
      let();
    }

    /**
     * The error of a transaction lost midway: its producer dropped; a zombie's when a newer
     * instance of the query has taken the partition over.
     */
    private RuntimeException lost(KafkaException e) {
      drop(key, slot);
      let();
      if (fenced(e)) {
        long theirs = progress(s, partition)[1];
        if (theirs > epoch) {
          return zombie(query, partition, theirs, epoch);
        }
      }
      return e;
    }

    private void let() {
      slot.lock.unlock();
      slot = null;
    }
  }

  /** At-least-once: the messages through a plain idempotent producer, flushed; no progress. */
  static final class Plain extends PartitionOutput {
    private final String key;
    private final JsonNode s;
    private Slot slot;

    Plain(JsonNode s) {
      this.s = s;
      this.key = "plain\u0000" + s.get("query_id").asText() + "\u0000" + s.get("producer");
    }

    @Override
    void accept(String topic, byte[] payload) {
      if (slot == null) {
        slot = locked(key, () -> {
          Properties p = properties(s.get("producer"));
          p.remove("transaction.timeout.ms");
          return new Slot(s.get("query_id").asText(), producer(p), -1L, -1L);
        });
        slot.users++;  // shared by the executor's tasks: not closed while they write
        slot.lock.unlock();
      }
      produce(slot.producer, topic, payload);
    }

    @Override
    boolean end() {
      try {
        flush(slot.producer);
      } finally {
        abandon();
      }
      return false;
    }

    @Override
    void abandon() {
      if (slot != null) {
        slot.lock.lock();
        slot.users--;
        slot.usedAt = System.nanoTime();
        slot.lock.unlock();
        slot = null;
      }
    }
  }
}
