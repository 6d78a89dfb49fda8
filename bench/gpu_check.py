#!/usr/bin/env python3
"""The runtime on a GPU: profile, every family with --check, an offloading optimized schedule.

Three steps, since the GPU machine has torch but none of optpipe's Debian packages (so only
optpipe-runtime, built here against the same torch by `scripts/setup.sh --cuda`, runs there;
`optpipe optimize` runs here between the two GPU steps):

  on the GPU:  bench/gpu_check.py families --dir OUT      (carry build-cuda/optpipe-runtime)
  here:        bench/gpu_check.py optimize --dir OUT      (a budget that forces offloads)
  on the GPU:  bench/gpu_check.py optimized --dir OUT     (then the summary of all runs)

`families` profiles the model for the linear and the V-shape placement on 2 ranks and runs every
family on its placement's profile; `optimized` runs the optimized schedule and prints, per run,
measured/predicted iteration time, the gradient check, and the allocator's peak against the
predicted static + activation peak. LibTorch's own overhead (workspace, cuBLAS handles, the
allocator's rounding) is taken as 1F1B's allocator peak less its prediction, per device, and the
optimized run is compared with its prediction plus that overhead.

The model: a GPT of ~270M parameters, microbatches of 4 × 1024 = 4096 tokens, fp32. `--device
cpu --small` runs the same steps on a tiny model on the CPU, to check the script itself.
"""
import argparse
import json
import os
import subprocess
import sys

LINEAR = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-auto", "1f1b-recompute", "pipeoffload"]
VSHAPE = ["zb-v", "v-half", "v-min", "dualpipe-v"]
GPU_MODEL = ["--layers", "16", "--hidden", "1024", "--ffn", "4096", "--heads", "16", "--seq-len", "1024",
             "--vocab", "32000", "--microbatch-size", "4"]
SMALL_MODEL = ["--layers", "4", "--hidden", "64", "--ffn", "256", "--heads", "4", "--seq-len", "32", "--vocab", "128",
               "--microbatch-size", "2"]


def runtime_env():
    """LD_LIBRARY_PATH with this Python's torch and NVIDIA libraries first: on the GPU machine the
    runtime's own RUNPATH (build-cuda/torch-venv) does not exist, its torch does."""
    env = dict(os.environ)
    try:
        import torch
    except ImportError:
        return env
    site = os.path.dirname(os.path.dirname(torch.__file__))
    libs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
    nvidia = os.path.join(site, "nvidia")
    for root, dirs, _ in os.walk(nvidia) if os.path.isdir(nvidia) else []:
        libs += [os.path.join(root, d) for d in dirs if d == "lib"]
    env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    return env


def sh(args):
    print("+ " + " ".join(args), file=sys.stderr, flush=True)
    r = subprocess.run(args, capture_output=True, text=True, env=runtime_env())
    if r.returncode != 0:
        print(f"gpu_check: exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}", file=sys.stderr)
    return r


def model_args(a):
    return (SMALL_MODEL if a.small else GPU_MODEL) + ["--device", a.device]


def run(a, name, problem, schedule_args):
    """One run with --check; its JSON (with the exit code) goes to DIR/run-NAME.json."""
    out = os.path.join(a.dir, f"run-{name}.json")
    r = sh([a.runtime, "run", "--problem", problem, "--iterations", str(a.iterations), "--check", "--json", out,
            "--timeout", "300"] + model_args(a) + schedule_args)
    result = json.load(open(out)) if os.path.exists(out) else {}
    result.update({"name": name, "exit": r.returncode, "output": r.stdout[-4000:] + r.stderr[-4000:]})
    json.dump(result, open(out, "w"), indent=1)
    print(r.stdout, flush=True)


def families(a):
    for placement in ["linear", "vshape"]:
        r = sh([a.runtime, "profile", "--devices", str(a.devices), "--microbatches", str(a.microbatches), "--placement",
                placement, "--repetitions", "3", "--timeout", "300", "-o", os.path.join(a.dir, f"profile-{placement}.json"),
                "--problem-out", os.path.join(a.dir, f"problem-{placement}.json")] + model_args(a))
        print(r.stderr, flush=True)
        if r.returncode != 0:
            sys.exit(1)
    for fam in LINEAR:
        run(a, fam, os.path.join(a.dir, "problem-linear.json"), ["--family", fam])
    for fam in VSHAPE:
        run(a, fam, os.path.join(a.dir, "problem-vshape.json"), ["--family", fam])


