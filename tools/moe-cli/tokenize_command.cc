#include "tools/moe-cli/tokenize_command.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/tokenizer.h"
#include "tools/moe-cli/token_ids.h"

namespace moe {
namespace {

struct Args {
  std::string model;
  std::string file;  // "-": standard input
  std::string text;  // from --text or the positional words
  bool has_text = false;
  std::string ids;
  bool add_bos = false;
  bool parse_special = false;
};

constexpr char kTokenizeUsage[] =
    "usage: moe-cli tokenize -m MODEL (TEXT... | --text TEXT | --file FILE | --file -) "
    "[--add-bos] [--parse-special]\n"
    "  Prints the token ids of the text (of FILE, or of standard input with --file -).\n"
    "  -m, --model MODEL   a .gguf, .moe or tokenizer.json file\n"
    "  --add-bos           prepend BOS when the vocabulary uses one\n"
    "  --parse-special     recognise control-token markup such as <|im_start|>\n";
constexpr char kDetokenizeUsage[] =
    "usage: moe-cli detokenize -m MODEL (ID... | --ids \"ID ID ...\" | --ids -)\n"
    "  Prints the text of the token ids (read from standard input with --ids -).\n"
    "  -m, --model MODEL   a .gguf, .moe or tokenizer.json file\n";

// Parses the flags of either subcommand. Returns the exit code when there is nothing to run
// (0 after printing the usage for --help, 2 after saying what is wrong), nothing otherwise.
std::optional<int> ParseArgs(int argc, char** argv, bool tokenize, Args* args) {
  const char* usage = tokenize ? kTokenizeUsage : kDetokenizeUsage;
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        std::cerr << "moe-cli " << argv[0] << ": " << flag << " needs a value\n";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    bool ok = true;
    if (flag == "-h" || flag == "--help") {
      std::cout << usage;
      return 0;
    } else if (flag == "-m" || flag == "--model") {
      ok = value(&args->model);
    } else if (tokenize && (flag == "-f" || flag == "--file")) {
      ok = value(&args->file);
    } else if (tokenize && flag == "--text") {
      ok = value(&args->text);
      args->has_text = true;
    } else if (tokenize && flag == "--add-bos") {
      args->add_bos = true;
    } else if (tokenize && flag == "--parse-special") {
      args->parse_special = true;
    } else if (!tokenize && flag == "--ids") {
      ok = value(&args->ids);
    } else if (flag.size() > 1 && flag[0] == '-' && flag != "-") {
      std::cerr << "moe-cli " << argv[0] << ": unknown argument " << flag << "\n" << usage;
      return 2;
    } else {
      words.push_back(flag);
    }
    if (!ok) return 2;
  }
  if (!words.empty()) {
    std::string joined = absl::StrJoin(words, " ");
    if (tokenize) {
      args->text = args->has_text ? args->text + " " + joined : joined;
      args->has_text = true;
    } else {
      args->ids = args->ids.empty() ? joined : args->ids + " " + joined;
    }
  }
  const int sources = tokenize ? (args->has_text ? 1 : 0) + (args->file.empty() ? 0 : 1)
                               : (args->ids.empty() ? 0 : 1);
  if (args->model.empty() || sources != 1) {
    std::cerr << "moe-cli " << argv[0] << ": "
              << (args->model.empty() ? "-m MODEL is required"
                  : sources == 0      ? "nothing to read: give the input"
                                      : "give the text one way only")
              << "\n"
              << usage;
    return 2;
  }
  return std::nullopt;
}

// The whole of a file, or of standard input for "-".
bool ReadAll(const std::string& path, std::string* out) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    text << in.rdbuf();
  }
  *out = text.str();
  return true;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model) {
  MOE_ASSIGN_OR_RETURN(TokenizerData data, LoadTokenizerData(model));
  return Tokenizer::Create(data);
}

}  // namespace

int TokenizeMain(int argc, char** argv) {
  Args args;
  if (std::optional<int> exit_code = ParseArgs(argc, argv, /*tokenize=*/true, &args)) {
    return *exit_code;
  }
  std::string text = args.text;
  if (!args.has_text && !ReadAll(args.file, &text)) {
    std::cerr << "moe-cli tokenize: cannot read '" << args.file << "'\n";
    return 1;
  }
  auto tokenizer = LoadTokenizer(args.model);
  if (!tokenizer.ok()) {
    std::cerr << "moe-cli " << argv[0] << ": " << tokenizer.status().message() << "\n";
    return 1;
  }
  EncodeOptions options;
  options.add_bos = args.add_bos;
  options.parse_special = args.parse_special;
  std::cout << absl::StrJoin((*tokenizer)->Encode(text, options), " ") << "\n";
  return 0;
}

int DetokenizeMain(int argc, char** argv) {
  Args args;
  if (std::optional<int> exit_code = ParseArgs(argc, argv, /*tokenize=*/false, &args)) {
    return *exit_code;
  }
  if (args.ids == "-" && !ReadAll("-", &args.ids)) return 1;
  auto parsed = cli::ParseTokenIds(args.ids);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 2;
  }
  const std::vector<int32_t>& ids = *parsed;
  auto tokenizer = LoadTokenizer(args.model);
  if (!tokenizer.ok()) {
    std::cerr << "moe-cli " << argv[0] << ": " << tokenizer.status().message() << "\n";
    return 1;
  }
  auto text = (*tokenizer)->Decode(ids);
  if (!text.ok()) {
    std::cerr << text.status() << "\n";
    return 1;
  }
  std::cout << *text << "\n";
  return 0;
}

}  // namespace moe
