// What a Hugging Face import must equal: the GGUF llama.cpp's converter would have made from the
// same checkpoint. Shared by the fixture checkpoints and those written from moe-synth's files.
#pragma once

#include <string>

#include "lib/model/model_spec.h"

namespace moe::testing {

// Every hyper-parameter, one "name=value" after another, for a failure message.
std::string DescribeHParams(const HParams& h);

// The import states the GGUF's model: the same architecture and hyper-parameters, and every
// tensor the runtime reads with the GGUF's shape, layer and expert, holding its values (MXFP4
// the very bytes, anything else as F32 rows equal to the GGUF's dequantized rows). gtest
// failures otherwise.
void ExpectImportStatesTheGguf(const ModelSpec& hf, const ModelSpec& gguf);

}  // namespace moe::testing
