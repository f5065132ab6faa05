#include "lib/runtime/chat_template.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace moe {

namespace {

constexpr char kKnownNames[] =
    "chatml, llama3, mistral, llama2, zephyr, deepseek, plain, chatglm4, deepseek3, gpt-oss, "
    "ernie4.5, granite, llama4, bailing2, dots1, hunyuan-moe";

// The plain format's Jinja, as the bundled model's tokenizer_config.json ships it; compared
// with whitespace and Jinja's backslash-n escapes removed, so that line breaks, indentation and
// whether the newline is written as an escape or as itself do not matter.
constexpr char kPlainJinja[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ message['content'] + '\\n' }}{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}";

std::string WithoutSpaces(absl::string_view t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '\\' && i + 1 < t.size() && t[i + 1] == 'n') {
      ++i;
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      out += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatFormat> DetectChatFormat(absl::string_view t) {
  if (t.empty()) return absl::NotFoundError("the model has no chat template");
  if (WithoutSpaces(t) == WithoutSpaces(kPlainJinja)) return ChatFormat::kPlain;
  // Before the families whose markers these templates share (GLM's <|user|>, Harmony's roles).
  if (absl::StrContains(t, "<|start|>") && absl::StrContains(t, "<|channel|>")) {
    return ChatFormat::kGptOss;
  }
  if (absl::StrContains(t, "[gMASK]<sop>")) return ChatFormat::kChatGlm4;
  // Granite 3.x and 4.x (their tool-call variants differ only in roles the API does not take).
  if (absl::StrContains(t, "<|start_of_role|>")) return ChatFormat::kGranite;
  if (absl::StrContains(t, "<｜Assistant｜>") && absl::StrContains(t, "<｜User｜>")) {
    return ChatFormat::kDeepSeek3;
  }
  // ERNIE-4.5's says "User: " and "Assistant: " too, with other separators than DeepSeek's.
  if (absl::StrContains(t, "<|begin_of_sentence|>")) return ChatFormat::kErnie45;
  if (absl::StrContains(t, "<|im_start|>")) return ChatFormat::kChatMl;
  if (absl::StrContains(t, "<|start_header_id|>")) return ChatFormat::kLlama3;
  if (absl::StrContains(t, "<|header_start|>") && absl::StrContains(t, "<|header_end|>")) {
    return ChatFormat::kLlama4;
  }
  if (absl::StrContains(t, "<role>ASSISTANT</role>") &&
      absl::StrContains(t, "<role>HUMAN</role>") && absl::StrContains(t, "<|role_end|>")) {
    return ChatFormat::kBailing2;
  }
  if (absl::StrContains(t, "<|endofuserprompt|>")) return ChatFormat::kDots1;
  if (absl::StrContains(t, "<|extra_0|>") && absl::StrContains(t, "<|extra_4|>")) {
    return ChatFormat::kHunyuanMoe;
  }
  if (absl::StrContains(t, "[INST]")) {
    return absl::StrContains(t, "<<SYS>>") ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  }
  if (absl::StrContains(t, "<|user|>") && absl::StrContains(t, "<|assistant|>")) {
    return ChatFormat::kZephyr;
  }
  if (absl::StrContains(t, "User: ") && absl::StrContains(t, "Assistant:")) {
    return ChatFormat::kDeepSeek;
  }
  std::string head(t.substr(0, 80));
  return absl::UnimplementedError(absl::StrCat("unknown chat template \"", head,
                                               t.size() > 80 ? "..." : "",
                                               "\" (known: ", kKnownNames, ")"));
}

absl::StatusOr<ChatFormat> ChatFormatFromName(absl::string_view name) {
  if (name == "chatml") return ChatFormat::kChatMl;
  if (name == "llama3") return ChatFormat::kLlama3;
  if (name == "mistral") return ChatFormat::kMistral;
  if (name == "llama2") return ChatFormat::kLlama2;
  if (name == "zephyr") return ChatFormat::kZephyr;
  if (name == "deepseek") return ChatFormat::kDeepSeek;
  if (name == "plain") return ChatFormat::kPlain;
  if (name == "chatglm4") return ChatFormat::kChatGlm4;
  if (name == "deepseek3") return ChatFormat::kDeepSeek3;
  if (name == "gpt-oss") return ChatFormat::kGptOss;
  if (name == "ernie4.5") return ChatFormat::kErnie45;
  if (name == "granite") return ChatFormat::kGranite;
  if (name == "llama4") return ChatFormat::kLlama4;
  if (name == "bailing2") return ChatFormat::kBailing2;
  if (name == "dots1") return ChatFormat::kDots1;
  if (name == "hunyuan-moe") return ChatFormat::kHunyuanMoe;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat template '", name, "' (known: ", kKnownNames, ")"));
}

absl::StatusOr<std::string> FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, absl::string_view eos) {
  for (const auto& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("unknown chat role '", m.role, "'"));
    }
  }
  std::string out;
  switch (format) {
    case ChatFormat::kChatMl:
      for (const auto& m : messages)
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::kLlama3:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", m.content,
                        "<|eot_id|>");
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::kMistral:
    case ChatFormat::kLlama2: {
      // The system prompt goes into the first user turn (Llama-2 wraps it in <<SYS>>), so it can
      // only come first, before a user message: anywhere else it would be silently lost.
      for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role != "system") continue;
        const bool user_follows = i + 1 < messages.size() && messages[i + 1].role == "user";
        if (i != 0 || !user_follows) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the ", format == ChatFormat::kLlama2 ? "llama2" : "mistral",
              " template takes a system message only first and followed by a user message (got "
              "one at position ",
              i, ")"));
        }
      }
      std::string system;
      bool first_user = true;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = m.content;
        } else if (m.role == "user") {
          std::string content = m.content;
          if (first_user && !system.empty()) {
            content = format == ChatFormat::kLlama2
                          ? absl::StrCat("<<SYS>>\n", system, "\n<</SYS>>\n\n", content)
                          : absl::StrCat(system, "\n\n", content);
          }
          first_user = false;
          absl::StrAppend(&out, "[INST] ", content, " [/INST]");
        } else {
          absl::StrAppend(&out, " ", m.content, eos);
        }
      }
      break;
    }
    case ChatFormat::kZephyr:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, m.role == "assistant" ? eos : "",
                        "\n");
      }
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
    case ChatFormat::kDeepSeek:
      for (const auto& m : messages) {
        if (m.role == "system") absl::StrAppend(&out, m.content, "\n\n");
        if (m.role == "user") absl::StrAppend(&out, "User: ", m.content, "\n\n");
        if (m.role == "assistant") absl::StrAppend(&out, "Assistant: ", m.content, eos);
      }
      if (add_generation_prompt) out += "Assistant:";
      break;
    case ChatFormat::kPlain:
      for (const auto& m : messages) {
        absl::StrAppend(&out, m.content, m.role == "user" ? absl::string_view("\n") : eos);
      }
      break;  // the reply simply follows the user's line
    case ChatFormat::kChatGlm4:
      out = "[gMASK]<sop>";
      for (const auto& m : messages) absl::StrAppend(&out, "<|", m.role, "|>\n", m.content);
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
    case ChatFormat::kLlama4:
      // As the model's Jinja template writes it: the system message trimmed, the others as they
      // are (llama.cpp trims every message).
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|header_start|>", m.role, "<|header_end|>\n\n",
                        m.role == "system" ? absl::StripAsciiWhitespace(m.content)
                                           : absl::string_view(m.content),
                        "<|eot|>");
      }
      if (add_generation_prompt) out += "<|header_start|>assistant<|header_end|>\n\n";
      break;
    case ChatFormat::kBailing2:
      // Ling 2.0's, as llama.cpp writes it: without a system message the template's default
      // one turns thinking off.
      if (messages.empty() || messages.front().role != "system") {
        out = "<role>SYSTEM</role>detailed thinking off<|role_end|>";
      }
      for (const auto& m : messages) {
        const absl::string_view role = m.role == "user"     ? "HUMAN"
                                       : m.role == "system" ? "SYSTEM"
                                                            : "ASSISTANT";
        absl::StrAppend(&out, "<role>", role, "</role>", m.content, "<|role_end|>");
      }
      if (add_generation_prompt) out += "<role>ASSISTANT</role>";
      break;
    case ChatFormat::kDots1:
      for (const auto& m : messages) {
        if (m.role == "system") {
          absl::StrAppend(&out, "<|system|>", m.content, "<|endofsystem|>");
        } else if (m.role == "user") {
          absl::StrAppend(&out, "<|userprompt|>", m.content, "<|endofuserprompt|>");
        } else {
          absl::StrAppend(&out, "<|response|>", m.content, "<|endofresponse|>");
        }
      }
      if (add_generation_prompt) out += "<|response|>";
      break;
    case ChatFormat::kHunyuanMoe:
      // No separate generation prompt: a user turn's <|extra_0|> is the reply's cue.
      for (const auto& m : messages) {
        if (m.role == "system") {
          absl::StrAppend(&out, "<|startoftext|>", m.content, "<|extra_4|>");
        } else if (m.role == "user") {
          absl::StrAppend(&out, "<|startoftext|>", m.content, "<|extra_0|>");
        } else {
          absl::StrAppend(&out, m.content, "<|eos|>");
        }
      }
      break;
    case ChatFormat::kGranite:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|start_of_role|>", m.role, "<|end_of_role|>", m.content,
                        "<|end_of_text|>\n");
      }
      if (add_generation_prompt) out += "<|start_of_role|>assistant<|end_of_role|>";
      break;
    case ChatFormat::kErnie45:
      // The template's cls_token and sep_token are these texts whatever the vocabulary's BOS
      // and EOS are.
      out = "<|begin_of_sentence|>";
      for (const auto& m : messages) {
        if (m.role == "system") absl::StrAppend(&out, m.content, "\n");
        if (m.role == "user") absl::StrAppend(&out, "User: ", m.content, "\n");
        if (m.role == "assistant") {
          absl::StrAppend(&out, "Assistant: ", m.content, "<|end_of_sentence|>");
        }
      }
      if (add_generation_prompt) out += "Assistant: ";
      break;
    case ChatFormat::kDeepSeek3:
      for (const auto& m : messages) {
        if (m.role == "system") absl::StrAppend(&out, m.content, "\n\n");
        if (m.role == "user") absl::StrAppend(&out, "<｜User｜>", m.content);
        if (m.role == "assistant") absl::StrAppend(&out, "<｜Assistant｜>", m.content, eos);
      }
      if (add_generation_prompt) out += "<｜Assistant｜>";
      break;
    case ChatFormat::kGptOss:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|start|>", m.role, "<|message|>", m.content,
                        m.role == "assistant" ? "<|return|>" : "<|end|>");
      }
      if (add_generation_prompt) out += "<|start|>assistant";
      break;
  }
  return out;
}

}  // namespace moe
