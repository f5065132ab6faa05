// moe-cli subcommands "tokenize" and "detokenize" (argv[0] is the subcommand name):
//   moe-cli tokenize -m MODEL --file TEXTFILE [--add-bos] [--parse-special]
//       prints the ids of the file's whole content, space-separated, on one line
//   moe-cli detokenize -m MODEL --ids "1 2 3"
//       prints the text
// MODEL: a .gguf file, a tokenizer.json (tokenizer_config.json beside it is read), or .moe.
#pragma once

namespace moe {

int TokenizeMain(int argc, char** argv);
int DetokenizeMain(int argc, char** argv);

}  // namespace moe
