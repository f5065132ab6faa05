#!/usr/bin/env bash
# moe-cli run, serve-test and moe-bench over MPI ranks (--distributed): greedy tokens and text
# equal the single process's, and every rank reports its memory.
#   cli_distributed_test.sh MPIRUN MOE_CLI MOE_BENCH MODEL TEXT
set -uo pipefail
mpirun=("$1" --allow-run-as-root --oversubscribe)
cli="$2"
bench="$3"
model="$4"
text="$5"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

ids="1 450 27 9 301 77 12 5 600 41 3"
want_ids="$("$cli" run -m "$model" --prompt-ids "$ids" -n 24 -t 1)" || fail "single process (ids)"
want_text="$("$cli" run -m "$model" -p "The river ran" -n 24 --greedy -t 1 2>/dev/null)" ||
  fail "single process (text)"
[ -n "$want_ids" ] || fail "no tokens from the single process"
for np in 2 4; do
  got_ids="$("${mpirun[@]}" -np "$np" "$cli" run -m "$model" --prompt-ids "$ids" -n 24 -t 1 \
    --distributed)" || fail "-np $np (ids) exited with an error"
  [ "$got_ids" = "$want_ids" ] || fail "-np $np: tokens '$got_ids', one process '$want_ids'"
  got_text="$("${mpirun[@]}" -np "$np" "$cli" run -m "$model" -p "The river ran" -n 24 --greedy \
    -t 1 --distributed 2>/dev/null)" || fail "-np $np (text) exited with an error"
  [ "$got_text" = "$want_text" ] || fail "-np $np: text '$got_text', one process '$want_text'"
done

# Only rank 0 holds the dense weights; the others hold their experts alone and get each MoE
# layer's inputs from it. Same tokens, and a serving rank holds less than with the dense weights.
for np in 2 3; do
  got_ids="$("${mpirun[@]}" -np "$np" "$cli" run -m "$model" --prompt-ids "$ids" -n 24 -t 1 \
    --distributed --dense-on-rank0)" || fail "-np $np --dense-on-rank0 exited with an error"
  [ "$got_ids" = "$want_ids" ] || fail "-np $np --dense-on-rank0: '$got_ids', one process '$want_ids'"
done
weights_of_rank1() {
  sed -n 's/^rank 1 of 2: weights in memory \([0-9.]*\) MB.*/\1/p' <<<"$1"
}
every="$("${mpirun[@]}" -np 2 "$cli" run -m "$model" --prompt-ids "$ids" -n 4 -t 1 --distributed \
  --stats 2>&1 >/dev/null)" || fail "--stats exited with an error"
root="$("${mpirun[@]}" -np 2 "$cli" run -m "$model" --prompt-ids "$ids" -n 4 -t 1 --distributed \
  --dense-on-rank0 --stats 2>&1 >/dev/null)" || fail "--dense-on-rank0 --stats exited with an error"
w_every="$(weights_of_rank1 "$every")"
w_root="$(weights_of_rank1 "$root")"
if [ -z "$w_every" ] || [ -z "$w_root" ] ||
  ! awk -v a="$w_root" -v b="$w_every" 'BEGIN { exit !(a < b) }'; then
  fail "rank 1 with --dense-on-rank0 holds '$w_root' MB, with the dense weights '$w_every' MB"
fi

# Placed by a routing profile, the two hottest experts of each layer on both ranks.
profile="$(mktemp)"
trap 'rm -f "$profile"' EXIT
"$cli" profile -m "$model" --file "$text" -o "$profile" -t 1 >/dev/null 2>&1 || fail "moe-cli profile"
for np in 2 3; do
  got_ids="$("${mpirun[@]}" -np "$np" "$cli" run -m "$model" --prompt-ids "$ids" -n 24 -t 1 \
    --distributed --balance-experts "$profile" --expert-replicas 2)" ||
    fail "-np $np with replicas exited with an error"
  [ "$got_ids" = "$want_ids" ] || fail "-np $np with replicas: '$got_ids', one process '$want_ids'"
done

stats="$("${mpirun[@]}" -np 2 "$cli" run -m "$model" -p "The river ran" -n 8 --greedy -t 1 \
  --distributed --stats 2>&1 >/dev/null)" || fail "--stats exited with an error"
for want in "rank 0 of 2: weights in memory" "rank 1 of 2: weights in memory" "exchange "; do
  grep -q "$want" <<<"$stats" || fail "--stats does not say '$want': $stats"
done

out="$("${mpirun[@]}" -np 2 "$bench" -m "$model" -t 1 -p 16 -n 8 -r 1 --bandwidth-gib 0.01 \
  --distributed)" || fail "moe-bench --distributed exited with an error"
for want in "rank 1 of 2: weights in memory" "^pp16 " "^tg8 " "exchange: "; do
  grep -q "$want" <<<"$out" || fail "moe-bench --distributed does not print '$want': $out"
done
out="$("${mpirun[@]}" -np 2 "$bench" -m "$model" -t 1 -p 16 -n 8 -r 1 --bandwidth-gib 0.01 \
  --distributed --dense-on-rank0)" || fail "moe-bench --distributed --dense-on-rank0 exited with an error"
grep -q "^tg8 " <<<"$out" || fail "moe-bench --dense-on-rank0 does not print tg8: $out"

# The batching engine over ranks (dense weights on rank 0): several clients' greedy requests get
# the single process's texts; without --dense-on-rank0 it refuses with a reason.
requests="$(mktemp)"
trap 'rm -f "$profile" "$requests"' EXIT
printf '%s\n' "The river ran" "Once upon a time" '{"prompt": "She said", "max_tokens": 5}' \
  "In the morning the" "A man came" >"$requests"
texts() { python3 -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line)
    if "request" in j: print(j["request"], repr(j.get("text")))'; }
want_served="$("$cli" serve-test -m "$model" -r "$requests" -c 3 -n 12 -t 1 --json | texts)" ||
  fail "serve-test in one process"
[ "$(wc -l <<<"$want_served")" -eq 5 ] || fail "serve-test in one process: '$want_served'"
for np in 2 3; do
  got_served="$("${mpirun[@]}" -np "$np" "$cli" serve-test -m "$model" -r "$requests" -c 3 -n 12 \
    -t 1 --json --distributed --dense-on-rank0 | texts)" || fail "serve-test -np $np exited with an error"
  [ "$got_served" = "$want_served" ] || fail "serve-test -np $np: '$got_served', one process '$want_served'"
done
refused="$("${mpirun[@]}" -np 2 "$cli" serve-test -m "$model" -r "$requests" -c 2 -n 4 -t 1 \
  --distributed 2>&1)" && fail "serve-test over ranks with the dense weights everywhere ran"
grep -q "dense weights on rank 0" <<<"$refused" || fail "serve-test refused without the reason: $refused"
out="$("${mpirun[@]}" -np 2 "$bench" -m "$model" -t 1 -p 16 -n 8 --parallel 1,3 --distributed \
  --dense-on-rank0)" || fail "moe-bench --parallel --distributed exited with an error"
for want in "exchanged KB/token" "rank 1 of 2: weights in memory" "^    3 "; do
  grep -q "$want" <<<"$out" || fail "moe-bench --parallel --distributed does not print '$want': $out"
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
