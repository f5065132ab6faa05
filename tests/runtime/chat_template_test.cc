// Chat templates: recognising a model's Jinja template, formatting by family, and the names.
#include "lib/runtime/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi."}, {"user", "Bye"}};

// The bundled model's own template (models/tiny-brown-moe/tokenizer_config.json).
std::string BundledTemplate() {
  std::ifstream f(std::filesystem::path(MOE_SOURCE_DIR) / "models" / "tiny-brown-moe" /
                  "tokenizer_config.json");
  return nlohmann::json::parse(f)["chat_template"].get<std::string>();
}

TEST(ChatTemplateTest, TheBundledModelsTemplateIsThePlainFamily) {
  auto format = DetectChatFormat(BundledTemplate());
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, ChatFormat::kPlain);
  // Written with the newline as a Jinja escape and other line breaks: the same family.
  EXPECT_EQ(*DetectChatFormat(
                "{{ bos_token }}{% for message in messages %}\n"
                "  {% if message['role'] == 'user' %}{{ message['content'] + '\\n' }}\n"
                "  {% else %}{{ message['content'] + eos_token }}{% endif %}\n{% endfor %}"),
            ChatFormat::kPlain);
}

TEST(ChatTemplateTest, PlainPutsTheReplyAfterTheUsersLine) {
  auto text = FormatChat(ChatFormat::kPlain, kConversation, /*add_generation_prompt=*/true, "</s>");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "Be brief.</s>Hello\nHi.</s>Bye\n");
}