def optimize(a):
    p = json.load(open(os.path.join(a.dir, "problem-vshape.json")))
    biggest = max(s["act_f_bytes"] for s in p["stages"])
    for d in p["devices"]:
        d["mem_budget_bytes"] = d["static_bytes"] + 3 * biggest  # 1F1B needs 4 stashes on device 0
    tight = os.path.join(a.dir, "problem-tight.json")
    json.dump(p, open(tight, "w"), indent=1)
    r = sh([a.optpipe, "optimize", "--problem", tight, "--time-limit", "20", "-q", "-o",
            os.path.join(a.dir, "optimized.json")])
    print(r.stdout)
    if r.returncode != 0:
        sys.exit(1)
    s = json.load(open(os.path.join(a.dir, "optimized.json")))
    offloads = sum(len(d["offloads"]) for d in s["devices"])
    print(f"optimized schedule: {offloads} offloads under a budget of static + 3 stashes")
    if offloads == 0:
        sys.exit("gpu_check: the optimized schedule does not offload; nothing to check")


def summary(a):
    rows, overhead = [], None
    names = LINEAR + VSHAPE + ["optimized"]
    for name in names:
        path = os.path.join(a.dir, f"run-{name}.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        if r["exit"] != 0 or "measured_us" not in r:
            rows.append({"name": name, "ok": False, "why": r["output"][-500:]})
            continue
        tight = name == "optimized"
        problem = json.load(open(os.path.join(a.dir, "problem-tight.json" if tight else
                                              ("problem-vshape.json" if name in VSHAPE else "problem-linear.json"))))
        static = [d["static_bytes"] for d in problem["devices"]]
        predicted_total = [s + p for s, p in zip(static, r["predicted_peak_activation_bytes"])]
        alloc = r["allocator_peak_bytes"]
        if name == "1f1b" and any(alloc):
            overhead = [m - p for m, p in zip(alloc, predicted_total)]
        rows.append({"name": name, "ok": r["check"]["ok"], "time_ratio": r["measured_us"] / r["predicted_us"],
                     "replay_ratio": r["measured_us"] / r["replayed_us"] if r["replayed_us"] else None,
                     "grad_error": r["check"]["max_grad_rel_error"], "alloc_peak": alloc,
                     "predicted_total": predicted_total,
                     "budget": [d["mem_budget_bytes"] for d in problem["devices"]] if tight else None})
    print(f"LibTorch's overhead (1F1B's allocator peak less its prediction), per device: "
          f"{[f'{o / 2**20:.0f} MiB' for o in overhead] if overhead else 'unknown (no 1f1b run on a GPU)'}")
    print(f"{'run':18s} {'check':>6s} {'measured/predicted':>19s} {'replayed':>9s} {'grad err':>9s}  allocator peak / (predicted + overhead)")
    for r in rows:
        if "time_ratio" not in r:
            print(f"{r['name']:18s} {'FAILED':>6s}  {r['why'][-200:]!r}")
            continue
        mem = "-"  # no allocator on the CPU
        if overhead and any(r["alloc_peak"]):
            mem = " ".join(f"{m / (p + o):.3f}" for m, p, o in zip(r["alloc_peak"], r["predicted_total"], overhead))
        if r["budget"] and any(r["alloc_peak"]):
            mem += "  (peak/budget " + " ".join(f"{m / b:.3f}" for m, b in zip(r["alloc_peak"], r["budget"])) + ")"
        replay = f"{r['replay_ratio']:.3f}" if r["replay_ratio"] else "-"
        print(f"{r['name']:18s} {'OK' if r['ok'] else 'FAILED':>6s} {r['time_ratio']:19.3f} {replay:>9s} "
              f"{r['grad_error']:9.1e}  {mem}")
    json.dump({"rows": rows, "overhead_bytes": overhead}, open(os.path.join(a.dir, "summary.json"), "w"), indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["families", "optimize", "optimized"])
    ap.add_argument("--dir", required=True, help="where profiles, problems, schedules and run JSON go")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap.add_argument("--runtime", default=os.path.join(here, "build-cuda", "optpipe-runtime"))
    ap.add_argument("--optpipe", default=os.path.join(here, "build", "optpipe"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu", "auto"])
    ap.add_argument("--small", action="store_true", help="a tiny model (to check this script on the CPU)")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if a.step == "families":
        families(a)
    elif a.step == "optimize":
        optimize(a)
    else:
        run(a, "optimized", os.path.join(a.dir, "problem-tight.json"),
            ["--schedule", os.path.join(a.dir, "optimized.json")])
        summary(a)


if __name__ == "__main__":
    main()
