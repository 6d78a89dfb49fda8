#!/usr/bin/env bash
# End-to-end checks of the optpipe binary: exit codes, JSON output, error messages.
set -u
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

check() {  # check NAME EXPECTED_RC EXPECTED_TEXT_OR_EMPTY -- command...
  local name="$1" want_rc="$2" want_text="$3"
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, wanted $want_rc"; echo "$out" | head -20; failures=$((failures + 1)); return
  fi
  if [ -n "$want_text" ] && ! grep -qF -- "$want_text" <<<"$out"; then
    echo "FAIL $name: output lacks '$want_text'"; echo "$out" | head -20; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

json_ok() {  # the command's stdout must be exactly one JSON object
  python3 -c 'import json,sys; o=json.load(sys.stdin); assert isinstance(o, dict)' 
}

check "families lists zb-v" 0 "zb-v" -- "$bin" families
check "compare default" 0 "1f1b" -- "$bin" compare
"$bin" compare --json > "$tmp/compare.json" || { echo "FAIL compare --json exit"; failures=$((failures + 1)); }
json_ok < "$tmp/compare.json" && echo "ok   compare --json parses" || { echo "FAIL compare --json is not one JSON object"; failures=$((failures + 1)); }
"$bin" families --json > "$tmp/families.json"
python3 - "$tmp/compare.json" "$tmp/families.json" <<'PY' || failures=$((failures + 1))
import json, sys
o = json.load(open(sys.argv[1]))
published = [f for f in o["families"] if f.get("tuning", "as published") == "as published"]
names = list(dict.fromkeys(f["family"] for f in published))  # the interleaved ones at every count
want = [f["name"] for f in json.load(open(sys.argv[2]))["families"]]
assert len(want) >= 11 and "1f1b" in want and "gpipe" in want, want
assert names == want, (names, want)
fam = {f["family"]: f for f in published}
D, M, T = 4, 8, 10000.0
assert abs(fam["1f1b"]["makespan_us"] - (M + D - 1) * 3 * T) < 1e-6
assert abs(fam["gpipe"]["makespan_us"] - (M + D - 1) * 3 * T) < 1e-6
assert fam["1f1b"]["fits_budget"] and not fam["gpipe"]["fits_budget"]
# Practitioner tunings follow a family that overflows, and fit: GPipe recomputing its one layer
# per stage runs F, then B + R + W, each over M + D - 1 slots.
tuned = [f for f in o["families"] if f not in published]
by_label = {f["label"]: f for f in published}
assert tuned and all(f["fits_budget"] and f["label"].startswith(f["family"]) and " +" in f["label"] and
                     not by_label[f["label"].split(" +")[0]]["fits_budget"] for f in tuned), tuned
gr = [f for f in tuned if f["family"] == "gpipe" and f["tuning"] == "recompute"]
assert gr and gr[0]["recompute_layers"] == [1] * D, gr
assert abs(gr[0]["makespan_us"] - (M + D - 1) * 4 * T) < 1e-6, gr[0]["makespan_us"]
print("ok   compare --json matches the closed forms")
PY

check "problem writes JSON" 0 "" -- "$bin" problem -o "$tmp/p.json"
check "schedule to file" 0 "wrote" -- "$bin" schedule --family zb-v --problem "$tmp/p.json" -o "$tmp/zbv.json"
check "simulate the V schedule on the linear problem" 0 "makespan" -- "$bin" simulate --problem "$tmp/p.json" --schedule "$tmp/zbv.json"
"$bin" simulate --schedule "$tmp/zbv.json" --json | json_ok && echo "ok   simulate --json parses" || { echo "FAIL simulate --json"; failures=$((failures + 1)); }
check "over budget exits 3" 3 "OVER BUDGET" -- bash -c "'$bin' schedule --family gpipe -o '$tmp/g.json' >/dev/null && '$bin' simulate --schedule '$tmp/g.json'"

# Bad input: exit 1 and a message naming the field.
echo '{"num_devices": 2,' > "$tmp/bad.json"
check "malformed JSON" 1 "malformed JSON" -- "$bin" compare --problem "$tmp/bad.json"
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); p["stages"][1]["t_f_us"]=-5; json.dump(p, open("'"$tmp/neg.json"'","w"))'
check "negative duration" 1 "stages[1].t_f_us" -- "$bin" compare --problem "$tmp/neg.json"
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); p["speed"]=1; json.dump(p, open("'"$tmp/unk.json"'","w"))'
check "unknown field" 1 "speed: unknown field" -- "$bin" compare --problem "$tmp/unk.json"
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); p["num_devices"]=0; json.dump(p, open("'"$tmp/zero.json"'","w"))'
check "zero devices" 1 "num_devices" -- "$bin" compare --problem "$tmp/zero.json"
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); p["devices"].pop(); json.dump(p, open("'"$tmp/len.json"'","w"))'
check "mismatched lengths" 1 "devices: must have num_devices = 4 entries, got 3" -- "$bin" compare --problem "$tmp/len.json"
check "missing file" 1 "cannot read" -- "$bin" compare --problem "$tmp/nope.json"
check "unknown family" 1 "unknown family" -- "$bin" schedule --family nosuch
python3 -c 'import json; s=json.load(open("'"$tmp/zbv.json"'")); s["devices"][0]["compute"].pop(); json.dump(s, open("'"$tmp/short.json"'","w"))'
check "invalid schedule" 1 "is missing" -- "$bin" simulate --schedule "$tmp/short.json"

