#!/usr/bin/env bash
# Writes the micro models the model-file fuzz targets start from (tests/fuzz/seeds/micro-*.gguf):
# every architecture moe-synth writes, at the smallest shapes its types allow, with a made-up
# 32-piece vocabulary, so that a fuzz iteration (a copy, a parse, an import and a forward step)
# costs microseconds where the 3-6 MB test fixtures cost milliseconds.
#
#   tests/fuzz/seeds/make-micro-models.sh [BUILD_DIR]     (default: build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
synth="${1:-$here/../../../build}/tools/moe-synth"
common=(--embd 32 --heads 2 --kv-heads 1 --experts 3 --top-k 2 --ff 32 --shared-ff 32 --ctx 64
        --synthetic-vocab 32)
for arch in llama qwen2moe olmoe qwen3moe; do
  "$synth" -o "$here/micro-$arch.gguf" --arch "$arch" --type q4_0 --layers 1 "${common[@]}"
done
"$synth" -o "$here/micro-gpt-oss.gguf" --arch gpt-oss --type mxfp4_moe --layers 1 "${common[@]}" \
  --sliding-window 4
"$synth" -o "$here/micro-glm4moe.gguf" --arch glm4moe --type q4_0 --layers 2 --dense-layers 1 \
  --dense-ff 32 "${common[@]}"
"$synth" -o "$here/micro-deepseek2.gguf" --arch deepseek2 --type q4_0 --layers 2 --dense-layers 1 \
  --dense-ff 32 --kv-lora 32 --qk-nope 16 --qk-rope 16 --v-head 16 --sigmoid-routing "${common[@]}"
