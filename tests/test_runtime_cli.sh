#!/usr/bin/env bash
# The runtime end to end, through `optpipe run` / `optpipe profile` (real processes, c10d gloo):
# every family and optimized schedules with offload and recompute give the loss and gradients of
# one unpipelined process; training lowers the loss; faults end every rank with a clear message;
# a schedule that does not validate starts nothing.
set -u
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# A small GPT so that each run takes about a second; the same flags for profile and run.
model=(--layers 4 --hidden 64 --ffn 256 --heads 4 --seq-len 32 --vocab 128 --microbatch-size 2)

"$bin" profile --devices 2 --microbatches 4 --repetitions 2 "${model[@]}" -o "$tmp/profile.json" \
  --problem-out "$tmp/problem.json" 2> "$tmp/profile.err" || { fail "profile"; cat "$tmp/profile.err"; }
python3 - "$tmp/profile.json" "$tmp/problem.json" <<'PY' && echo "ok   profile writes profile and problem" || fail "profile output"
import json, sys
prof, prob = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert prof["format"] == "optpipe.profile/1" and len(prof["stages"]) == 2
for s in prof["stages"]:
    assert s["t_f_us"] > 0 and s["t_b_us"] > 0 and s["t_w_us"] > 0 and s["t_r_us"] > 0, s
    assert s["act_f_bytes"] > s["act_input_bytes"] > 0 and -s["act_w_bytes"] < s["act_f_bytes"], s
assert prof["t_comm_us"] > 0 and prof["host_link"]["d2h_gb_per_s"] > 0
assert all(b > 0 for b in prof["static_bytes"])
assert prob["num_devices"] == 2 and prob["num_microbatches"] == 4
PY
# The profile is in the format the cost model reads: plan takes it for two devices.
out=$("$bin" plan --model gpt-tiny --cluster 2xa100-40gb --microbatches 4 --profile "$tmp/profile.json" -q --time-limit 2 \
  -o "$tmp/plan.json" 2>&1)
[ $? -eq 0 ] && grep -q "optimized" <<<"$out" && echo "ok   plan --profile reads it" || { fail "plan --profile"; echo "$out" | tail -5; }

run_check() {  # run_check NAME ARGS... : one iteration, --check must pass
  local name="$1"
  shift
  local out
  if out=$("$bin" run --problem "${check_problem:-$tmp/problem.json}" "${model[@]}" --iterations 1 --check --timeout 60 "$@" 2>&1) &&
     grep -q "): OK" <<<"$out"; then
    echo "ok   $name: $(grep -o 'gradients of .*' <<<"$out")"
  else
    fail "$name"; echo "$out" | tail -15
  fi
}

# Every family's gradients, with room for every family's activations (looped-bfs holds GPipe's on
# chunks re-cut from the profile's, a little more than the profile's budget).
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); [d.update(mem_budget_bytes=d["static_bytes"] + (1 << 30)) for d in p["devices"]]; json.dump(p, open(sys.argv[2], "w"))' \
  "$tmp/problem.json" "$tmp/roomy.json"
check_problem="$tmp/roomy.json"
for family in $("$bin" families --json | python3 -c 'import json,sys; print(" ".join(f["name"] for f in json.load(sys.stdin)["families"]))'); do
  run_check "run --check $family" --family "$family"
done
check_problem=""
"$bin" schedule --problem "$tmp/problem.json" --family pipeoffload -o "$tmp/po.json" > /dev/null
grep -q OFFLOAD "$tmp/po.json" && echo "ok   pipeoffload offloads here" || fail "pipeoffload has no offload on this problem"

# The exact models' gates: GPipe with microbatches 0 and 1 of stage 0 offloaded, F2 held until
# offload 0 is done (WAIT), reload 0 held until its anchor has finished and reload 1 until
# offload 0 is done ("after").
"$bin" schedule --problem "$tmp/problem.json" --family gpipe -o "$tmp/gated.json" > /dev/null
python3 - "$tmp/gated.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d0 = s["devices"][0]
c = d0["compute"]
c.insert(c.index("F2 s0"), "WAIT0 s0")
before = {i: c[c.index(f"BW{i} s0") - 1] for i in (0, 1)}
d0["offloads"] = ["OFFLOAD0 s0", "OFFLOAD1 s0"]
reloads = [{"op": "RELOAD0 s0", "anchor": before[0], "after": before[0]},
           {"op": "RELOAD1 s0", "anchor": before[1], "after": "OFFLOAD0 s0"}]
