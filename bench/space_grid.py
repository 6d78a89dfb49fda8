#!/usr/bin/env python3
"""The default plan against every explicit placement and chunk count, side by side.

For each budget: `optpipe plan` (the whole space) and `optpipe plan --placement P --chunks v` for
every placement the layers allow, each at the same time limit, one after the other. Reports each
answer, the fastest fitting family row of every run, and the default's ratio to the best of them.

    python3 bench/space_grid.py --time-limit 10 --budget 36GiB --budget 28GiB --budget 27.5GiB
"""
import argparse
import json
import subprocess
import sys


def plan(binary, args, extra):
    cmd = [binary, "plan", "-q", "--json", "--time-limit", str(args.time_limit), "-o", "", *args.plan_args, *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 3):
        sys.exit(f"space_grid: {' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[:400]}")
    j = json.loads(out.stdout)
    rows = [r for r in j["schedules"] if "makespan_us" in r]
    opt = next(r for r in rows if r["schedule"] == "optimized")
    fam = [r for r in rows if r["schedule"] != "optimized" and r["fits_budget"]]
    best_family = min(fam, key=lambda r: r["makespan_us"]) if fam else None
    return {"fits": j["outcome"] != "infeasible", "makespan_us": opt["makespan_us"], "placement":
            f'{opt["placement"]} v{opt["chunks_per_device"]}', "gap": opt["gap"], "bound_us": opt["lower_bound_us"],
            "best_family": best_family}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./build/optpipe")
    ap.add_argument("--time-limit", type=float, default=10)
    ap.add_argument("--budget", action="append", default=[])
    ap.add_argument("--max-chunks", type=int, default=5, help="the layers allow (llama2-13b on 8 GPUs: 42 items, 5)")
    ap.add_argument("plan_args", nargs="*", help="more plan options (after --)")
    args = ap.parse_args()
    explicit = [("linear", 1), ("vshape", 2)] + [("interleaved", v) for v in range(2, args.max_chunks + 1)] + \
               [("wave", v) for v in range(3, args.max_chunks + 1)]
    worst_ratio, all_fit_ok = 0.0, True
    for budget in args.budget or ["36GiB"]:
        b = ["--budget", budget]
        default = plan(args.binary, args, b)
        runs = [(f"{p} v{v}", plan(args.binary, args, b + ["--placement", p, "--chunks", str(v)])) for p, v in explicit]
        print(f"budget {budget}, {args.time_limit:g} s each")
        print(f"  {'run':<22} {'fits':<5} {'answer ms':>10} {'gap':>6}  fastest fitting family row")
        for name, r in [("default (whole space)", default)] + runs:
            fam = r["best_family"]
            print(f"  {name:<22} {'yes' if r['fits'] else 'no':<5} "
                  f"{r['makespan_us'] / 1e3 if r['fits'] else float('nan'):>10.1f} {100 * r['gap']:>5.1f}%  "
                  + (f"{fam['schedule']} {fam['makespan_us'] / 1e3:.1f} ms" if fam else "-"))
        fitting = [r for _, r in runs if r["fits"]]
        best_explicit = min((r["makespan_us"] for r in fitting), default=None)
        rows = [r["best_family"]["makespan_us"] for _, r in [("d", default)] + runs if r["best_family"]]
        best_row = min(rows, default=None)
        if best_explicit is not None:
            ratio = default["makespan_us"] / best_explicit if default["fits"] else float("inf")
            worst_ratio = max(worst_ratio, ratio)
            print(f"  default / best explicit answer: {ratio:.4f}" +
                  (f"; default / fastest fitting row of the grid: {default['makespan_us'] / best_row:.4f}"
                   if best_row and default["fits"] else ""))
        all_fit_ok = all_fit_ok and (default["fits"] or not fitting)
    print(f"worst default / best explicit: {worst_ratio:.4f}; a wrong \"nothing fits\": {'no' if all_fit_ok else 'YES'}")


if __name__ == "__main__":
    main()
