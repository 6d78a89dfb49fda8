#!/usr/bin/env bash
# Every family's PyTorch CSV passes a checker of torch.distributed.pipelining's _load_csv and
# _validate_schedule rules; every Chrome trace parses with one event per op; JSON re-reads.
set -eu
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
# The frameworks' own code, where scripts/fetch_framework_sources.sh put it (setup.sh --full does).
frameworks=()
if [ -f "$(dirname "$bin")/frameworks/VERSION" ]; then
  frameworks=(--frameworks "$(dirname "$bin")/frameworks")
else
  echo "note: $(dirname "$bin")/frameworks is absent: exports checked against the transcribed rules only"
fi
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
    # export --family runs a family at its own chunk count (interleaved: 2)
    if fam["tuning"] != "as published" or fam["label"] not in (fam["family"], fam["family"] + " v2"): continue
    sim = json.load(open(f"{tmp}/{fam['family']}.sim.json"))
    assert abs(sim["makespan_us"] - fam["makespan_us"]) < 1e-6, fam["family"]
PY

# An optimized schedule without offloads or recomputes exports completely: the CSV passes the
# checker and, read back, simulates to the same makespan and peaks as the schedule itself.
"$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 30GiB -q --max-evaluations 500 \
  --problem-out "$tmp/p.json" -o "$tmp/free.json" > /dev/null || true
"$bin" optimize -p "$tmp/p.json" --no-offload --no-recompute --max-evaluations 2000 -q -o "$tmp/plain.json" > /dev/null \
  || { echo "FAIL: optimize --no-offload --no-recompute"; failures=$((failures + 1)); }
if "$bin" export -p "$tmp/p.json" -s "$tmp/plain.json" --format csv -o "$tmp/plain.csv" 2> "$tmp/plain.err"; then
  v=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chunks_per_device"])' "$tmp/plain.json")
  /usr/bin/python3 "$here/check_pytorch_csv.py" "$tmp/plain.csv" --ranks 4 --stages $((4 * v)) --microbatches 8 \
    || { echo "FAIL: the plain optimized CSV is rejected"; failures=$((failures + 1)); }
  /usr/bin/python3 - "$tmp/plain.csv" "$tmp/plain.json" "$tmp/back.json" <<'PY'
import json, re, sys
kinds = {"F": "F", "I": "B", "W": "W", "B": "BW"}
schedule = json.load(open(sys.argv[2]))
rows = open(sys.argv[1]).read().split()
# The CSV holds the order; the partition (items per stage) is handed over beside it.
back = {"format": schedule["format"], "placement": schedule["placement"],
        "chunks_per_device": schedule["chunks_per_device"], "devices": []}
if "items_per_stage" in schedule:
    back["items_per_stage"] = schedule["items_per_stage"]
for row in rows:
    ops = []
    for cell in row.split(","):
        stage, kind, mb = re.fullmatch(r"(\d+)([FIWB])(\d+)", cell).groups()
        ops.append(f"{kinds[kind]}{mb} s{stage}")
    back["devices"].append({"compute": ops, "offloads": [], "reloads": []})
json.dump(back, open(sys.argv[3], "w"))
PY
  "$bin" simulate -p "$tmp/p.json" -s "$tmp/plain.json" --json > "$tmp/plain.sim.json"
  "$bin" simulate -p "$tmp/p.json" -s "$tmp/back.json" --json > "$tmp/back.sim.json"
  /usr/bin/python3 - "$tmp/plain.sim.json" "$tmp/back.sim.json" <<'PY' || { echo "FAIL: the CSV read back simulates differently"; failures=$((failures + 1)); }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert abs(a["makespan_us"] - b["makespan_us"]) < 1e-6, (a["makespan_us"], b["makespan_us"])
assert [d["peak_bytes"] for d in a["devices"]] == [d["peak_bytes"] for d in b["devices"]]
assert b["fits_budget"]
print("ok   a --no-offload --no-recompute schedule exports to CSV completely and simulates the same")
PY
else
  echo "FAIL: the plain optimized schedule was refused: $(cat "$tmp/plain.err")"; failures=$((failures + 1))
fi

