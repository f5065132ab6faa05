#!/usr/bin/env bash
# Every field of the C ABI's params structs is reachable from every binding: the fields are read
# from moe_c.h itself, each must be listed in bindings/params_fields.tsv, and the name listed for
# each language must be a public name in that binding's sources. A field added to the header
# without a binding counterpart fails here.
#   binding_fields_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
header="$src/include/moe_c.h"
map="$src/bindings/params_fields.tsv"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Fields of each "typedef struct moe_*_params { ... } moe_*_params;" block, struct_size aside.
fields="$(awk '
  /^typedef struct moe_[a-z]+_params \{/ { name = $3; inside = 1; comment = 0; next }
  inside && /^\}/ { inside = 0; next }
  inside {
    line = $0
    # Drop comments, those that span lines too.
    out = ""
    while (line != "") {
      if (comment) {
        end = index(line, "*/")
        if (end == 0) { line = ""; break }
        line = substr(line, end + 2)
        comment = 0
      } else {
        start = index(line, "/*")
        if (start == 0) { out = out line; line = ""; break }
        out = out substr(line, 1, start - 1)
        line = substr(line, start + 2)
        comment = 1
      }
    }
    if (out !~ /;/) next
    sub(/;.*$/, "", out)
    n = split(out, parts, /[ *]+/)
    field = parts[n]
    if (field != "" && field != "struct_size") print name "\t" field
  }' "$header")"
[ -n "$fields" ] || fail "no params fields found in $header"

declare -A dirs=([java]="$src/bindings/java/src" [csharp]="$src/bindings/csharp/src"
                 [go]="$src/bindings/go")
declare -A column=([java]=3 [csharp]=4 [go]=5)
checked=0
while IFS=$'\t' read -r struct field; do
  row="$(grep -P "^${struct}\t${field}\t" "$map")"
  if [ -z "$row" ]; then
    fail "$struct.$field is in moe_c.h but not in bindings/params_fields.tsv (add it to every binding)"
    continue
  fi
  for lang in java csharp go; do
    name="$(cut -f "${column[$lang]}" <<<"$row")"
    if [[ "$name" == =* ]]; then
      grep -qP "^${struct}\t${name#=}\t" "$map" || fail "$struct.$field: $lang refers to unknown ${name#=}"
      continue
    fi
    if ! grep -rqw --include='*.java' --include='*.cs' --include='*.go' -- "$name" "${dirs[$lang]}"; then
      fail "$struct.$field: the $lang binding has no '$name'"
    fi
  done
  checked=$((checked + 1))
done <<<"$fields"

# And nothing listed that the header no longer has.
while IFS=$'\t' read -r struct field _; do
  [[ -z "$struct" || "$struct" == \#* ]] && continue
  grep -qP "^${struct}\t${field}$" <<<"$fields" || fail "params_fields.tsv lists $struct.$field, which moe_c.h does not have"
done <"$map"

if ((failures)); then
  echo "$failures problem(s)"
  exit 1
fi
echo "every one of the $checked params fields of moe_c.h is reachable from Java, C# and Go"
