package org.libmoe;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads libmoe's native code. The jar carries {@code libmoe.so.0} and the JNI library under
 * {@code /org/libmoe/native/<os>-<arch>/}; on first use they are extracted to a temporary
 * directory and loaded from there, so no installation or {@code java.library.path} is needed.
 *
 * <p>Set the system property {@code moe.native.dir} to load the two libraries from a directory
 * instead (for example a system installation).
 *
 * <p>A jar built with CUDA also carries {@code libmoe_cuda.so}, the CUDA backend's module: it is
 * extracted beside libmoe, which opens it only when a model asks for a GPU ({@link Device}).
 */
public final class NativeLibrary {
  // libmoe first: the JNI library's dependency on it is then already satisfied by its SONAME.
  private static final String[] LIBRARIES = {"libmoe.so.0", "libmoe_jni.so"};
  private static final String CUDA_MODULE = "libmoe_cuda.so";  // optional, never loaded here
  private static boolean loaded;

  private NativeLibrary() {}

  /** Loads the native libraries once; later calls do nothing. */
  public static synchronized void load() {
    if (loaded) return;
    String dir = System.getProperty("moe.native.dir");
    try {
      Path from = dir != null ? Paths.get(dir) : extract();
      for (String name : LIBRARIES) System.load(from.resolve(name).toAbsolutePath().toString());
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("libmoe: cannot extract the native libraries: " + e);
    }
    loaded = true;
  }

  /** The resource folder for this platform, e.g. "linux-x86_64". */
  static String platform() {
    String os = System.getProperty("os.name").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
    if (arch.equals("amd64")) arch = "x86_64";
    if (arch.equals("arm64")) arch = "aarch64";
    return (os.startsWith("linux") ? "linux" : os.replace(' ', '_')) + "-" + arch;
  }

  private static Path extract() throws IOException {
    String folder = "/org/libmoe/native/" + platform() + "/";
    Path dir = Files.createTempDirectory("libmoe");
    dir.toFile().deleteOnExit();
    for (String name : LIBRARIES) {
      try (InputStream in = NativeLibrary.class.getResourceAsStream(folder + name)) {
        if (in == null) {
          throw new UnsatisfiedLinkError(
              "libmoe: this jar has no native library for " + platform() + " (" + folder + name
                  + "); set -Dmoe.native.dir to a directory holding " + String.join(", ", LIBRARIES));
        }
        Path file = dir.resolve(name);
        Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        file.toFile().deleteOnExit();
      }
    }
    try (InputStream in = NativeLibrary.class.getResourceAsStream(folder + CUDA_MODULE)) {
      if (in != null) {
        Path file = dir.resolve(CUDA_MODULE);
        Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        file.toFile().deleteOnExit();
      }
    }
    return dir;
  }
}
