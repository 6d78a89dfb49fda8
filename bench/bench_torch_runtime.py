"""What optpipe.torch costs per step against torch's plain _PipelineScheduleRuntime on the same
order (the same CSV), on gloo ranks on the CPU, and what a plan's offloads and recomputes cost
there. Rounds alternate the two runtimes in the same processes; medians of the steps after the
first of each round.

    PYTHONPATH=build/python build-cuda/torch-venv/bin/python bench/bench_torch_runtime.py [--ranks 2]
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import optpipe  # noqa: E402
import torch_pipeline as example  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    problem = optpipe.preset_problem("gpt-tiny", f"{a.ranks}xa100-40gb", None, a.microbatches)
    plans = [(name, optpipe.schedule(name, problem)) for name in ("zb-h1", "interleaved-1f1b", "zb-v")]
    tight = example.tight_problem(a.ranks, a.microbatches, 2.5)
    for placement in ("linear", "vshape"):
        r = optpipe.optimize(tight, max_evaluations=1500, placements=[placement])
        plans.append((f"optimized {placement}, tight budget", {"problem": r["problem"], "schedule": r["schedule"]}))
    cases = []
    for _ in range(a.rounds):
        for name, built in plans:
            has_memory_ops = any(d.get("offloads") or any(op.startswith("R") for op in d["compute"])
                                 for d in built["schedule"]["devices"])
            for mode in ("torch", "optpipe"):
                if mode == "torch" and has_memory_ops:
                    continue
                cases.append({"name": name, "mode": mode, "steps": a.steps, **built})
    results = example.run_cases(cases, a.ranks)
    times = {}
    for case, ranks in zip(cases, results):
        step_s = [max(r["step_s"][i] for r in ranks) for i in range(1, a.steps)]  # a step ends on the last rank
        times.setdefault((case["name"], case["mode"]), []).extend(step_s)
        if case["mode"] == "optpipe":
            times.setdefault((case["name"], "ops"), ranks[0]["stats"])
    print(f"{a.ranks} gloo ranks on the CPU, {a.microbatches} microbatches, "
          f"{a.rounds} rounds of {a.steps} steps; median step in ms")
    print(f"{'plan':36} {'torch':>8} {'optpipe':>8} {'ratio':>6}  rank 0 ran")
    for name, _ in plans:
        t = times.get((name, "torch"))
        o = statistics.median(times[(name, "optpipe")]) * 1e3
        ratio = f"{o / (statistics.median(t) * 1e3):.3f}" if t else "-"
        torch_ms = f"{statistics.median(t) * 1e3:.1f}" if t else "-"
        print(f"{name:36} {torch_ms:>8} {o:8.1f} {ratio:>6}  {times[(name, 'ops')]}")


if __name__ == "__main__":
    main()
