#!/usr/bin/env bash
# Every family's PyTorch CSV passes a checker of torch.distributed.pipelining's _load_csv and
# _validate_schedule rules; every Chrome trace parses with one event per op; JSON re-reads.
set -eu
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# The checker itself must reject what PyTorch rejects.
printf '0F0,0W0,0I0\n' > "$tmp/bad.csv"
if /usr/bin/python3 "$here/check_pytorch_csv.py" "$tmp/bad.csv" --ranks 1 --stages 1 --microbatches 1 >/dev/null; then
  echo "FAIL: the CSV checker accepted W before I"; failures=$((failures + 1))
fi

"$bin" families --json > "$tmp/families.json"
for row in $(/usr/bin/python3 -c 'import json,sys; [print("%s:%d" % (f["name"], f["chunks_per_device"])) for f in json.load(open(sys.argv[1]))["families"]]' "$tmp/families.json"); do
  family=${row%%:*}; v=${row##*:}
  "$bin" export --family "$family" --format csv --drop-memory-ops -o "$tmp/$family.csv" 2>"$tmp/$family.notes"
  if /usr/bin/python3 "$here/check_pytorch_csv.py" "$tmp/$family.csv" --ranks 4 --stages $((4 * v)) --microbatches 8; then :; else
    echo "FAIL $family: CSV rejected"; failures=$((failures + 1))
  fi
  "$bin" export --family "$family" --format trace -o "$tmp/$family.trace.json"
  "$bin" export --family "$family" --format json -o "$tmp/$family.json"
  if /usr/bin/python3 - "$tmp/$family.trace.json" "$tmp/$family.json" <<'PY'; then :; else echo "FAIL $family: trace"; failures=$((failures + 1)); fi
import json, sys
trace = json.load(open(sys.argv[1]))
schedule = json.load(open(sys.argv[2]))
ops = sum(len(d["compute"]) + len(d["offloads"]) + len(d["reloads"]) for d in schedule["devices"])
spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
assert len(spans) == ops, (len(spans), ops)
assert {e["pid"] for e in spans} == set(range(len(schedule["devices"])))
assert all(e["dur"] > 0 for e in spans if e["cat"] in ("F", "B", "W", "BW", "R"))
assert any(e["ph"] == "C" and e["name"] == "memory" for e in trace["traceEvents"])
PY
  # The exported JSON simulates to the same figures as the family itself.
  "$bin" simulate --schedule "$tmp/$family.json" --json > "$tmp/$family.sim.json" || [ $? -eq 3 ]
done
grep -q "recompute" "$tmp/1f1b-recompute.notes" || { echo "FAIL: recompute not noted"; failures=$((failures + 1)); }
grep -q "may not fit" "$tmp/pipeoffload.notes" || { echo "FAIL: dropped offloads without a warning"; failures=$((failures + 1)); }
# Without --drop-memory-ops a schedule with recomputes or offloads is refused, naming them.
for family in 1f1b-recompute pipeoffload; do
  if "$bin" export --family "$family" --format csv -o "$tmp/refused.csv" 2>"$tmp/refused.err"; then
    echo "FAIL $family: CSV export dropped memory ops silently"; failures=$((failures + 1))
  elif ! grep -q "recompute/offload op(s) (\(R\|OFFLOAD\)" "$tmp/refused.err"; then
    echo "FAIL $family: refusal does not name the ops: $(cat "$tmp/refused.err")"; failures=$((failures + 1))
  fi
done
"$bin" compare --json > "$tmp/compare.json" || true
/usr/bin/python3 - "$tmp" <<'PY' || { echo "FAIL: exported schedules simulate differently"; failures=$((failures + 1)); }
import json, sys
tmp = sys.argv[1]
for fam in json.load(open(f"{tmp}/compare.json"))["families"]:
    sim = json.load(open(f"{tmp}/{fam['family']}.sim.json"))
    assert abs(sim["makespan_us"] - fam["makespan_us"]) < 1e-6, fam["family"]
PY

if [ "$failures" -gt 0 ]; then echo "$failures export check(s) failed"; exit 1; fi
echo "all export checks passed"
