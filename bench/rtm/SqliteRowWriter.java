package rewind.bench.rtm;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * The probe of bench/rtm_probe.py (issue 38), not Rewind's sink: a real-time-mode query's rows into SQLite from
 * the JVM. Rows are buffered and written every flushMs in one short transaction (a timer flushes when no row
 * comes); each transaction's commit time is noted in `commits`, so a row's latency is its commit's time minus its
 * Kafka append time. Writers of one file take turns through a fair lock: left to SQLite's busy handler, one
 * partition's writer starved for seconds while the other held the write lock every 20 ms.
 */
public class SqliteRowWriter extends ForeachWriter<Row> {
  private static final ConcurrentHashMap<String, ReentrantLock> LOCKS = new ConcurrentHashMap<>();
  private final String path;
  private final long flushMs;
  private transient Connection conn;
  private transient PreparedStatement insert;
  private transient PreparedStatement note;
  private transient List<Object[]> buffer;
  private transient ScheduledExecutorService timer;
  private transient long partition;
  private transient long epoch;
  private transient long seq;

  public SqliteRowWriter(String path, long flushMs) {
    this.path = path;
    this.flushMs = flushMs;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    try {
      partition = partitionId;
      epoch = epochId;
      conn = DriverManager.getConnection("jdbc:sqlite:" + path);
      try (Statement s = conn.createStatement()) {
        s.execute("PRAGMA journal_mode=WAL");
        s.execute("PRAGMA busy_timeout=5000");
        s.execute("PRAGMA synchronous=NORMAL");
      }
      conn.setAutoCommit(false);
      insert = conn.prepareStatement("INSERT OR IGNORE INTO events(topic, part, off, kafka_ts_ms, event_id, commit_id)"
          + " VALUES (?,?,?,?,?,?)");
      note = conn.prepareStatement("INSERT INTO commits(commit_id, at_ms, rows) VALUES (?,?,?)");
      buffer = new ArrayList<>();
      timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "rtm-probe-flush-" + partitionId);
        t.setDaemon(true);
        return t;
      });
      timer.scheduleWithFixedDelay(this::flushQuietly, flushMs, flushMs, TimeUnit.MILLISECONDS);
      return true;
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  @Override
  public void process(Row row) {
    synchronized (this) {
      buffer.add(new Object[] {row.getString(0), row.getInt(1), row.getLong(2), row.getTimestamp(3).getTime(),
          row.getString(4)});
    }
  }

  private void flushQuietly() {
    try {
      flush();
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  private synchronized void flush() throws Exception {
    if (buffer.isEmpty()) {
      return;
    }
    ReentrantLock lock = LOCKS.computeIfAbsent(path, k -> new ReentrantLock(true));
    lock.lock();
    try {
      String id = partition + "-" + epoch + "-" + seq;
      for (Object[] r : buffer) {
        insert.setString(1, (String) r[0]);
        insert.setInt(2, (Integer) r[1]);
        insert.setLong(3, (Long) r[2]);
        insert.setLong(4, (Long) r[3]);
        insert.setString(5, (String) r[4]);
        insert.setString(6, id);
        insert.addBatch();
      }
      insert.executeBatch();
      conn.commit();
      note.setString(1, id);
      note.setLong(2, System.currentTimeMillis());
      note.setInt(3, buffer.size());
      note.executeUpdate();
      conn.commit();
      seq++;
      buffer.clear();
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void close(Throwable error) {
    try {
      if (timer != null) {
        timer.shutdown();
        timer.awaitTermination(10, TimeUnit.SECONDS);
      }
      if (error == null && buffer != null) {
        flush();
      }
      if (conn != null) {
        conn.close();
      }
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }
}
