#!/usr/bin/env bash
# Installs every build and test dependency of libmoe on Debian 12. Idempotent: when all packages
# are present it only checks and returns.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libabsl-dev libflatbuffers-dev flatbuffers-compiler
  libgtest-dev libgmock-dev
  libicu-dev nlohmann-json3-dev libcli11-dev
  # bindings/: SWIG; Java (JDK + JUnit 5); C# (Mono compiler/runtime + NUnit 2.6); Go
  swig default-jdk-headless junit5 mono-mcs mono-runtime nunit-console libnunit-cil-dev golang-go
  libsentencepiece-dev
  # The Prometheus client's parser checks the metrics text (tests/api/check_metrics_text.py).
  python3-prometheus-client
  # moe-cli stats --plot draws its heatmap with cairo, labels in DejaVu Sans.
  libcairo2-dev fonts-dejavu-core
  # lib/dist: expert parallelism over processes and nodes (Open MPI; tests run under mpirun).
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
updated=0
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

# Node.js runs the reference tokenizers in the tests; machine images usually have it (often not
# Debian's build). Install Debian's only where there is none, and go on without it if that fails:
# those tests then skip and say why.
if ! command -v npm >/dev/null 2>&1; then
  ((updated)) || $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nodejs npm ||
    echo "install-deps: could not install Node.js; the npm reference tokenizer tests will skip"
fi
