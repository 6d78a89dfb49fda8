#!/usr/bin/env python3
"""Compares two folders written by bench/golden/golden.sh: every figure (makespans, bounds, gaps,
peaks, fits, evaluations) and the schedules written; prints the differences and a count."""
import json, sys, os, filecmp
a, b = sys.argv[1], sys.argv[2]
n = bad = 0
def num(x, y, what):
    global n, bad
    n += 1
    if x != y:
        bad += 1; print("DIFF", what, x, y)
for f in sorted(os.listdir(a)):
    if f.startswith("opt_"):
        x, y = json.load(open(f"{a}/{f}")), json.load(open(f"{b}/{f}"))
        for k in ("makespan_us", "max_span_us", "lower_bound_us", "gap", "outcome", "needed_budget_bytes", "bubble_ratio"):
            num(x[k], y[k], f + ":" + k)
        num(x["stats"]["evaluations"], y["stats"]["evaluations"], f + ":evaluations")
        num([d["peak_bytes"] for d in x["devices"]], [d["peak_bytes"] for d in y["devices"]], f + ":peaks")
    if f.startswith("cmp_"):
        x, y = json.load(open(f"{a}/{f}")), json.load(open(f"{b}/{f}"))
        for fx, fy in zip(x["families"], y["families"]):
            for k in ("makespan_us", "lower_bound_us", "fits_budget", "fits_any_timing"):
                if k in fx: num(fx[k], fy[k], f + ":" + fx["family"] + ":" + k)
x, y = json.load(open(f"{a}/quick.json")), json.load(open(f"{b}/quick.json"))
for rx, ry in zip(x["results"], y["results"]):
    for k in rx:
        if k != "wall_s": num(rx[k], ry[k], "quick:" + rx["instance"] + ":" + k)
x, y = json.load(open(f"{a}/plan.json")), json.load(open(f"{b}/plan.json"))
for rx, ry in zip(x["schedules"], y["schedules"]):
    for k in ("makespan_us", "peak_bytes", "fits_budget"):
        if k in rx: num(rx[k], ry[k], "plan:" + rx["schedule"] + ":" + k)
for f in ("plan_s.json", "plan_s2.json", "sim.json", "noise.json"):
    n += 1
    if not filecmp.cmp(f"{a}/{f}", f"{b}/{f}", shallow=False):
        if f in ("plan_s.json", "plan_s2.json"):
            bad += 1; print("DIFF file", f)
print(f"{n} figures compared, {bad} differ")
