package io.rewind.checkpoint;

import java.io.IOException;
import java.io.OutputStream;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager with Rewind's fencing: a driver that lost its lease changes
 * nothing in the checkpoint, and no file that must be written once is ever written twice.
 *
 * <p>Every checkpoint write of a query passes through {@code createAtomic} (Spark's
 * {@code spark.sql.streaming.checkpointFileManagerClass}). Two guards:
 * <ul>
 *   <li><b>The lease.</b> The driver's Python process grants this JVM its lease for a checkpoint
 *   ({@link #hold}: epoch and the wall-clock time until which it may write, pushed at every
 *   renewal) and withdraws it when the lease was taken over ({@link #fence}). A file is published
 *   (and a delete done) only while the grant is valid: a driver that was paused past its lease
 *   finds its deadline passed the moment it resumes, before its renewal thread has even run.
 *   Paths of checkpoints with no grant in this JVM (tools, replays, executors on other hosts)
 *   are written as Spark's default managers write them.</li>
 *   <li><b>Create-if-absent.</b> A file Spark writes with {@code overwriteIfPossible = false}
 *   (the offset and commit logs, the checkpoint's metadata: what plans a batch) is published
 *   atomically only if absent: a hard link on a local file system, a PUT with
 *   {@code If-None-Match: *} on S3A. The check and the write are one step, so a pause between a
 *   lease check and the write cannot let a zombie plan a batch again with other offsets: Spark's
 *   contract for such files is {@code FileAlreadyExistsException}, which its metadata log turns
 *   into {@code CONCURRENT_STREAM_LOG_UPDATE}.</li>
 * </ul>
 * Other files (state store versions, which a re-run after a crash legitimately rewrites) go
 * through Spark's own manager after the lease check: the FileSystem-based one on a local disk (no
 * process forks per rename), the FileContext-based one elsewhere.
 */
public class FencedCheckpointFileManager implements CheckpointFileManager {

  /** A driver's right to write one checkpoint, as its Python process last granted it. */
  static final class Grant {
    final long epoch;
    volatile long validUntilMillis;
    volatile String fencedBy;

    Grant(long epoch, long validUntilMillis) {
      this.epoch = epoch;
      this.validUntilMillis = validUntilMillis;
    }
  }

  private static final Map<String, Grant> GRANTS = new ConcurrentHashMap<>();
  private static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  private final CheckpointFileManager delegate;
  private final FileSystem fs;
  private final boolean local;
  private final boolean s3a;

  public FencedCheckpointFileManager(Path path, Configuration conf) throws IOException {
    this.fs = path.getFileSystem(conf);
    this.local = fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem;
    this.s3a = "s3a".equals(fs.getScheme());
    this.delegate = local ? new FileSystemBasedCheckpointFileManager(path, conf) : sparkDefault(path, conf);
  }

  private static CheckpointFileManager sparkDefault(Path path, Configuration conf) {
    try {
      return new FileContextBasedCheckpointFileManager(path, conf);
    } catch (Exception e) { // Scala declares none; FileContext throws UnsupportedFileSystemException
      if (e instanceof UnsupportedFileSystemException) {
        return new FileSystemBasedCheckpointFileManager(path, conf);
      }
      throw sneaky(e);
    }
  }

  // ---------------------------------------------------------------- grants (called from Python)

  /** The checkpoint at {@code root} may be written by lease {@code epoch} until {@code validUntilMillis}. */
  public static void hold(String root, long epoch, long validUntilMillis) {
    String key = normalize(root);
    Grant g = GRANTS.get(key);
    if (g == null || g.epoch != epoch || g.fencedBy != null) {
      GRANTS.put(key, new Grant(epoch, validUntilMillis));
    } else {
      g.validUntilMillis = Math.max(g.validUntilMillis, validUntilMillis);
    }
  }

  /** The lease of {@code root} was taken over: nothing more is written there by this JVM. */
  public static void fence(String root, String why) {
    Grant g = GRANTS.computeIfAbsent(normalize(root), k -> new Grant(-1, 0));
    g.fencedBy = why;
    g.validUntilMillis = 0;
  }

  /** A clean exit: forget the grant (writes of that checkpoint are unguarded again). */
  public static void forget(String root) {
    GRANTS.remove(normalize(root));
  }

  /** {@code scheme://authority/path} without a trailing slash; a bare path is a local file. */
  public static String normalize(String location) {
    java.net.URI u = new Path(location).toUri();
    String scheme = u.getScheme() == null ? "file" : u.getScheme();
    String path = u.getPath() == null ? "" : u.getPath();
    while (path.length() > 1 && path.endsWith("/")) {
      path = path.substring(0, path.length() - 1);
    }
    return scheme + "://" + (u.getAuthority() == null ? "" : u.getAuthority()) + path;
  }

  static Grant grantOf(Path path) {
    String p = normalize(path.toString());
    Grant best = null;
    int bestLength = -1;
    for (Map.Entry<String, Grant> e : GRANTS.entrySet()) {
      String root = e.getKey();
      if ((p.equals(root) || p.startsWith(root + "/")) && root.length() > bestLength) {
        best = e.getValue();
        bestLength = root.length();
      }
    }
    return best;
  }

  /** Throws unless this JVM may write {@code path} now. */
  static void check(Path path, String what) throws IOException {
    Grant g = grantOf(path);
    if (g == null) {
      return;
    }
    if (g.fencedBy != null) {
      throw new IOException(g.fencedBy + "; not writing (" + what + ") " + path);
    }
    long late = System.currentTimeMillis() - g.validUntilMillis;
    if (late > 0) {
      throw new IOException("the driver lease of epoch " + g.epoch + " was not renewed in time (" + late
          + " ms past its deadline): not writing (" + what + ") " + path);
    }
  }

  // ---------------------------------------------------------------- CheckpointFileManager

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    try {
      check(path, "create");
      if (!overwriteIfPossible && local) {
        return new LinkPublished(fs.makeQualified(path));
      }
      if (!overwriteIfPossible && s3a) {
        FSDataOutputStream out = conditionalCreate(path);
        if (out != null) {
          return new Checked(out, path, true);
        }
      }
      return new Checked(delegate.createAtomic(path, overwriteIfPossible), path, false);
    } catch (IOException e) {
      throw sneaky(e);
    }
  }

  /** Spark's Scala callers catch checked exceptions that Scala's signatures do not declare. */
  @SuppressWarnings("unchecked")
  static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
    throw (E) e;
  }

  private FSDataOutputStream conditionalCreate(Path path) throws IOException {
    try {
      return (FSDataOutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL_CREATE, true).build();
    } catch (IllegalArgumentException | UnsupportedOperationException e) {
      return null; // this S3A has conditional writes off: Spark's manager (exists, then write)
    }
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public void mkdirs(Path path) {
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    try {
      check(path, "delete");
    } catch (IOException e) {
      throw sneaky(e);
    }
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  // ---------------------------------------------------------------- streams

  /** Another manager's stream, published only if the lease still holds when it is closed. */
  final class Checked extends CancellableFSDataOutputStream {
    private final OutputStream inner;
    private final Path path;
    private final boolean createIfAbsent;
    private boolean done;

    Checked(OutputStream inner, Path path, boolean createIfAbsent) {
      super(inner);
      this.inner = inner;
      this.path = path;
      this.createIfAbsent = createIfAbsent;
    }

    @Override
    public synchronized void close() throws IOException {
      if (done) {
        return;
      }
      done = true;
      try {
        check(path, "publish");
      } catch (IOException e) {
        abortQuietly(inner);
        throw e;
      }
      try {
        inner.close();
      } catch (IOException e) {
        if (createIfAbsent && fs.exists(path)) {
          FileAlreadyExistsException exists = new FileAlreadyExistsException(path + " exists: written by another "
              + "driver of this checkpoint (create-if-absent refused)");
          exists.initCause(e);
          throw exists;
        }
        throw e;
      }
    }

    @Override
    public synchronized void cancel() {
      if (!done) {
        done = true;
        abortQuietly(inner);
      }
    }
  }

  private static void abortQuietly(OutputStream out) {
    try {
      if (out instanceof CancellableFSDataOutputStream) {
        ((CancellableFSDataOutputStream) out).cancel();
      } else if (out instanceof FSDataOutputStream) {
        ((FSDataOutputStream) out).abort();
      } else {
        out.close();
      }
    } catch (IOException | RuntimeException e) {
      // nothing was published; a temp file may remain, as with Spark's own managers
    }
  }
}
