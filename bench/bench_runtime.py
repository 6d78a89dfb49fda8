#!/usr/bin/env python3
"""How true are the simulator's predictions? Profile, then run, side by side, several rounds.

Each round profiles gpt-tiny on this machine (2 ranks, one compute thread each) for the linear
and for the V-shape placement, then runs 1F1B, ZB-H1 and 1F1B-recompute (linear), ZB-V and the
optimized schedule under a budget 1F1B does not fit (V-shape, offloading), each for a few
iterations with --reprofile, and records measured / predicted iteration time — predicted from
the ranks' profile taken just before the run, and from the profile file written earlier in the
round — and peak activation bytes. The medians over rounds are reported. (This machine's speed
drifts by up to 2× within seconds, so a third figure takes it out: the simulator replayed on
the op durations measured in the run itself.)

  ./bench/bench_runtime.py [--rounds 3] [--out results.json] [--optpipe build/optpipe]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def sh(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"bench_runtime: {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optpipe", default=os.path.join(os.path.dirname(__file__), "..", "build", "optpipe"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--out", help="write every measurement as JSON")
    a = ap.parse_args()
    bin_ = a.optpipe
    tmp = tempfile.mkdtemp(prefix="bench-runtime-")
    rows = []  # (round, schedule, measured_us, predicted_us, measured peaks, predicted peaks)

    def profile(placement):
        prob = os.path.join(tmp, f"problem-{placement}.json")
        sh([bin_, "profile", "--devices", "2", "--microbatches", str(a.microbatches), "--placement", placement,
            "--repetitions", "10", "-o", os.devnull, "--problem-out", prob])
        return prob

    def run(name, prob, schedule_args, rnd):
        out = os.path.join(tmp, "run.json")
        sh([bin_, "run", "--problem", prob, "--iterations", str(a.iterations), "--reprofile", "--json", out] + schedule_args)
        r = json.load(open(out))
        rows.append({"round": rnd, "schedule": name, "measured_us": r["measured_us"], "predicted_us": r["predicted_us"],
                     "file_predicted_us": r["problem_file_predicted_us"], "replayed_us": r["replayed_us"],
                     "measured_peak_bytes": r["measured_peak_activation_bytes"],
                     "predicted_peak_bytes": r["predicted_peak_activation_bytes"],
                     "measured_idle_us": r["measured_idle_us"], "predicted_idle_us": r["predicted_idle_us"]})
        print(f"round {rnd} {name:16s} measured {r['measured_us'] / 1e3:7.2f} ms  predicted {r['predicted_us'] / 1e3:7.2f} ms"
              f"  ratio {r['measured_us'] / r['predicted_us']:.3f}"
              f"  (from the profile file: {r['measured_us'] / r['problem_file_predicted_us']:.3f},"
              f" replayed: {r['measured_us'] / r['replayed_us']:.3f})", file=sys.stderr)

    for rnd in range(a.rounds):
        lin = profile("linear")
        for fam in ["1f1b", "zb-h1", "1f1b-recompute"]:
            run(fam, lin, ["--family", fam], rnd)
        v = profile("vshape")
        run("zb-v", v, ["--family", "zb-v"], rnd)
        p = json.load(open(v))
        biggest = max(s["act_f_bytes"] for s in p["stages"])
        for d in p["devices"]:
            d["mem_budget_bytes"] = d["static_bytes"] + 3 * biggest  # 1F1B needs 4 stashes on device 0
        tight = os.path.join(tmp, "tight.json")
        json.dump(p, open(tight, "w"))
        sched = os.path.join(tmp, "opt.json")
        sh([bin_, "optimize", "--problem", tight, "--time-limit", "10", "-q", "-o", sched])
        run("optimized", tight, ["--schedule", sched], rnd)

    print("measured / predicted, median over rounds [min .. max]")
    print(f"{'schedule':16s} {'iteration (re-profiled)':>28s} {'iteration (profile file)':>28s}"
          f" {'iteration (replayed)':>28s} {'peak activations':>20s}")
    summary = {}
    span = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f} .. {max(v):.3f}]"
    for name in dict.fromkeys(r["schedule"] for r in rows):
        rs = [r for r in rows if r["schedule"] == name]
        t = [r["measured_us"] / r["predicted_us"] for r in rs]
        f = [r["measured_us"] / r["file_predicted_us"] for r in rs]
        rp = [r["measured_us"] / r["replayed_us"] for r in rs]
        peaks = [m / p for r in rs for m, p in zip(r["measured_peak_bytes"], r["predicted_peak_bytes"]) if p > 0]
        summary[name] = {"time_ratio_median": statistics.median(t), "time_ratios": t,
                         "file_time_ratio_median": statistics.median(f), "file_time_ratios": f,
                         "replay_time_ratio_median": statistics.median(rp), "replay_time_ratios": rp,
                         "peak_ratio_min": min(peaks), "peak_ratio_max": max(peaks)}
        print(f"{name:16s} {span(t):>28s} {span(f):>28s} {span(rp):>28s} {min(peaks):9.3f} .. {max(peaks):.3f}")
    if a.out:
        json.dump({"rounds": a.rounds, "iterations": a.iterations, "summary": summary, "runs": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