# The plan's settings for Megatron-LM and torchtitan, from the plan file alone, read back as the
# frameworks read them: interleaved plans with a free partition (uneven stages), one with tensor
# and data parallelism and a microbatch count Megatron must group, a V-shape plan (torchtitan
# only: Megatron refuses it), a linear one pinned with --layers-per-stage.
"$bin" plan --model gpt-7b --cluster 4xh100 --microbatches 8 --budget 30GiB -q --max-evaluations 500 \
  --placement interleaved -o "$tmp/inter.json" > /dev/null
"$bin" plan --model gpt-7b --cluster 8xh100 --tp 2 --dp 2 --microbatches 5 --budget 60GiB -q --max-evaluations 500 \
  --placement interleaved -o "$tmp/tpdp.json" > /dev/null
# (V-shape puts the embedding and the head on device 0: 30 GiB is too little there.)
/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); [d.update(mem_budget_bytes=40<<30) for d in p["devices"]]; json.dump(p, open(sys.argv[2], "w"))' "$tmp/p.json" "$tmp/p40.json"
"$bin" optimize -p "$tmp/p40.json" --placement vshape --max-evaluations 500 -q -o "$tmp/v.json" > /dev/null
"$bin" optimize -p "$tmp/p.json" --layers-per-stage 7,9,9,7 --max-evaluations 500 -q -o "$tmp/pinned.json" > /dev/null
/usr/bin/python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["items_per_stage"] == [8,9,9,8]' "$tmp/pinned.json" \
  || { echo "FAIL: --layers-per-stage 7,9,9,7 is not the answer's partition"; failures=$((failures + 1)); }
# Context parallelism, FP8 and the TP overlap, carried to both frameworks.
"$bin" plan --model llama3-8b --cluster 16xh100 --tp 2 --cp 2 --dp 2 --precision fp8 --tp-comm-overlap --microbatches 8 \
  -q --max-evaluations 300 --placement interleaved -o "$tmp/cpfp8.json" > /dev/null
grep -q -- "--context-parallel-size 2 --tp-comm-overlap.*--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather" \
  <("$bin" export -s "$tmp/cpfp8.json" --format megatron) \
  || { echo "FAIL: Megatron flags for cp 2, FP8 and the TP overlap"; failures=$((failures + 1)); }
grep -q -- "--microbatch-group-size-per-vp-stage 3" <("$bin" export -s "$tmp/tpdp.json" --format megatron) \
  || { echo "FAIL: 5 microbatches on 2 ranks need Megatron's group size 3"; failures=$((failures + 1)); }
# Every model preset, interleaved at the chunk count its plan picks, on a cluster it fits.
presets=()
# And models from Hugging Face configs (Gemma's head_dim becomes --kv-channels).
hf="$here/data/hf"
for mc in llama2-7b:4xh100 llama2-13b:8xa100-40gb llama2-70b:16xh100 gpt-7b:4xh100 gpt-14b:8xh100 gpt-tiny:2xh100 \
          llama3-8b:8xh100 "$hf/gemma-7b.json:8xh100" "$hf/qwen2.5-7b.json:8xh100"; do
  model=${mc%:*}
  name=$(basename "$model" .json)
  "$bin" plan --model "$model" --cluster "${mc##*:}" -q --max-evaluations 300 --placement interleaved \
    -o "$tmp/preset-$name.json" > /dev/null || { echo "FAIL: plan $mc"; failures=$((failures + 1)); }
  presets+=("preset-$name")
done
grep -q -- "--kv-channels 256" <("$bin" export -s "$tmp/preset-gemma-7b.json" --format megatron) \
  || { echo "FAIL: Gemma's head_dim 256 is not Megatron's --kv-channels"; failures=$((failures + 1)); }
for s in inter tpdp cpfp8 pinned "${presets[@]}"; do
  "$bin" export -s "$tmp/$s.json" --format megatron -o "$tmp/$s.megatron" \
    && /usr/bin/python3 "$here/check_framework_exports.py" megatron "$tmp/$s.megatron" "$tmp/$s.json" "${frameworks[@]}" \
    || { echo "FAIL: Megatron export of $s"; failures=$((failures + 1)); }