d0["reloads"] = sorted(reloads, key=lambda r: c.index(r["anchor"]))
json.dump(s, open(sys.argv[1], "w"))
PY
run_check "run --check with WAIT and reloads held after a compute op and another offload" --schedule "$tmp/gated.json"

# Four ranks (more processes than cores: correctness only).
"$bin" profile --devices 4 --microbatches 8 --repetitions 1 "${model[@]}" -o /dev/null --problem-out "$tmp/problem4.json" 2> /dev/null ||
  fail "profile 4 ranks"
for family in zb-v interleaved-1f1b; do
  out=$("$bin" run --problem "$tmp/problem4.json" "${model[@]}" --iterations 1 --check --family "$family" 2>&1)
  grep -q "): OK" <<<"$out" && echo "ok   4 ranks $family" || { fail "4 ranks $family"; echo "$out" | tail -10; }
done

# Three chunks a device: interleaved (a family) and a wave (optimized on a wave's profile), the
# wave run from its plan file alone.
model6=(--layers 6 --hidden 64 --ffn 256 --heads 4 --seq-len 32 --vocab 128 --microbatch-size 2)
"$bin" profile --devices 2 --microbatches 4 --repetitions 1 --placement wave --chunks 3 "${model6[@]}" -o /dev/null \
  --problem-out "$tmp/problem_w.json" 2> /dev/null || fail "profile wave v3"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); [d.update(mem_budget_bytes=d["static_bytes"] + (1 << 30)) for d in p["devices"]]; json.dump(p, open(sys.argv[2], "w"))' \
  "$tmp/problem_w.json" "$tmp/roomy_w.json"
"$bin" optimize -p "$tmp/roomy_w.json" --placement wave --chunks 3 --max-evaluations 300 -q -o "$tmp/wave.json" > /dev/null ||
  fail "optimize --placement wave --chunks 3"
for what in "wave v3:--schedule $tmp/wave.json" "interleaved v3:-p $tmp/roomy_w.json --family interleaved-1f1b --chunks 3"; do
  read -r -a args <<<"${what#*:}"
  out=$("$bin" run "${args[@]}" "${model6[@]}" --iterations 1 --check 2>&1)
  grep -q "): OK" <<<"$out" && echo "ok   ${what%%:*} runs and matches one process" || { fail "${what%%:*}"; echo "$out" | tail -5; }
done

# Uneven partitions: the chunks follow --layers-per-stage (profile and run alike; chunk 0 of the
# V-shape holds the embedding only), or the partition a plan chose, and still match one process.
"$bin" profile --devices 2 --microbatches 4 --repetitions 1 --placement vshape --layers-per-stage 0,1,2,1 "${model[@]}" \
  -o /dev/null --problem-out "$tmp/problem_uneven.json" 2> /dev/null || fail "profile uneven"
out=$("$bin" run --problem "$tmp/problem_uneven.json" "${model[@]}" --layers-per-stage 0,1,2,1 --iterations 1 --check \
  --family zb-v 2>&1)
grep -q "): OK" <<<"$out" && grep -q "transformer layers per chunk: 0,1,2,1" <<<"$out" && echo "ok   uneven partition 0,1,2,1 (zb-v)" ||
  { fail "uneven partition"; echo "$out" | tail -10; }
"$bin" plan --model gpt-tiny --cluster 2xa100-40gb --microbatches 4 --layers-per-stage 2,6 -q --max-evaluations 300 \
  -o "$tmp/plan26.json" --problem-out "$tmp/plan26_problem.json" > /dev/null 2>&1 || fail "plan --layers-per-stage 2,6"
out=$("$bin" run --problem "$tmp/plan26_problem.json" --schedule "$tmp/plan26.json" --iterations 1 --check 2>&1)
grep -q "): OK" <<<"$out" && grep -q "transformer layers per chunk: 2,6" <<<"$out" && echo "ok   a plan's partition 2,6 runs" ||
  { fail "plan's partition"; echo "$out" | tail -10; }
out=$("$bin" run --problem "$tmp/plan26_problem.json" --schedule "$tmp/plan26.json" --layers-per-stage 4,4 2>&1)
[ $? -eq 1 ] && grep -q "disagrees with the schedule's partition 2,6" <<<"$out" && echo "ok   a partition other than the plan's refused" ||
  { fail "--layers-per-stage against the plan's"; echo "$out" | tail -3; }
