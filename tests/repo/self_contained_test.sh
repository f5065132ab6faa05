#!/usr/bin/env bash
# The repository stands alone: a clone with nothing beside it must build and pass its tests. This
# fails when a configured data path, a tool's default or a script points outside the checkout.
#   self_contained_test.sh SOURCE_DIR TESTDATA_DIR BINARY...
set -uo pipefail
src="$(cd "$1" && pwd -P)"
data="$2"
shift 2
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# 1. The reference data the tests read lives inside the checkout.
data_real="$(cd "$data" 2>/dev/null && pwd -P)" || fail "test data directory '$data' does not exist"
case "${data_real:-}/" in
  "$src"/*) ;;
  *) fail "test data directory '$data' is outside the checkout '$src'" ;;
esac

# 2. No build file, script or source names a place beside the checkout. Reference data and text
# (README.md files) may mention where copies came from; code and build files may not.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files="$(git -C "$src" ls-files --cached --others --exclude-standard)"
else
  files="$(cd "$src" && find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||')"
fi
self="tests/repo/self_contained_test.sh"
hits="$(mktemp)"
while IFS= read -r f; do
  case "$f" in
    tests/data/* | *.md | "$self") continue ;;
  esac
  [ -f "$src/$f" ] || continue
  if grep -nI -E '\.\./shared|shared/testdata|/work/' "$src/$f" >"$hits" 2>/dev/null; then
    fail "$f points outside the checkout:"
    sed 's/^/    /' "$hits"
  fi
  # Tests keep their scratch files where TMPDIR says (the test command gives each run its own
  # directory and removes it), not at a fixed /tmp path other runs share.
  case "$f" in
    tests/*.cc | tests/*.h | bindings/*)
      if grep -nI -F '"/tmp/' "$src/$f" >"$hits" 2>/dev/null; then
        fail "$f writes under a fixed /tmp path instead of the temp directory:"
        sed 's/^/    /' "$hits"
      fi
      ;;
  esac
done <<<"$files"
rm -f "$hits"

# 3. No library or tool carries a path of the machine that built it (a default that works only
# there).
for bin in "$@"; do
  [ -f "$bin" ] || { fail "$bin was not built"; continue; }
  if strings "$bin" | grep -F -e "$src" >/dev/null; then
    fail "$bin contains the build machine's source path $src:"
    strings "$bin" | grep -F -e "$src" | head -5 | sed 's/^/    /'
  fi
done

if ((failures)); then
  echo "$failures problem(s): the repository does not stand alone"
  exit 1
fi
echo "self-contained: test data in the checkout, no outside paths in $(wc -l <<<"$files") files and $# binaries"
