"""Writes the large memory-bound instance of issue 28: D devices × M microbatches of the
built-in problem's stage 1 (10 ms passes, 2 GiB activations), each device on its own host link,
every device's budget = static memory + half of 1F1B's activation peak (its first device's).

    PYTHONPATH=build/python python3 bench/make_large_problem.py --devices 64 --microbatches 512 -o large.json
    ./build/optpipe optimize --problem large.json --time-limit 60
"""
import argparse
import json

import optpipe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=512)
    ap.add_argument("--budget-share", type=float, default=0.5, help="of 1F1B's activation peak")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    p = optpipe.default_problem()
    stage = p["stages"][1]
    p["stages"] = [dict(stage) for _ in range(a.devices)]
    p["devices"] = [dict(p["devices"][0], host_link=d) for d in range(a.devices)]
    p["num_devices"], p["num_microbatches"] = a.devices, a.microbatches
    for d in p["devices"]:
        d["mem_budget_bytes"] = 1 << 50
    figures = optpipe.simulate(p, optpipe.schedule("1f1b", p)["schedule"])
    peak_activations = max(f["peak_bytes"] - d["static_bytes"] for d, f in zip(p["devices"], figures["devices"]))
    for d in p["devices"]:
        d["mem_budget_bytes"] = d["static_bytes"] + int(a.budget_share * peak_activations)
    with open(a.out, "w") as f:
        json.dump(p, f)


if __name__ == "__main__":
    main()
