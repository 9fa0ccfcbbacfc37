package io.rewind.rtm;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * Rewind's exactly-once SQL sink for Spark's real-time mode, where no foreachBatch runs (issue 38).
 *
 * <p>One instance per (Spark partition, epoch). Rows are routed to tables by their {@code kind} column and
 * written in small transactions every {@code flushMs} (a timer flushes when no row comes), so each is visible
 * within milliseconds. Exactly once comes from idempotence, not from a transaction per epoch: every table is
 * keyed (insert-once tables and dead letters by their Kafka coordinates), and a row with an existing key
 * writes nothing ({@code ignore}), the same values again ({@code replace}) or only a newer version
 * ({@code latest}); a record re-processed after a crash, from the last closed epoch's offsets, changes nothing.
 * Each transaction first raises the stream's fence row to this driver's lease epoch and rolls back when a
 * newer driver holds it (the SQL sink's {@code rewind_epochs}, as in rewind.sink.sql_fence). When the epoch
 * closes, a ledger row per (epoch, partition) records the rows written and the highest Kafka offset per
 * topic-partition among them, in the last transaction.
 *
 * <p>Values are stored as Rewind's Python SQL sink stores them: decimals at their scale (text on SQLite,
 * NUMERIC on PostgreSQL), timestamps in UTC (SQLAlchemy's DATETIME text on SQLite), {@code batch_id} the
 * epoch. Writers of one SQLite file in this JVM take turns through a fair lock: left to SQLite's busy
 * handler, one writer starved for seconds while another held the write lock every 20 ms.
 */
public class JdbcRealTimeWriter extends ForeachWriter<Row> {
  private static final ConcurrentHashMap<String, ReentrantLock> LOCKS = new ConcurrentHashMap<>();
  private static final DateTimeFormatter SQLITE_TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSSSSS").withZone(ZoneOffset.UTC);

  private final String url;
  private final String stream;
  private final long leaseEpoch;
  private final String fenceTable;
  private final String ledgerTable;
  private final String plan;
  private final long flushMs;

  private transient boolean sqlite;
  private transient Connection conn;
  private transient Map<String, Table> byKind;
  private transient List<Pending> buffer;
  private transient ScheduledExecutorService timer;
  private transient long partition;
  private transient long epoch;
  private transient long rows;
  private transient TreeMap<String, Long> endOffsets;
  private transient volatile Exception failure;

  /**
   * @param plan one line per row kind: {@code kind TAB table TAB insert SQL TAB its parameters' columns TAB
   *     decimal scales}, lists comma-separated, scales as {@code column:scale}. The SQL is the Python sink's own
   *     idempotent insert (rewind.sink.dialects.with_conflict_rule), compiled with positional parameters; a
   *     {@code batch_id} parameter takes the epoch.
   */
  public JdbcRealTimeWriter(String url, String stream, long leaseEpoch, String fenceTable, String ledgerTable,
      String plan, long flushMs) {
    this.url = url;
    this.stream = stream;
    this.leaseEpoch = leaseEpoch;
    this.fenceTable = fenceTable;
    this.ledgerTable = ledgerTable;
    this.plan = plan;
    this.flushMs = flushMs;
  }

  /** One row kind of the plan: its table and its statement. */
  private static final class Table {
    String name;
    String[] columns;
    Map<String, Integer> scales = new HashMap<>();
    String sql;
    PreparedStatement insert;
  }

  /** A row waiting for the next flush: its table and its values in the table's column order. */
  private static final class Pending {
    final Table table;
    final Object[] values;

    Pending(Table table, Object[] values) {
      this.table = table;
      this.values = values;
    }
  }

  private static String quote(String name) {
    return "\"" + name.replace("\"", "\"\"") + "\"";
  }

  private Map<String, Table> parsePlan() {
    Map<String, Table> tables = new HashMap<>();
    for (String line : plan.split("\n")) {
      if (line.isEmpty()) {
        continue;
      }
      String[] f = line.split("\t", -1);
      Table t = new Table();
      t.name = f[1];
      t.sql = f[2];
      t.columns = f[3].split(",");
      for (String s : f[4].split(",")) {
        if (!s.isEmpty()) {
          String[] cs = s.split(":");
          t.scales.put(cs[0], Integer.parseInt(cs[1]));
        }
      }
      tables.put(f[0], t);
    }
    return tables;
  }

  private Connection connect() throws Exception {
    Properties props = new Properties();
    String driver;
    if (url.startsWith("jdbc:sqlite:")) {
      driver = "org.sqlite.JDBC";
      props.setProperty("busy_timeout", "60000");
      props.setProperty("journal_mode", "WAL");
    } else {
      driver = "org.postgresql.Driver";
    }
    // The driver comes with spark.jars, in Spark's class loader, which DriverManager may not search.
    Driver d = (Driver) Class.forName(driver, true, JdbcRealTimeWriter.class.getClassLoader())
        .getDeclaredConstructor().newInstance();
    Connection c = d.connect(url, props);
    if (c == null) {
      throw new SQLException("no JDBC driver accepted " + url.replaceAll("//[^@/]*@", "//***@"));
    }
    // SQLite: deferred transactions (the driver's default). The driver opens the next one as soon as one
    // commits; an IMMEDIATE one held the write lock between flushes and starved the other writers.
    c.setAutoCommit(false);
    return c;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    try {
      partition = partitionId;
      epoch = epochId;
      sqlite = url.startsWith("jdbc:sqlite:");
      conn = connect();
      byKind = parsePlan();
      for (Table t : byKind.values()) {
        t.insert = conn.prepareStatement(t.sql);
      }
      buffer = new ArrayList<>();
      endOffsets = new TreeMap<>();
      rows = 0;
      timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "rewind-rtm-flush-" + partitionId);
        t.setDaemon(true);
        return t;
      });
      timer.scheduleWithFixedDelay(this::flushQuietly, flushMs, flushMs, TimeUnit.MILLISECONDS);
      return true;
    } catch (Exception e) {
      throw new RuntimeException("stream " + stream + ": the real-time sink could not open: " + e, e);
    }
  }

  private Object value(Row row, Table t, String column) {
    int i;
    try {
      i = row.fieldIndex(column);
    } catch (IllegalArgumentException e) {
      return null; // a column another kind's rows carry
    }
    Object v = row.get(i);
    if (v == null) {
      return null;
    }
    Integer scale = t.scales.get(column);
    if (scale != null) {
      BigDecimal exact = (v instanceof BigDecimal) ? (BigDecimal) v : new BigDecimal(v.toString());
      exact = exact.setScale(scale, RoundingMode.UNNECESSARY);
      return sqlite ? exact.toPlainString() : exact;
    }
    if (v instanceof Timestamp || v instanceof Instant) {
      Instant at = (v instanceof Timestamp) ? ((Timestamp) v).toInstant() : (Instant) v;
      return sqlite ? SQLITE_TIME.format(at) : OffsetDateTime.ofInstant(at, ZoneOffset.UTC);
    }
    return v;
  }

  @Override
  public void process(Row row) {
    if (failure != null) {
      throw new RuntimeException("stream " + stream + ": the real-time sink failed: " + failure, failure);
    }
    Object kind = row.getAs("kind");
    Table t = byKind.get(String.valueOf(kind));
    if (t == null) {
      throw new IllegalStateException("stream " + stream + ": a row of kind '" + kind + "' goes to no table of "
          + byKind.keySet() + " (the transform's kinds and tables disagree)");
    }
    Object[] values = new Object[t.columns.length];
    for (int i = 0; i < values.length; i++) {
      values[i] = t.columns[i].equals("batch_id") ? (Object) epoch : value(row, t, t.columns[i]);
    }
    String coords = coordinates(row);
    synchronized (this) {
      buffer.add(new Pending(t, values));
      rows++;
      if (coords != null) {
        int cut = coords.lastIndexOf('@');
        long off = Long.parseLong(coords.substring(cut + 1));
        endOffsets.merge(coords.substring(0, cut), off + 1, Math::max);
      }
    }
  }

  private static String coordinates(Row row) {
    try {
      Object topic = row.get(row.fieldIndex("topic"));
      Object part = row.get(row.fieldIndex("partition"));
      Object off = row.get(row.fieldIndex("offset"));
      if (topic == null || part == null || off == null) {
        return null;
      }
      return topic + "/" + part + "@" + off;
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  private void flushQuietly() {
    try {
      flush(false);
    } catch (Exception e) {
      failure = e; // process() and close() raise it: the task fails and Spark retries the epoch
    }
  }

  private synchronized void flush(boolean closing) throws Exception {
    if (buffer.isEmpty() && !closing) {
      return;
    }
    ReentrantLock lock = sqlite ? LOCKS.computeIfAbsent(url, k -> new ReentrantLock(true)) : null;
    if (lock != null) {
      lock.lock();
    }
    try {
      claimEpoch(); // the transaction's first statement, a write: no stale snapshot to upgrade
      for (Pending p : buffer) {
        PreparedStatement ps = p.table.insert;
        for (int i = 0; i < p.values.length; i++) {
          ps.setObject(i + 1, p.values[i]);
        }
        ps.addBatch();
      }
      for (Table t : byKind.values()) {
        t.insert.executeBatch();
      }
      if (closing) {
        writeLedger();
      }
      conn.commit();
      buffer.clear();
    } catch (Exception e) {
      try {
        conn.rollback();
      } catch (SQLException ignored) {
        // the connection is gone: nothing was committed
      }
      throw e;
    } finally {
      if (lock != null) {
        lock.unlock();
      }
    }
  }

  /** Raise the stream's fence row to this driver's epoch; refused when a newer driver holds it. */
  private void claimEpoch() throws SQLException {
    String sql = "INSERT INTO " + quote(fenceTable) + " (stream, epoch, fenced_at) VALUES (?, ?, ?) "
        + "ON CONFLICT (stream) DO UPDATE SET epoch = CASE WHEN " + quote(fenceTable) + ".epoch > excluded.epoch "
        + "THEN " + quote(fenceTable) + ".epoch ELSE excluded.epoch END, fenced_at = CASE WHEN "
        + quote(fenceTable) + ".epoch > excluded.epoch THEN " + quote(fenceTable) + ".fenced_at ELSE "
        + "excluded.fenced_at END RETURNING epoch";
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setString(1, stream);
      ps.setLong(2, leaseEpoch);
      Instant now = Instant.now();
      if (sqlite) {
        ps.setString(3, SQLITE_TIME.format(now));
      } else {
        ps.setObject(3, OffsetDateTime.ofInstant(now, ZoneOffset.UTC));
      }
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        long current = rs.getLong(1);
        if (current > leaseEpoch) {
          throw new SQLException("stream '" + stream + "': real-time epoch " + epoch + " refused: it is written "
              + "under driver lease epoch " + leaseEpoch + ", and epoch " + current + " has taken the stream over "
              + "(this driver is fenced); nothing was written");
        }
      }
    }
  }

  private void writeLedger() throws SQLException {
    StringBuilder offsets = new StringBuilder("{");
    for (Map.Entry<String, Long> e : endOffsets.entrySet()) {
      offsets.append(offsets.length() == 1 ? "" : ", ").append('"').append(e.getKey()).append("\": ")
          .append(e.getValue());
    }
    offsets.append('}');
    String sql = "INSERT INTO " + quote(ledgerTable) + " (stream, epoch, spark_partition, lease_epoch, rows_written, "
        + "end_offsets, committed_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, epoch, spark_partition) "
        + "DO UPDATE SET lease_epoch = excluded.lease_epoch, rows_written = excluded.rows_written, "
        + "end_offsets = excluded.end_offsets, committed_at = excluded.committed_at";
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setString(1, stream);
      ps.setLong(2, epoch);
      ps.setLong(3, partition);
      ps.setLong(4, leaseEpoch);
      ps.setLong(5, rows);
      ps.setString(6, offsets.toString());
      Instant now = Instant.now();
      if (sqlite) {
        ps.setString(7, SQLITE_TIME.format(now));
      } else {
        ps.setObject(7, OffsetDateTime.ofInstant(now, ZoneOffset.UTC));
      }
      ps.executeUpdate();
    }
  }

  @Override
  public void close(Throwable error) {
    try {
      if (timer != null) {
        timer.shutdown();
        timer.awaitTermination(30, TimeUnit.SECONDS);
      }
      if (error == null && failure == null && conn != null) {
        flush(true); // the epoch closed: its last rows and its ledger row in one transaction
      }
    } catch (Exception e) {
      throw new RuntimeException("stream " + stream + ": the real-time sink could not close epoch " + epoch + ": "
          + e, e);
    } finally {
      try {
        if (conn != null) {
          conn.close();
        }
      } catch (SQLException ignored) {
        // closing a broken connection
      }
    }
    if (failure != null && error == null) {
      throw new RuntimeException("stream " + stream + ": the real-time sink failed: " + failure, failure);
    }
  }
}
