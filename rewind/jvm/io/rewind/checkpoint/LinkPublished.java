package io.rewind.checkpoint;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.util.UUID;

import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/** A local file written to a temp file and published with a hard link: atomic, never over another. */
final class LinkPublished extends CheckpointFileManager.CancellableFSDataOutputStream {
  private final Path path;
  private final File target;
  private final File temp;
  private boolean done;

  LinkPublished(Path path) throws IOException {
    this(path, new File(path.toUri().getPath()));
  }

  private LinkPublished(Path path, File target) throws IOException {
    this(path, target, new File(target.getParentFile(), "." + target.getName() + "." + UUID.randomUUID() + ".tmp"));
  }

  private LinkPublished(Path path, File target, File temp) throws IOException {
    super(open(target, temp));
    this.path = path;
    this.target = target;
    this.temp = temp;
  }

  private static OutputStream open(File target, File temp) throws IOException {
    File dir = target.getParentFile();
    if (!dir.isDirectory() && !dir.mkdirs() && !dir.isDirectory()) {
      throw new IOException("cannot create " + dir);
    }
    return new FileOutputStream(temp);
  }

  @Override
  public synchronized void close() throws IOException {
    if (done) {
      return;
    }
    done = true;
    try {
      underlyingStream().close();
      FencedCheckpointFileManager.check(path, "publish");
      // A checksum left by an earlier file of this name would fail every read of the new one.
      Files.deleteIfExists(new File(target.getParentFile(), "." + target.getName() + ".crc").toPath());
      Files.createLink(target.toPath(), temp.toPath());
    } catch (java.nio.file.FileAlreadyExistsException e) {
      throw new FileAlreadyExistsException(path + " exists: written by another driver of this checkpoint "
          + "(create-if-absent refused)");
    } finally {
      Files.deleteIfExists(temp.toPath());
    }
  }

  @Override
  public synchronized void cancel() {
    if (done) {
      return;
    }
    done = true;
    try {
      underlyingStream().close();
    } catch (IOException e) {
      // the temp file goes anyway
    }
    temp.delete();
  }
}