for bad in "1,1,3:3 layer counts for 2 chunks" "1,2:holds 3 transformer layers, the model 4" "5,-1:chunk 1 -1 layers"; do
  out=$("$bin" run --problem "$tmp/problem.json" "${model[@]}" --family 1f1b --layers-per-stage "${bad%%:*}" 2>&1)
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "${bad#*:}" <<<"$out" && echo "ok   --layers-per-stage ${bad%%:*} refused" ||
    { fail "--layers-per-stage ${bad%%:*} (exit $rc)"; echo "$out" | tail -3; }
done

# Optimized under a budget that 1F1B does not fit: the optimizer must offload or recompute.
# Profiled on the V-shape's chunks, whose costs are exact for every placement the optimizer
# tries (a linear profile's even split is not: the first and last chunks hold the embedding and
# the head, and under a tight budget the run's gate would wait for room that never comes).
"$bin" profile --devices 2 --microbatches 4 --repetitions 1 --placement vshape "${model[@]}" -o /dev/null \
  --problem-out "$tmp/problem_v.json" 2> /dev/null || fail "profile vshape"
python3 - "$tmp/problem_v.json" "$tmp/tight.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
acts = [s["act_f_bytes"] for s in p["stages"]]
for d in p["devices"]:
    d["mem_budget_bytes"] = d["static_bytes"] + int(3 * max(acts))  # 1.5 linear stages
json.dump(p, open(sys.argv[2], "w"))
PY
"$bin" optimize --problem "$tmp/tight.json" --max-evaluations 5000 -q -o "$tmp/opt.json" > "$tmp/opt.out" 2>&1 || { fail "optimize tight"; cat "$tmp/opt.out"; }
if grep -qE '"(OFFLOAD|R)[0-9]' "$tmp/opt.json"; then
  echo "ok   optimized schedule offloads/recomputes: $(grep -oE '"(OFFLOAD|R)[0-9]+ s[0-9]+"' "$tmp/opt.json" | sed 's/[0-9 s"]//g' | sort | uniq -c | tr '\n' ' ')"
else
  fail "optimized schedule under a tight budget has neither offload nor recompute"
fi
out=$("$bin" run --problem "$tmp/tight.json" --schedule "$tmp/opt.json" "${model[@]}" --iterations 2 --check --json "$tmp/opt_run.json" 2>&1)
grep -q "): OK" <<<"$out" && echo "ok   optimized schedule runs and matches" || { fail "optimized run"; echo "$out" | tail -10; }
python3 - "$tmp/opt_run.json" "$tmp/tight.json" <<'PY' && echo "ok   optimized run stays within the budget" || fail "optimized run's measured peak"
import json, sys
r, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for d, dev in enumerate(p["devices"]):
    measured, predicted = r["measured_peak_activation_bytes"][d], r["predicted_peak_activation_bytes"][d]
    assert dev["static_bytes"] + measured <= dev["mem_budget_bytes"], (d, measured, dev)
    assert measured >= 0.5 * predicted, (d, measured, predicted)
PY
python3 - "$tmp/opt_run.json" <<'PY' && echo "ok   optimized run: the memory gate never held an allocation" || fail "optimized run's gate holds"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["gate_holds"] == [0] * r["num_devices"], r["gate_holds"]
PY

# Training lowers the loss; the trace has one event per op.
"$bin" run --problem "$tmp/problem.json" "${model[@]}" --family zb-h1 --iterations 15 --json "$tmp/train.json" \
  --trace "$tmp/trace.json" --reprofile > /dev/null 2>&1 || fail "training run"
python3 - "$tmp/train.json" "$tmp/trace.json" <<'PY' && echo "ok   training lowers the loss; trace complete" || fail "training / trace"
import json, sys
r, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["losses"][-1] < 0.8 * r["losses"][0], r["losses"]
assert r["reprofiled"] and r["predicted_us"] > 0 and r["problem_file_predicted_us"] > 0 and r["replayed_us"] > 0
ops = [e for e in t["traceEvents"] if e["ph"] == "X"]
assert len(ops) == 2 * 4 * 3, len(ops)  # 2 stages × 4 microbatches × F, B, W
assert all(e["dur"] > 0 for e in ops)
PY

# Faults: a rank that exits or stalls stops everyone, with a message, within the timeout.
for fault in exit@1 stall@0; do
  start=$(date +%s)
  out=$("$bin" run --problem "$tmp/problem.json" "${model[@]}" --family 1f1b --timeout 3 --inject-fault "$fault" 2>&1)
  rc=$?
  took=$(($(date +%s) - start))
  want="run failed: rank"
  [ "$fault" = stall@0 ] && want="Timed out waiting 3000ms"
  if [ "$rc" -ne 0 ] && [ "$took" -lt 40 ] && grep -q "$want" <<<"$out"; then
    echo "ok   fault $fault: exit $rc after ${took}s: $(grep -m1 'run failed' <<<"$out" | cut -c1-160)"
  else
    fail "fault $fault (exit $rc after ${took}s)"; echo "$out" | tail -8
  fi
