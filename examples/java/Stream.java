import org.libmoe.Context;
import org.libmoe.GenerateOptions;
import org.libmoe.MoeException;
import org.libmoe.Model;

/**
 * Streams a completion: {@code java -cp moe.jar:. Stream [MODEL] [PROMPT] [MAX_TOKENS]}. MODEL
 * defaults to $MOE_MODEL, then to the model bundled with the build (BundledModel.PATH, written by
 * CMake).
 */
public final class Stream {
  public static void main(String[] args) {
    String path = args.length > 0 ? args[0] : System.getenv("MOE_MODEL");
    if (path == null && new java.io.File(BundledModel.PATH).exists()) path = BundledModel.PATH;
    if (path == null) {
      System.err.println("usage: Stream MODEL [PROMPT] [MAX_TOKENS]");
      System.exit(2);
    }
    String prompt = args.length > 1 ? args[1] : "Once upon a time";
    int maxTokens = args.length > 2 ? Integer.parseInt(args[2]) : 64;

    try (Model model = Model.load(path);
        Context ctx = model.newContext()) {
      System.out.print(prompt);
      ctx.generate(prompt, new GenerateOptions().maxTokens(maxTokens), (token, piece) -> {
        System.out.print(piece);
        System.out.flush();
        return true; // false stops generation
      });
      System.out.println();
      System.err.printf("[%d tokens, %.1f tok/s]%n", ctx.stats().generatedTokens(),
          ctx.stats().generateTokensPerSecond());
    } catch (MoeException e) {
      System.err.println("libmoe: " + e.status() + ": " + e.getMessage());
      System.exit(1);
    }
  }
}
