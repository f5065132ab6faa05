#include "tools/moe-cli/tokenize_command.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
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
  std::string file;
  std::string ids;
  bool add_bos = false;
  bool parse_special = false;
};

// Parses the flags both subcommands share; false (after printing why) on bad usage.
bool ParseArgs(int argc, char** argv, bool tokenize, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        std::cerr << argv[0] << ": " << flag << " needs a value\n";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    if (flag == "-m" || flag == "--model") {
      if (!value(&args->model)) return false;
    } else if (tokenize && (flag == "-f" || flag == "--file")) {
      if (!value(&args->file)) return false;
    } else if (tokenize && flag == "--add-bos") {
      args->add_bos = true;
    } else if (tokenize && flag == "--parse-special") {
      args->parse_special = true;
    } else if (!tokenize && flag == "--ids") {
      if (!value(&args->ids)) return false;
    } else {
      std::cerr << argv[0] << ": unknown argument " << flag << "\n";
      return false;
    }
  }
  if (args->model.empty() || (tokenize ? args->file.empty() : false)) {
    std::cerr << (tokenize ? "usage: moe-cli tokenize -m MODEL --file TEXTFILE [--add-bos] "
                             "[--parse-special]\n"
                           : "usage: moe-cli detokenize -m MODEL --ids \"ID ID ...\"\n");
    return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model) {
  MOE_ASSIGN_OR_RETURN(TokenizerData data, LoadTokenizerData(model));
  return Tokenizer::Create(data);
}

}  // namespace

int TokenizeMain(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, /*tokenize=*/true, &args)) return 2;
  std::ifstream in(args.file, std::ios::binary);
  if (!in) {
    std::cerr << "cannot read " << args.file << "\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto tokenizer = LoadTokenizer(args.model);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 1;
  }
  EncodeOptions options;
  options.add_bos = args.add_bos;
  options.parse_special = args.parse_special;
  std::cout << absl::StrJoin((*tokenizer)->Encode(text.str(), options), " ") << "\n";
  return 0;
}

int DetokenizeMain(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, /*tokenize=*/false, &args)) return 2;
  auto parsed = cli::ParseTokenIds(args.ids);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 2;
  }
  const std::vector<int32_t>& ids = *parsed;
  auto tokenizer = LoadTokenizer(args.model);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
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
