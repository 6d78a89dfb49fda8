"""Plan from Python, as after `pip install .`: a model and a cluster in, the table's figures and
the plan file out; the plan file read back, simulated and handed to Megatron-LM and torchtitan.

    python examples/plan_in_python.py [--time-limit 2] [--out plan.json]
"""
import argparse

import optpipe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-7b")
    ap.add_argument("--cluster", default="4xh100")
    ap.add_argument("--budget", default="30GiB")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--out", default="optpipe_schedule.json")
    a = ap.parse_args()

    r = optpipe.plan(a.model, a.cluster, budget=a.budget, microbatches=a.microbatches, time_limit_s=a.time_limit,
                     placements=["linear", "interleaved"])
    if r["plan_file"] is None:
        raise SystemExit(f"nothing fits: {r['outcome']}")
    optimized = r["schedules"][-1]
    best = r["best_family"]
    print(f"optpipe {optpipe.__version__}: {a.model} on {a.cluster}: optimized {optimized['makespan_us'] / 1e3:.1f} ms "
          f"({optimized['placement']} v{optimized['chunks_per_device']}), gap {100 * optimized['gap']:.1f}%, "
          f"{optimized['speedup_vs_best_family']:.3f}x {best['name'] if best else 'no family that fits'}")
    print(f"partition (transformer layers per stage): {r['partition']['layers_per_stage']}")

    optpipe.write_plan(a.out, r["plan_file"])
    plan = optpipe.read_plan(a.out)
    figures = optpipe.simulate(None, plan)  # the plan file holds its problem
    assert abs(figures["makespan_us"] - optimized["makespan_us"]) < 1e-6 * optimized["makespan_us"]
    print(f"wrote {a.out}; read back, it simulates to {figures['makespan_us'] / 1e3:.1f} ms")
    print("Megatron-LM:", optpipe.export(plan, "megatron").splitlines()[-1])
    titan = optpipe.export(plan, "torchtitan-py")
    print("torchtitan 0.3:", next(line.strip() for line in titan.splitlines() if "local_batch_size" in line))


if __name__ == "__main__":
    main()