TEST(ChatTemplateTest, NamesAndUnknownTemplatesUseOneWording) {
  EXPECT_EQ(*ChatFormatFromName("plain"), ChatFormat::kPlain);
  EXPECT_EQ(*ChatFormatFromName("chatml"), ChatFormat::kChatMl);
  auto by_name = ChatFormatFromName("klingon");
  ASSERT_FALSE(by_name.ok());
  EXPECT_NE(by_name.status().message().find("unknown chat template 'klingon'"), std::string::npos)
      << by_name.status();
  auto by_text = DetectChatFormat("{{ something nobody knows }}");
  ASSERT_FALSE(by_text.ok());
  EXPECT_NE(by_text.status().message().find("unknown chat template"), std::string::npos);
  // Both list the same known names.
  EXPECT_NE(by_name.status().message().find("plain"), std::string::npos);
  EXPECT_NE(by_text.status().message().find("plain"), std::string::npos);
  EXPECT_EQ(DetectChatFormat("").status().code(), absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, FamiliesAreRecognisedByTheirMarkers) {
  EXPECT_EQ(*DetectChatFormat("{{'<|im_start|>' + message['role']}}"), ChatFormat::kChatMl);
  EXPECT_EQ(*DetectChatFormat("<|start_header_id|>"), ChatFormat::kLlama3);
  EXPECT_EQ(*DetectChatFormat("[INST] x [/INST]"), ChatFormat::kMistral);
  EXPECT_EQ(*DetectChatFormat("[INST] <<SYS>> [/INST]"), ChatFormat::kLlama2);
  // The newer families, ahead of the older ones whose markers their templates also carry
  // (GLM-4.5's <|user|>/<|assistant|> are Zephyr's; DeepSeek-V3's text says "User: " too).
  EXPECT_EQ(*DetectChatFormat("[gMASK]<sop>{%- for m in messages -%}<|user|>\n{{ m.content }}"
                              "<|assistant|>{%- endfor -%}"),
            ChatFormat::kChatGlm4);
  EXPECT_EQ(*DetectChatFormat("{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>'}} "
                              "User: Assistant:"),
            ChatFormat::kDeepSeek3);
  EXPECT_EQ(*DetectChatFormat("<|start|>system<|message|>Reasoning: medium<|end|>"
                              "{{ '<|start|>assistant<|channel|>final<|message|>' }}"),
            ChatFormat::kGptOss);
  EXPECT_EQ(*ChatFormatFromName("chatglm4"), ChatFormat::kChatGlm4);
  EXPECT_EQ(*ChatFormatFromName("deepseek3"), ChatFormat::kDeepSeek3);
  EXPECT_EQ(*ChatFormatFromName("gpt-oss"), ChatFormat::kGptOss);
  // ERNIE-4.5's carries DeepSeek's "User: " and "Assistant: " with other separators.
  EXPECT_EQ(*DetectChatFormat("{%- if not cls_token is defined -%}{%- set cls_token = "
                              "\"<|begin_of_sentence|>\" -%}{%- endif -%}{{- \"User: \" + "
                              "message[\"content\"] + \"\\n\" -}}{{- \"Assistant: \" -}}"),
            ChatFormat::kErnie45);
  EXPECT_EQ(*ChatFormatFromName("ernie4.5"), ChatFormat::kErnie45);
  EXPECT_EQ(*DetectChatFormat("{%- for message in messages %}{{- '<|start_of_role|>' + "
                              "message['role'] + '<|end_of_role|>' + message['content'] + "
                              "'<|end_of_text|>\n' }}{%- endfor %}"),
            ChatFormat::kGranite);
  EXPECT_EQ(*ChatFormatFromName("granite"), ChatFormat::kGranite);
  EXPECT_EQ(*DetectChatFormat("{{- bos_token }}{%- for message in messages %}{{- "
                              "'<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' "
                              "}}{{- message['content'] }}{{- \"<|eot|>\" }}{%- endfor %}"),
            ChatFormat::kLlama4);
  EXPECT_EQ(*ChatFormatFromName("llama4"), ChatFormat::kLlama4);
  EXPECT_EQ(*DetectChatFormat("{%- for message in messages %}{%- if message['role'] == 'user' %}"
                              "{{- '<role>HUMAN</role>' + message['content'] + '<|role_end|>' }}"
                              "{%- endif %}{%- endfor %}{{- '<role>ASSISTANT</role>' }}"),
            ChatFormat::kBailing2);
  EXPECT_EQ(*ChatFormatFromName("bailing2"), ChatFormat::kBailing2);
  EXPECT_EQ(*DetectChatFormat("{% for message in messages %}{% if message['role'] == 'user' %}"
                              "{{ '<|userprompt|>' + message['content'] + '<|endofuserprompt|>' }}"
                              "{% endif %}{% endfor %}{{ '<|response|>' }}"),
            ChatFormat::kDots1);
  EXPECT_EQ(*ChatFormatFromName("dots1"), ChatFormat::kDots1);
}

// dots.llm1's template, compared with llama.cpp's llama_chat_apply_template on the same messages
// (its DOTS1 format, detected from the template's <|endofuserprompt|>).
TEST(ChatTemplateTest, Dots1FormatsAsLlamaCppWrites) {
  const std::vector<ChatMessage> chat = {
      {"system", " Be brief.\n"}, {"user", "Hello "}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kDots1, chat, true, "<|endofresponse|>"),
            "<|system|> Be brief.\n<|endofsystem|><|userprompt|>Hello <|endofuserprompt|>"
            "<|response|>Hi.<|endofresponse|><|userprompt|>Bye<|endofuserprompt|><|response|>");
  EXPECT_EQ(*FormatChat(ChatFormat::kDots1, {{"user", "Hello"}}, false, "<|endofresponse|>"),
            "<|userprompt|>Hello<|endofuserprompt|>");
}

// Hunyuan-A13B's, compared with llama.cpp's llama_chat_apply_template("hunyuan-moe", ...) on the
// same messages: each user turn ends with the reply's cue (<|extra_0|>), so asking for the
// generation prompt adds nothing; detected from a template holding <|extra_0|> and <|extra_4|>.
TEST(ChatTemplateTest, HunyuanMoeFormatsAsLlamaCppWrites) {
  const std::vector<ChatMessage> chat = {
      {"system", " Be brief.\n"}, {"user", "Hello "}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kHunyuanMoe, chat, true, "<|eos|>"),
            "<|startoftext|> Be brief.\n<|extra_4|><|startoftext|>Hello <|extra_0|>Hi.<|eos|>"
            "<|startoftext|>Bye<|extra_0|>");
  EXPECT_EQ(*FormatChat(ChatFormat::kHunyuanMoe, {{"user", "Hello"}}, false, "<|eos|>"),
            "<|startoftext|>Hello<|extra_0|>");
  EXPECT_EQ(*DetectChatFormat("{% for m in messages %}{% if m['role'] == 'system' %}"
                              "{{ '<|startoftext|>' + m['content'] + '<|extra_4|>' }}{% else %}"
                              "{{ '<|startoftext|>' + m['content'] + '<|extra_0|>' }}{% endif %}"
                              "{% endfor %}"),
            ChatFormat::kHunyuanMoe);
  EXPECT_EQ(*ChatFormatFromName("hunyuan-moe"), ChatFormat::kHunyuanMoe);
}

