// Chat formatting for the template families the supported models ship. Model files carry Jinja
// templates; rather than run Jinja, we recognise the family from the template text and format
// with a fixed, tested implementation of it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// kPlain is for models trained on plain text, such as the bundled one: each user message is a
// line of text, every other message is followed by EOS, and the reply follows the user's line.
// kChatGlm4 is GLM-4/4.5's ([gMASK]<sop><|role|>\n...), kDeepSeek3 DeepSeek-V3's (<｜User｜>...),
// kGptOss GPT-OSS's Harmony (<|start|>role<|message|>...<|end|>), each as llama.cpp writes it;
// kErnie45 ERNIE-4.5's (<|begin_of_sentence|>...User: ...\nAssistant: ...), which llama.cpp
// does not build in, as the model's Jinja template writes it; kGranite IBM Granite 3.x/4.x's
// (<|start_of_role|>role<|end_of_role|>...<|end_of_text|>), as llama.cpp writes it; kLlama4
// Llama 4's (<|header_start|>role<|header_end|>\n\n...<|eot|>), as its Jinja template writes it;
// kBailing2 Ling 2.0's (<role>HUMAN</role>...<|role_end|>), kDots1 dots.llm1's
// (<|userprompt|>...<|endofuserprompt|><|response|>) and kHunyuanMoe Hunyuan-A13B's
// (<|startoftext|>...<|extra_0|>, whose user turn ends with the reply's cue), as llama.cpp writes
// them.
enum class ChatFormat {
  kChatMl,
  kLlama3,
  kMistral,
  kLlama2,
  kZephyr,
  kDeepSeek,
  kPlain,
  kChatGlm4,
  kDeepSeek3,
  kGptOss,
  kErnie45,
  kGranite,
  kLlama4,
  kBailing2,
  kDots1,
  kHunyuanMoe
};

// The family a Jinja template belongs to; Unimplemented naming the template when unknown.
absl::StatusOr<ChatFormat> DetectChatFormat(absl::string_view jinja_template);
// Family by name: "chatml", "llama3", "mistral", "llama2", "zephyr", "deepseek", "plain",
// "chatglm4", "deepseek3", "gpt-oss", "ernie4.5", "granite", "llama4", "bailing2", "dots1".
absl::StatusOr<ChatFormat> ChatFormatFromName(absl::string_view name);

// The prompt text for the messages; with add_generation_prompt, ends where the assistant's
// reply begins. BOS is not included (the tokenizer adds it at the start of a context).
absl::StatusOr<std::string> FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, absl::string_view eos_text);

}  // namespace moe