check "report writes HTML" 0 "wrote" -- "$bin" report --time-limit 2 -o "$tmp/r.html"
grep -q "<svg" "$tmp/r.html" && echo "ok   report has charts" || { echo "FAIL report has no SVG"; failures=$((failures + 1)); }
check "export svg" 0 "" -- "$bin" export --family zb-v --format svg -o "$tmp/zbv.svg"
check "export needs a schedule or a family" 2 "either --schedule" -- "$bin" export --format csv
check "report with an unknown family" 1 "unknown family" -- "$bin" report --chart nosuch

# The optimizer: fits and beats the families on a tight budget; exit 3 and what is needed when nothing fits.
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); [d.update(mem_budget_bytes=43<<30) for d in p["devices"]]; json.dump(p, open("'"$tmp/tight.json"'","w"))'
check "optimize tight budget" 0 "idle time" -- "$bin" optimize --problem "$tmp/tight.json" --max-evaluations 5000 -q -o "$tmp/opt.json"
check "optimized schedule simulates within budget" 0 "fits the budget" -- "$bin" simulate --problem "$tmp/tight.json" --schedule "$tmp/opt.json"
"$bin" optimize --problem "$tmp/tight.json" --max-evaluations 5000 --json -q > "$tmp/opt_result.json"
python3 - "$tmp/opt_result.json" <<'PY' || failures=$((failures + 1))
import json, sys
r = json.load(open(sys.argv[1]))
assert r["outcome"] in ("feasible", "optimal"), r["outcome"]
assert r["fits_budget"]
assert r["makespan_us"] < r["best_family"]["makespan_us"], (r["makespan_us"], r["best_family"])
assert r["lower_bound_us"] <= r["makespan_us"]
print("ok   optimize --json: beats the best family that fits")
PY
python3 -c 'import json; p=json.load(open("'"$tmp/p.json"'")); [d.update(mem_budget_bytes=(161<<28)) for d in p["devices"]]; json.dump(p, open("'"$tmp/nofit.json"'","w"))'
check "optimize infeasible exits 3" 3 "the frugal schedule needs" -- "$bin" optimize --problem "$tmp/nofit.json" --max-evaluations 2000 -q
check "optimize progress on stderr" 0 "candidates" -- "$bin" optimize --max-evaluations 2000

# plan: cost model → families + optimizer → one table.
check "plan" 0 "optimized" -- "$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 30GiB -q --max-evaluations 5000 -o "$tmp/plan.json" --report "$tmp/plan.html"
grep -q "Optimized" "$tmp/plan.html" && echo "ok   plan --report charts the optimized schedule" || { echo "FAIL plan report"; failures=$((failures + 1)); }
"$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 30GiB -q --max-evaluations 5000 --json -o "$tmp/plan2.json" > "$tmp/plan_result.json"
python3 - "$tmp/plan_result.json" <<'PY' || failures=$((failures + 1))
import json, sys
r = json.load(open(sys.argv[1]))
rows = {x["schedule"]: x for x in r["schedules"]}
assert "optimized" in rows and rows["optimized"]["fits_budget"], rows.get("optimized")
fitting = [x["makespan_us"] for n, x in rows.items() if n != "optimized" and x.get("fits_budget")]
assert not fitting or rows["optimized"]["makespan_us"] <= min(fitting) + 1e-6
assert rows["optimized"]["lower_bound_us"] <= rows["optimized"]["makespan_us"]
print("ok   plan --json: the optimized schedule fits and is not slower than any fitting family")
PY
check "plan writes its problem" 0 "" -- "$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 30GiB -q --max-evaluations 2000 -o "$tmp/plan3.json" --problem-out "$tmp/plan_problem.json"
check "plan's schedule on plan's problem fits" 0 "fits the budget" -- "$bin" simulate --schedule "$tmp/plan3.json" --problem "$tmp/plan_problem.json"
check "plan unknown model" 1 "unknown model" -- "$bin" plan --model gpt-9000
check "plan bad budget" 1 "--budget" -- "$bin" plan --budget lots
check "plan bad cluster" 1 "unknown GPU" -- "$bin" plan --cluster 8xtpu
check "plan static memory over budget, any partition" 3 "is 1027.85 GiB, above the devices' budgets together, 960.00 GiB, whatever the partition" -- "$bin" plan --model llama2-70b --cluster 16xh100 --budget 60GiB -q
check "plan static memory over budget, pinned partition" 3 "device 0's static memory alone (parameters, gradients, optimizer state) is 67.66 GiB" -- "$bin" plan --model llama2-70b --cluster 16xh100 --budget 60GiB --partition even -q
check "plan too small a budget" 3 "nothing found fits" -- "$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 27.5GiB -q --max-evaluations 2000

