package revise.jvm;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system ({@code file:}) that sets a file's permissions with a system call,
 * not a process. Without Hadoop's native library, {@link RawLocalFileSystem#setPermission} runs
 * {@code chmod} in a new process, and every file Hadoop creates gets one (and one more for its
 * {@code .crc}): a streaming query's offset and commit logs and each state partition's changelog,
 * eight processes forked from the driver JVM per micro-batch, 6–15 ms each. Spark is given this
 * class as {@code fs.file.impl} ({@code revise/spark/session.py}); everything else is Hadoop's.
 * With the native library present, or for a mode java.nio cannot set (setuid, setgid, sticky),
 * Hadoop's own path runs.
 */
public final class LocalFiles extends LocalFileSystem {
  public LocalFiles() {
    super(new Raw());
  }

  /** {@link RawLocalFileSystem} with {@link #setPermission} through {@code java.nio}. */
  static final class Raw extends RawLocalFileSystem {
    private static final int SPECIAL_BITS = 07000;

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if (NativeIO.isAvailable() || (mode & SPECIAL_BITS) != 0) {
        super.setPermission(p, permission);
        return;
      }
      // Without special bits, FsPermission's text is the nine rwx letters chmod would show.
      Files.setPosixFilePermissions(
          pathToFile(p).toPath(), PosixFilePermissions.fromString(permission.toString()));
    }
  }
}
