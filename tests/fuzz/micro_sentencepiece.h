// Micro SentencePiece models for the tokenizer.model fuzz target's seeds: trained in memory by
// Debian's libsentencepiece_train on a few sentences, a few hundred bytes each (the bundled
// model's 4,000 pieces make every iteration parse and index all of them).
//
// Free of Abseil, like lib/import/sentencepiece_reader.h: the SentencePiece headers declare their
// own absl::string_view.
#pragma once

#include <map>
#include <string>

namespace moe::fuzz {

// Trains a model with the trainer's options (`model_type`, `vocab_size`, ...; see spm_train
// --help) and returns its serialized ModelProto; on failure returns "" and sets *error.
std::string TrainMicroSentencePiece(const std::map<std::string, std::string>& options,
                                    std::string* error);

}  // namespace moe::fuzz