done

# Figures that understate the activations: the schedule validates, but the run's memory gate
# finds no room for a forward and nothing of its rank that could make it. That fails at once
# with the diagnosis, not after the 60 s timeout.
python3 - "$tmp/problem.json" "$tmp/understated.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for s in p["stages"]:
    s["act_f_bytes"] //= 8
    s["act_w_bytes"] //= 8
    s["act_b_bytes"] = -s["act_f_bytes"] - s["act_w_bytes"]
    s["act_input_bytes"] = min(s["act_input_bytes"], s["act_f_bytes"])
for d in p["devices"]:
    d["mem_budget_bytes"] = d["static_bytes"] + 2 * max(s["act_f_bytes"] for s in p["stages"])
json.dump(p, open(sys.argv[2], "w"))
PY
out=$("$bin" run --problem "$tmp/understated.json" "${model[@]}" --family 1f1b --timeout 60 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "no thread of this rank can go on" <<<"$out"; then
  echo "ok   understated figures: $(grep -m1 -o 'no thread of this rank can go on.\{0,100\}' <<<"$out")"
else
  fail "understated figures (exit $rc)"; echo "$out" | tail -8
fi

# A schedule that does not validate is refused before any process starts.
"$bin" schedule --problem "$tmp/problem.json" --family 1f1b -o "$tmp/s.json" > /dev/null
python3 - "$tmp/s.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["devices"][1]["compute"].pop()  # drop device 1's last op
json.dump(s, open(sys.argv[1], "w"))
PY
out=$("$bin" run --problem "$tmp/problem.json" "${model[@]}" --schedule "$tmp/s.json" 2>&1)
rc=$?
if [ "$rc" -eq 1 ] && grep -q "nothing was started" <<<"$out" && ! grep -q "rank" <<<"$out"; then
  echo "ok   invalid schedule refused"
else
  fail "invalid schedule (exit $rc)"; echo "$out" | head -5
fi
out=$("$bin" run --problem "$tmp/tight.json" "${model[@]}" --family gpipe 2>&1)
rc=$?
[ "$rc" -eq 3 ] && grep -q "nothing was started" <<<"$out" && echo "ok   over-budget schedule refused (exit 3)" || { fail "over budget (exit $rc)"; echo "$out" | head -5; }
out=$("$bin" run --problem "$tmp/problem.json" --family 1f1b --model llama2-7b 2>&1)
[ $? -eq 1 ] && grep -q "GPT blocks" <<<"$out" && echo "ok   non-GPT model refused" || { fail "llama refused"; echo "$out" | head -5; }

# Started from outside, as torchrun starts ranks: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
port=$((20000 + RANDOM % 20000))
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" run --problem "$tmp/problem.json" "${model[@]}" \
    --family zb-h1 --iterations 2 --timeout 30 > "$tmp/rank$r.out" 2>&1 &
done
wait
if grep -q "rank 0 iteration 1: loss" "$tmp/rank0.out" && grep -q "rank 1 iteration 1: loss" "$tmp/rank1.out"; then
  echo "ok   ranks started torchrun-style"
else
  fail "torchrun-style ranks"; cat "$tmp/rank0.out" "$tmp/rank1.out" | tail -6
fi

# Asked for a GPU where there is none (or a build without CUDA): every rank says why, exit 1.
if nvidia-smi -L >/dev/null 2>&1; then echo "skip --device cuda without a GPU: this machine has one"; else
out=$("$bin" run --problem "$tmp/problem.json" "${model[@]}" --family 1f1b --iterations 1 --device cuda --timeout 20 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "rank 0: --device cuda: \(no GPU is visible\|this optpipe-runtime was built against a CPU-only\)" <<<"$out" &&
  echo "ok   --device cuda without a GPU is refused" || { fail "--device cuda without a GPU (exit $rc)"; echo "$out" | tail -3; }
fi

out=$("$bin" run --family 1f1b 2>&1)
[ $? -eq 2 ] && grep -q "needs --problem" <<<"$out" && echo "ok   run without a problem is a usage error" || { fail "run without --problem"; echo "$out" | head -3; }

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
