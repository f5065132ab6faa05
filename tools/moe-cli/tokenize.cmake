# Tokenizer commands for moe-cli and the tokenizer benchmark; included by tools/CMakeLists.txt
# (and by tests/tokenizer when tools are not built). Paths are relative to this file.
if(NOT TARGET moe_cli_tokenize)
  add_library(moe_cli_tokenize STATIC ${CMAKE_CURRENT_LIST_DIR}/tokenize_command.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/token_ids.cc)
  target_include_directories(moe_cli_tokenize PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(moe_cli_tokenize PUBLIC moe_tokenizer moe_import absl::strings)

  add_executable(moe-tokenizer-bench ${CMAKE_CURRENT_LIST_DIR}/../tokenizer_bench.cc)
  target_link_libraries(moe-tokenizer-bench PRIVATE moe_tokenizer moe_import)
endif()