done
for s in inter tpdp cpfp8 v pinned "${presets[@]}"; do
  "$bin" export -s "$tmp/$s.json" --format torchtitan -o "$tmp/$s.toml" \
    && /usr/bin/python3 "$here/check_framework_exports.py" torchtitan "$tmp/$s.toml" "$tmp/$s.json" \
    && "$bin" export -s "$tmp/$s.json" --format torchtitan-py -o "$tmp/$s.py" \
    && /usr/bin/python3 "$here/check_framework_exports.py" torchtitan-py "$tmp/$s.py" "$tmp/$s.json" "${frameworks[@]}" \
    || { echo "FAIL: torchtitan export of $s"; failures=$((failures + 1)); }
done
if "$bin" export -s "$tmp/v.json" --format megatron > /dev/null 2> "$tmp/v.err" || ! grep -q "V-shape" "$tmp/v.err"; then
  echo "FAIL: a V-shape plan exported to Megatron without a refusal"; failures=$((failures + 1))
else echo "ok   a V-shape plan is refused for Megatron, naming why"; fi

# One plan file: every format from it alone; -p beside it must be the same problem; a file of
# format 1 (no problem) needs -p, and the error names it.
for f in json trace svg csv; do
  "$bin" export -s "$tmp/inter.json" --format "$f" --drop-memory-ops -o "$tmp/inter.$f" 2> /dev/null \
    || { echo "FAIL: export --format $f from the plan file alone"; failures=$((failures + 1)); }
done
"$bin" report -s "$tmp/inter.json" -o "$tmp/inter.html" 2> /dev/null && grep -q "optimized" "$tmp/inter.html" \
  && grep -q "interleaved-1f1b" "$tmp/inter.html" \
  || { echo "FAIL: report from the plan file alone"; failures=$((failures + 1)); }
if "$bin" report -s "$tmp/inter.json" --time-limit 5 -o /dev/null 2> "$tmp/rep.err" || ! grep -q "runs no search" "$tmp/rep.err"; then
  echo "FAIL: report -s takes a search option silently"; failures=$((failures + 1))
fi
"$bin" export -p "$tmp/p.json" -s "$tmp/inter.json" --format megatron > /dev/null \
  || { echo "FAIL: -p with the plan's own problem is refused"; failures=$((failures + 1)); }
if "$bin" export -p "$tmp/p40.json" -s "$tmp/inter.json" --format megatron > /dev/null 2> "$tmp/drift.err" \
  || ! grep -q "differ at /devices/0/mem_budget_bytes" "$tmp/drift.err"; then
  echo "FAIL: a -p that is not the plan's problem is not refused with where they differ"; failures=$((failures + 1))
else echo "ok   a -p that disagrees with the plan file is refused, naming the field"; fi
/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); [s.pop(k, None) for k in ("problem","planned_for","optpipe_version","command_line")]; s["format"]="optpipe.schedule/1"; json.dump(s, open(sys.argv[2],"w"))' "$tmp/pinned.json" "$tmp/v1.json"
if "$bin" simulate -s "$tmp/v1.json" > /dev/null 2> "$tmp/v1.err" || ! grep -q "optpipe.schedule/1.*--problem" "$tmp/v1.err"; then
  echo "FAIL: a format-1 file without -p is not refused naming --problem"; failures=$((failures + 1))
fi
"$bin" simulate -s "$tmp/v1.json" -p "$tmp/p.json" > /dev/null \
  && echo "ok   a format-1 schedule still reads with -p" \
  || { echo "FAIL: a format-1 schedule with -p"; failures=$((failures + 1)); }
if "$bin" optimize -p "$tmp/p.json" --layers-per-stage 7,9,9 -q > /dev/null 2> "$tmp/bad.err" || ! grep -q "3 counts for 4 devices" "$tmp/bad.err"; then
  echo "FAIL: a wrong --layers-per-stage is not refused with its reason"; failures=$((failures + 1))
else echo "ok   a wrong --layers-per-stage is refused"; fi

if [ "$failures" -gt 0 ]; then echo "$failures export check(s) failed"; exit 1; fi
echo "all export checks passed"
