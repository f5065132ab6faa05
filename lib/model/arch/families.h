// The architecture files of this folder, for the registry (architecture.cc) alone.
#pragma once

#include "lib/model/arch/architecture.h"

namespace moe {

const Architecture& LlamaArchitecture();
const Architecture& Qwen2MoeArchitecture();
const Architecture& OlmoeArchitecture();
const Architecture& Qwen3MoeArchitecture();
const Architecture& Glm4MoeArchitecture();
const Architecture& Deepseek2Architecture();
const Architecture& GptOssArchitecture();
const Architecture& Qwen3VlMoeArchitecture();
const Architecture& Ernie45MoeArchitecture();
const Architecture& GraniteMoeArchitecture();
const Architecture& Llama4Architecture();
const Architecture& BailingMoe2Architecture();
const Architecture& MinimaxM2Architecture();
const Architecture& Dots1Architecture();
const Architecture& Lfm2MoeArchitecture();
const Architecture& HunyuanMoeArchitecture();
const Architecture& GraniteHybridArchitecture();
const Architecture& DeepseekArchitecture();
const Architecture& NemotronHMoeArchitecture();
const Architecture& Qwen35MoeArchitecture();
const Architecture& Qwen3NextArchitecture();

}  // namespace moe
