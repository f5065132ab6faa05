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
}

}  // namespace
}  // namespace moe
