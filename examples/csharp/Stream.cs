// Streams a completion: mono Stream.exe [MODEL] [PROMPT] [MAX_TOKENS]. MODEL defaults to
// $MOE_MODEL, then to the model bundled with the build (BundledModel.Path, written by CMake).
using System;
using System.IO;
using LibMoe;

static class Stream {
  static int Main(string[] args) {
    string path = args.Length > 0 ? args[0] : Environment.GetEnvironmentVariable("MOE_MODEL");
    if (path == null && File.Exists(BundledModel.Path)) path = BundledModel.Path;
    if (path == null) {
      Console.Error.WriteLine("usage: Stream MODEL [PROMPT] [MAX_TOKENS]");
      return 2;
    }
    string prompt = args.Length > 1 ? args[1] : "Once upon a time";
    int maxTokens = args.Length > 2 ? int.Parse(args[2]) : 64;

    try {
      using (Model model = Model.Load(path))
      using (Context ctx = model.CreateContext()) {
        Console.Write(prompt);
        ctx.Generate(prompt, new GenerateOptions { MaxTokens = maxTokens }, (token, piece) => {
          Console.Write(piece);
          return true;  // false stops generation
        });
        Console.WriteLine();
        Console.Error.WriteLine("[{0} tokens, {1:F1} tok/s]", ctx.Stats.GeneratedTokens,
                                ctx.Stats.GenerateTokensPerSecond);
      }
      return 0;
    } catch (MoeException e) {
      Console.Error.WriteLine("libmoe: {0}: {1}", e.Status, e.Message);
      return 1;
    }
  }
}
