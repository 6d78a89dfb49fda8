#!/usr/bin/env bash
# Every benchmark-suite instance optimized as a torch.distributed.pipelining user must run it
# (--placement linear --no-offload --no-recompute): the answer, fitting or not, is linear and
# holds no offload, reload, WAIT or recompute.
#   test_suite_rules.sh BENCH_SUITE OPTPIPE SUITE_JSON
set -uo pipefail
bench=$1 bin=$2 suite=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Only the problems are wanted: the suite's own verdicts at 0.01 s are not this test's.
"$bench" --suite "$suite" --time-limit 0.01 --noise-samples 0 --problems-out "$tmp/problems" > /dev/null || true
failures=0 count=0
for problem in "$tmp"/problems/*.json; do
  name=$(basename "$problem" .json)
  count=$((count + 1))
  "$bin" optimize -p "$problem" --placement linear --no-offload --no-recompute --max-evaluations 300 -q --json \
    -o "$tmp/$name.schedule.json" > "$tmp/$name.out.json"
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then echo "FAIL $name: exit $rc"; failures=$((failures + 1)); continue; fi
  /usr/bin/python3 - "$tmp/$name.out.json" "$tmp/$name.schedule.json" "$rc" <<'PY' || { echo "FAIL $name"; failures=$((failures + 1)); }
import json, os, sys
out = json.load(open(sys.argv[1]))
assert out["placement"] == "linear", out["placement"]
assert out["rules"]["placements"] == ["linear"] and not out["rules"]["offload"] and not out["rules"]["recompute"]
if sys.argv[3] == "3":
    assert out["outcome"] == "infeasible" and out["needed_budget_bytes"], out["outcome"]
if os.path.exists(sys.argv[2]):
    s = json.load(open(sys.argv[2]))
    assert s["placement"] == "linear"
    for d in s["devices"]:
        assert not d["offloads"] and not d["reloads"], "offloads"
        assert not [op for op in d["compute"] if op.startswith(("R", "WAIT"))], "recompute or wait"
PY
done
[ "$count" -ge 20 ] || { echo "FAIL: only $count suite problems"; failures=$((failures + 1)); }
[ $failures -eq 0 ] && echo "ok   $count suite instances: linear, no offload, no recompute" || echo "$failures failure(s)"
exit $((failures > 0))
