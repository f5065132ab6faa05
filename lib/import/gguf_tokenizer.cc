#include "lib/import/gguf_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

// Optional keys: absent -> keep the default; present with a wrong type -> error.
absl::Status ReadOptionalId(const GgufFile& gguf, absl::string_view key, int32_t* out) {
  absl::StatusOr<uint64_t> value = gguf.GetUint(key);
  if (absl::IsNotFound(value.status())) return absl::OkStatus();
  // Converters write "no such token" as -1 (signed) or 0xFFFFFFFF; both mean none.
  *out =
      !value.ok() || *value > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int32_t>(*value);
  return absl::OkStatus();
}

absl::Status ReadOptionalBool(const GgufFile& gguf, absl::string_view key, bool* out) {
  absl::StatusOr<bool> value = gguf.GetBool(key);
  if (absl::IsNotFound(value.status())) return absl::OkStatus();
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

absl::Status ReadOptionalString(const GgufFile& gguf, absl::string_view key, std::string* out) {
  absl::StatusOr<std::string> value = gguf.GetString(key);
  if (absl::IsNotFound(value.status())) return absl::OkStatus();
  if (!value.ok()) return value.status();
  *out = *std::move(value);
  return absl::OkStatus();
}

absl::Status Read(const GgufFile& gguf, TokenizerData* data) {
  MOE_ASSIGN_OR_RETURN(data->model, gguf.GetString("tokenizer.ggml.model"));
  if (data->model != "llama" && data->model != "gpt2") {
    const char* kind = data->model == "bert"   ? " (WordPiece)"
                       : data->model == "t5"   ? " (Unigram)"
                       : data->model == "rwkv" ? " (RWKV trie)"
                                               : "";
    return absl::UnimplementedError(
        absl::StrCat("GGUF tokenizer model '", data->model, "'", kind,
                     " is not supported; supported are 'llama' (SentencePiece BPE) and 'gpt2' "
                     "(byte-level BPE)"));
  }
  MOE_RETURN_IF_ERROR(ReadOptionalString(gguf, "tokenizer.ggml.pre", &data->pre));
  MOE_ASSIGN_OR_RETURN(data->tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (gguf.Find("tokenizer.ggml.scores") != nullptr) {
    MOE_ASSIGN_OR_RETURN(data->scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    MOE_ASSIGN_OR_RETURN(std::vector<int64_t> types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    data->token_types.assign(types.begin(), types.end());
  }
  if (gguf.Find("tokenizer.ggml.merges") != nullptr) {
    MOE_ASSIGN_OR_RETURN(data->merges, gguf.GetStringArray("tokenizer.ggml.merges"));
  }
  const bool spm = data->model == "llama";
  // The pre-types llama.cpp reads as Llama 3's: whole pre-tokens that are in the vocabulary are
  // emitted as they are, and a BOS is added unless the file says otherwise.
  const bool llama3 = data->pre == "llama3" || data->pre == "llama-v3" ||
                      data->pre == "llama-bpe" || data->pre == "falcon3" ||
                      data->pre == "pixtral" || data->pre == "lfm2";
  // llama.cpp's defaults when the keys are absent.
  data->add_bos = spm || llama3;
  data->add_space_prefix = spm;
  if (spm) {
    data->bos_id = 1, data->eos_id = 2, data->unk_id = 0;
  }
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.bos_token_id", &data->bos_id));
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.eos_token_id", &data->eos_id));
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.eot_token_id", &data->eot_id));
  // llama.cpp ends generation at the end-of-message token too.
  int32_t eom = -1;
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.eom_token_id", &eom));
  if (eom >= 0) data->eog_ids.push_back(eom);
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.unknown_token_id", &data->unk_id));
  MOE_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.padding_token_id", &data->pad_id));
  MOE_RETURN_IF_ERROR(ReadOptionalBool(gguf, "tokenizer.ggml.add_bos_token", &data->add_bos));
  MOE_RETURN_IF_ERROR(ReadOptionalBool(gguf, "tokenizer.ggml.add_eos_token", &data->add_eos));
  MOE_RETURN_IF_ERROR(
      ReadOptionalBool(gguf, "tokenizer.ggml.add_space_prefix", &data->add_space_prefix));
  MOE_RETURN_IF_ERROR(ReadOptionalString(gguf, "tokenizer.chat_template", &data->chat_template));
  data->ignore_merges = llama3;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerData> TokenizerDataFromGguf(const GgufFile& gguf) {
  TokenizerData data;
  MOE_RETURN_IF_ERROR(Annotate(Read(gguf, &data), "reading the GGUF tokenizer"));
  return data;
}

}  // namespace moe