# Every row's bound holds for that row: families over budget are bound by the budget-free bound, so
# no printed gap is negative (it was for zb-h2 and dualpipe-v here).
"$bin" plan --model llama2-70b --cluster 16xh100 --budget 70GiB -q --max-evaluations 300 --json -o "$tmp/none.json" > "$tmp/plan70.json" || [ $? -eq 3 ] || { echo "FAIL plan 70b exit"; failures=$((failures + 1)); }
python3 - "$tmp/plan70.json" <<'PY' || failures=$((failures + 1))
import json, sys
o = json.load(open(sys.argv[1]))
rows = [r for r in o["schedules"] if "makespan_us" in r]
assert any(not r["fits_budget"] for r in rows), "the test needs rows over budget"
for r in rows:
    assert r["lower_bound_us"] <= r["makespan_us"] * (1 + 1e-9), r
    assert r["gap"] >= 0, r
print("ok   plan --json: every row's gap is non-negative, over budget or not")
# The answer's partition: llama2-70b's 80 layers over its stages, the embedding first, the head last.
part, opt = o["partition"], next(r for r in o["schedules"] if r["schedule"] == "optimized")
assert o["outcome"] != "infeasible", o["outcome"]
assert sum(part["layers_per_stage"]) == 80, part
assert len(part["layers_per_stage"]) == 16 * opt["chunks_per_device"], (part, opt["chunks_per_device"])
assert part["embedding_stage"] == 0 and part["head_stage"] == len(part["layers_per_stage"]) - 1, part
print("ok   plan --json: the partition, 80 layers over the answer's stages")
PY

# The layout search: layouts ranked by throughput, each that fits under any timing, beside
# Megatron's default; --search without a batch is a usage error.
"$bin" plan --model gpt-7b --cluster 16xh100 --global-batch 64 --search --time-limit 6 -q --json > "$tmp/layouts.json" \
  || { echo "FAIL plan --search exit"; failures=$((failures + 1)); }
python3 - "$tmp/layouts.json" <<'PY' || failures=$((failures + 1))
import json, sys
o = json.load(open(sys.argv[1]))
assert o["layouts"] >= 20 and o["evaluated"] >= 1, (o["layouts"], o["evaluated"])
fit = [r for r in o["rows"] if r["status"] == "ok" and r["evaluated"] and "iteration_us" in r]
assert fit and all(r["fits_any_timing"] for r in fit), fit[:2]
assert any(r["cp"] > 1 for r in o["rows"]), "context-parallel layouts are searched"
assert [r["iteration_us"] for r in fit] == sorted(r["iteration_us"] for r in fit)
for r in o["rows"]:
    assert r["pp"] * r["tp"] * r["cp"] * r["dp"] == 16 and r["num_microbatches"] * r["microbatch_size"] * r["dp"] == 64, r
d = o["megatron_default"]
assert d["tp"] == 8 and d["schedule"].startswith("1f1b"), d
assert o["speedup_vs_megatron_default"] >= 1 - 1e-9, o["speedup_vs_megatron_default"]
print("ok   plan --search ranks layouts that fit under any timing, beside Megatron's default")
PY
check "plan --search needs a batch" 2 "--global-batch" -- "$bin" plan --search
check "plan --search refuses the degrees it chooses" 2 "--tp: --search chooses" -- \
  "$bin" plan --model gpt-7b --cluster 16xh100 --global-batch 64 --search --tp 2
check "plan --search refuses microbatches" 2 "--microbatches: --search chooses" -- \
  "$bin" plan --model gpt-7b --cluster 16xh100 --global-batch 64 --search --microbatches 8
check "plan tp beyond a node" 1 "within a node" -- "$bin" plan --model gpt-7b --cluster 16xh100 --tp 16
hf="$(cd "$(dirname "$0")" && pwd)/data/hf"
check "plan from a Hugging Face config" 0 "optimized" -- "$bin" plan --model "$hf/llama3-8b.json" --cluster 8xh100 --max-evaluations 200 -q -o "$tmp/hf.json"
check "an MoE config is refused, naming the key" 1 "num_local_experts" -- "$bin" plan --model "$hf/mixtral-8x7b.json"
check "a window shorter than the sequence is refused" 1 "sliding_window 4096" -- "$bin" plan --model "$hf/mistral-7b-v0.1.json"
check "--seq-len within the window plans" 0 "× 4096 tokens" -- "$bin" plan --model "$hf/mistral-7b-v0.1.json" --seq-len 4096 --cluster 8xh100 --max-evaluations 200 -q -o "$tmp/hf.json"
check "a missing config file" 1 "no-such.json" -- "$bin" plan --model no-such.json

# Usage errors: exit 2.
check "optimize bad threads" 2 "" -- "$bin" optimize --threads 0
check "unknown export format" 2 "" -- "$bin" export --family zb-v --format pdf
check "no subcommand" 2 "" -- "$bin"
check "unknown flag" 2 "" -- "$bin" compare --frobnicate
check "help" 0 "compare" -- "$bin" --help

if [ "$failures" -gt 0 ]; then echo "$failures CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
