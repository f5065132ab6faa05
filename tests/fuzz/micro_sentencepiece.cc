#include "tests/fuzz/micro_sentencepiece.h"

#include <fcntl.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <unordered_map>
#include <utility>
#include <vector>

namespace moe::fuzz {
namespace {

// Training text: ASCII words, digits, punctuation and multi-byte characters, so that the pieces
// include merges, single characters and (with byte fallback) bytes.
const std::vector<std::string>& TrainingText() {
  static const std::vector<std::string> text = {
      "The quick brown fox jumps over the lazy dog.",
      "Hello, world! 123 4567 89",
      "A mixture of experts routes each token to a few experts, and the router learns which.",
      "caf\xc3\xa9 na\xc3\xafve \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x91\x8b",
      "    indented    text\twith\ttabs and  double  spaces",
  };
  return text;
}

class TextIterator : public sentencepiece::SentenceIterator {
 public:
  bool done() const override { return next_ >= TrainingText().size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return TrainingText()[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  size_t next_ = 0;
};

// The trainer logs every merge to stderr with no switch to turn it off; the seeds are written
// before any fuzzing, so stderr is pointed at /dev/null for the call.
class QuietStderr {
 public:
  QuietStderr() : saved_(dup(STDERR_FILENO)) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, STDERR_FILENO);
      close(null);
    }
  }
  ~QuietStderr() {
    if (saved_ < 0) return;
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

}  // namespace

std::string TrainMicroSentencePiece(const std::map<std::string, std::string>& options,
                                    std::string* error) {
  std::unordered_map<std::string, std::string> args(options.begin(), options.end());
  args.emplace("num_threads", "1");
  TextIterator text;
  std::string model;
  sentencepiece::util::Status status;
  {
    QuietStderr quiet;
    status = sentencepiece::SentencePieceTrainer::Train(args, &text, &model);
  }
  if (!status.ok()) {
    *error = status.ToString();
    return "";
  }
  return model;
}

}  // namespace moe::fuzz