// Ling 2.0's template, compared with llama.cpp's llama_chat_apply_template("bailing2", ...) on the
// same messages: roles in capitals (user: HUMAN), contents as they are, and without a system
// message the template's own, which turns thinking off.
TEST(ChatTemplateTest, Bailing2FormatsAsLlamaCppWrites) {
  const std::vector<ChatMessage> chat = {
      {"system", " Be brief.\n"}, {"user", "Hello "}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kBailing2, chat, true, "<|role_end|>"),
            "<role>SYSTEM</role> Be brief.\n<|role_end|><role>HUMAN</role>Hello <|role_end|>"
            "<role>ASSISTANT</role>Hi.<|role_end|><role>HUMAN</role>Bye<|role_end|>"
            "<role>ASSISTANT</role>");
  EXPECT_EQ(*FormatChat(ChatFormat::kBailing2, {{"user", "Hello"}}, false, "<|role_end|>"),
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hello"
            "<|role_end|>");
}

// Llama 4's template: role headers, each message closed by <|eot|>; the system message is
// trimmed, the others kept as they are (the model's Jinja; llama.cpp trims them all).
TEST(ChatTemplateTest, Llama4FormatsAsItsTemplateWrites) {
  const std::vector<ChatMessage> chat = {
      {"system", " Be brief.\n"}, {"user", "Hello "}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kLlama4, chat, true, "<|eot|>"),
            "<|header_start|>system<|header_end|>\n\nBe brief.<|eot|>"
            "<|header_start|>user<|header_end|>\n\nHello <|eot|>"
            "<|header_start|>assistant<|header_end|>\n\nHi.<|eot|>"
            "<|header_start|>user<|header_end|>\n\nBye<|eot|>"
            "<|header_start|>assistant<|header_end|>\n\n");
  EXPECT_EQ(*FormatChat(ChatFormat::kLlama4, {{"user", "Hello"}}, false, "<|eot|>"),
            "<|header_start|>user<|header_end|>\n\nHello<|eot|>");
}

// ERNIE-4.5's template (not built into llama.cpp): its cls_token first, the system text on a
// line, "User: " lines, replies after "Assistant: " closed by its sep_token.
TEST(ChatTemplateTest, Ernie45FormatsAsItsTemplateWrites) {
  const std::vector<ChatMessage> chat = {
      {"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kErnie45, chat, true, "</s>"),
            "<|begin_of_sentence|>Be brief.\nUser: Hello\nAssistant: Hi.<|end_of_sentence|>"
            "User: Bye\nAssistant: ");
  EXPECT_EQ(*FormatChat(ChatFormat::kErnie45, {{"user", "Hello"}}, false, "</s>"),
            "<|begin_of_sentence|>User: Hello\n");
}

// The prompts llama.cpp's llm_chat_apply_template writes for these families.
TEST(ChatTemplateTest, NewerFamiliesFormatAsLlamaCppDoes) {
  const std::vector<ChatMessage> chat = {
      {"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi."}, {"user", "Bye"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kChatGlm4, chat, true, "<|endoftext|>"),
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHello<|assistant|>\nHi.<|user|>\nBye"
            "<|assistant|>\n");
  EXPECT_EQ(*FormatChat(ChatFormat::kDeepSeek3, chat, true, "<｜end▁of▁sentence｜>"),
            "Be brief.\n\n<｜User｜>Hello<｜Assistant｜>Hi.<｜end▁of▁sentence｜><｜User｜>Bye"
            "<｜Assistant｜>");
  EXPECT_EQ(*FormatChat(ChatFormat::kGptOss, chat, true, "<|return|>"),
            "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hello<|end|>"
            "<|start|>assistant<|message|>Hi.<|return|><|start|>user<|message|>Bye<|end|>"
            "<|start|>assistant");
  EXPECT_EQ(*FormatChat(ChatFormat::kGranite, chat, true, "<|end_of_text|>"),
            "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>Hi.<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>Bye<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>");
  EXPECT_EQ(*FormatChat(ChatFormat::kGptOss, chat, false, "<|return|>"),
            "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hello<|end|>"
            "<|start|>assistant<|message|>Hi.<|return|><|start|>user<|message|>Bye<|end|>");
}

}  // namespace
}  // namespace moe
