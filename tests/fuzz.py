#!/usr/bin/env python3
"""Mutation fuzzer for optpipe's inputs, driving the real command-line tool.

Seeds are a problem, family schedules (with offloads, WAITs and reloads held `after` others) and a
profile. Each case mutates one of them — structurally (keys deleted, duplicated or renamed; wrong
types; deep nesting; truncation) or in a value (huge, tiny, negative, NaN and Infinity literals,
2^63, non-UTF-8 bytes, wrong array lengths, ops that do not exist, dependency cycles) — and runs a
command on it: simulate, compare, optimize, export, report or plan --profile.

A case fails on: an exit code other than 0/1/2/3, a signal, a sanitizer report, "nan" or "inf" in
the output, or running past its time limit. Failing inputs are written to --out (default
tests/fuzz_failures/) to keep as regression files.

  tests/fuzz.py build/optpipe                 # short: 300 cases, fixed seed (CI)
  tests/fuzz.py build/optpipe --cases 3000    # long
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

NON_FINITE = re.compile(rb"(?<![A-Za-z_])-?(nan|inf|infinity)(?![A-Za-z_])", re.IGNORECASE)
SANITIZER = re.compile(rb"(AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|runtime error:)")


def run(cmd, timeout_s, env=None):
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout_s, env=env)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or b"", e.stderr or b"", time.monotonic() - start


def seeds(binary, tmp):
    """The inputs every mutation starts from, made by the tool itself."""
    def out(*args):
        return subprocess.run([binary, *args], capture_output=True, check=True).stdout

    problem = json.loads(out("problem"))
    fast = json.loads(json.dumps(problem))
    fast["host_link"] = {"d2h_gb_per_s": 400.0, "h2d_gb_per_s": 400.0, "latency_us": 5.0}
    fast_path = os.path.join(tmp, "fast.json")
    json.dump(fast, open(fast_path, "w"))
    schedules = {}
    for family in ("1f1b", "zb-v", "interleaved-1f1b", "1f1b-recompute"):
        schedules[family] = (problem, json.loads(out("schedule", "--family", family)))
    pipeoffload = json.loads(out("schedule", "--family", "pipeoffload", "--problem", fast_path))
    # A WAIT and a reload held after another op, so that those fields get mutated too.
    for dev in pipeoffload["devices"]:
        if dev["offloads"] and len(dev["reloads"]) > 1:
            first = dev["offloads"][0].replace("OFFLOAD", "WAIT")
            if first not in dev["compute"]:
                dev["compute"].insert(len(dev["compute"]) // 2, first)
            dev["reloads"][-1]["after"] = [dev["offloads"][0], dev["reloads"][-1]["anchor"]]
            break
    schedules["pipeoffload"] = (fast, pipeoffload)
    profile = {
        "format": "optpipe.profile/1",
        "stages": [{"t_f_us": 900.0, "t_b_us": 1800.0, "t_w_us": 700.0, "act_f_bytes": 1 << 28, "act_w_bytes": -(1 << 26)}
                   for _ in range(8)],
        "t_comm_us": 40.0,
        "static_bytes": [10 << 30] * 8,
    }
    return problem, schedules, profile


# ---- mutations: each takes a parsed document and the rng, returns text ----

def paths(doc, prefix=()):
    """Every (path, value) inside a document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def put(doc, path, value):
    get(doc, path[:-1])[path[-1]] = value


WEIRD_VALUES = [
    0, -1, 1, 2 ** 63, 2 ** 63 - 1, -(2 ** 63), 2 ** 64, 1e308, -1e308, 1e-310, 5e-324, 1e12, 1e13, 1e15,
    0.5, -0.0, 3.7, 4096, 4097, 100000, 100001, 1 << 40, 1 << 62,
    "", "x", "F0 s0", "BW999 s0", "RELOAD0 s99", "OFFLOAD0 s0", "WAIT3 s1", "W-1 s0", "F0 s-1",
    "linear", "vshape", "interleaved", "nosuch", True, False, None, [], {}, [1, 2, 3], {"a": 1},
]
LITERALS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "18446744073709551616", "9223372036854775808"]


def mutate(doc, rng):
    doc = json.loads(json.dumps(doc))
    all_paths = [p for p, _ in paths(doc) if p]
    kind = rng.randrange(13)
    if kind == 0 and all_paths:  # delete a key or element
        p = rng.choice(all_paths)
        parent = get(doc, p[:-1])
        del parent[p[-1]]
    elif kind == 1 and all_paths:  # rename a key
        p = rng.choice([p for p in all_paths if isinstance(p[-1], str)] or all_paths)
        parent = get(doc, p[:-1])
        if isinstance(parent, dict):
            parent[p[-1] + rng.choice(["_x", "s", ""]) + "z"] = parent.pop(p[-1])
    elif kind == 2 and all_paths:  # a weird value
        put(doc, rng.choice(all_paths), rng.choice(WEIRD_VALUES))
    elif kind == 3:  # a non-finite or out-of-range literal, in the text
        text = json.dumps(doc)
        numbers = list(re.finditer(r"(?<=[:\[, ])-?\d+(\.\d+)?(e-?\d+)?(?=[,\]} ])", text))
        if numbers:
            m = rng.choice(numbers)
            return text[:m.start()] + rng.choice(LITERALS) + text[m.end():]
        return text
    elif kind == 4:  # deep nesting in place of a value
        depth = rng.choice([65, 1000, 100000])
        text = json.dumps(doc)
        strings = list(re.finditer(r'"[^"]*"(?=[,\]])', text))
        if strings:
            m = rng.choice(strings)
            return text[:m.start()] + "[" * depth + "]" * depth + text[m.end():]
        return text
    elif kind == 5:  # truncation
        text = json.dumps(doc)
        return text[: rng.randrange(len(text))]
    elif kind == 6:  # a duplicated key (the text allows it; the reader must decide)
        text = json.dumps(doc)
        keys = list(re.finditer(r'"([a-z_0-9]+)": ', text))
        if keys:
            m = rng.choice(keys)
            return text[:m.start()] + m.group(0) + "1, " + text[m.start():]
        return text
    elif kind == 7:  # bytes that are not UTF-8
        text = json.dumps(doc).encode()
        at = rng.randrange(len(text))
        return text[:at] + bytes([rng.choice([0x80, 0xc3, 0xff, 0xfe, 0x00])]) + text[at:]
    elif kind == 8:  # an array one too long or short
        arrays = [p for p, v in paths(doc) if isinstance(v, list) and v]
        if arrays:
            arr = get(doc, rng.choice(arrays))
            if rng.randrange(2):
                arr.append(json.loads(json.dumps(rng.choice(arr))))
            else:
                arr.pop(rng.randrange(len(arr)))
    elif kind == 9:  # swap two ops of a compute list: maybe a cycle across devices
        lists = [p for p, v in paths(doc) if p and p[-1] == "compute" and isinstance(v, list) and len(v) > 1]
        if lists:
            ops = get(doc, rng.choice(lists))
            i, j = rng.randrange(len(ops)), rng.randrange(len(ops))
            ops[i], ops[j] = ops[j], ops[i]
    elif kind == 10:  # an op, anchor or `after` that does not exist
        names = [p for p, v in paths(doc) if isinstance(v, str) and re.match(r"^[A-Z]+\d+ s\d+$", v)]
        if names:
            p = rng.choice(names)
            v = get(doc, p)
            put(doc, p, re.sub(r"\d+", lambda m: str(int(m.group(0)) + rng.choice([1, 7, 1000, 2 ** 31])), v, count=1))
    elif kind == 11:  # a number scaled far up or down
        numbers = [p for p, v in paths(doc) if isinstance(v, (int, float)) and not isinstance(v, bool) and p]
        if numbers:
            p = rng.choice(numbers)
            put(doc, p, get(doc, p) * rng.choice([0, -1, 1e-9, 1e9, 1e30, 10 ** 6]))
    else:  # several at once
        text = doc
        for _ in range(3):
            text = mutate(text, rng)
            try:
                text = json.loads(text)
            except Exception:
                return text
        return json.dumps(text)
    return json.dumps(doc)


def write(path, text):
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_failures"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="optpipe-fuzz-")
    problem, schedules, profile = seeds(args.binary, tmp)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    counts = {}
    failures = 0
    started = time.monotonic()
    for case in range(args.cases):
        family = rng.choice(sorted(schedules))
        base_problem, base_schedule = schedules[family]
        target = rng.choice(["problem", "schedule", "schedule", "profile"])
        p_path, s_path, f_path = (os.path.join(tmp, n) for n in ("p.json", "s.json", "f.json"))
        write(p_path, json.dumps(base_problem))
        write(s_path, json.dumps(base_schedule))
        write(f_path, json.dumps(profile))
        mutated = mutate({"problem": base_problem, "schedule": base_schedule, "profile": profile}[target], rng)
        write({"problem": p_path, "schedule": s_path, "profile": f_path}[target], mutated)
        limit = 0.5
        commands = {
            "problem": [["compare", "-p", p_path], ["optimize", "-p", p_path, "--time-limit", str(limit), "-q"],
                        ["simulate", "-p", p_path, "-s", s_path], ["report", "-p", p_path, "--time-limit", str(limit), "-o", os.path.join(tmp, "r.html")]],
            "schedule": [["simulate", "-p", p_path, "-s", s_path], ["simulate", "-p", p_path, "-s", s_path, "--json"],
                         ["export", "-p", p_path, "-s", s_path, "--format", rng.choice(["svg", "trace", "csv", "json"]), "-o", os.path.join(tmp, "x")],
                         ["simulate", "-p", p_path, "-s", s_path, "--noise", "0.1", "--samples", "5"]],
            "profile": [["plan", "--model", "gpt-tiny", "--cluster", "8xa100-40gb", "--microbatches", "8", "--profile", f_path,
                         "--time-limit", str(limit), "-q", "-o", os.path.join(tmp, "o.json")]],
        }[target]
        cmd = [args.binary] + rng.choice(commands)
        rc, out, err, wall = run(cmd, timeout_s=30 + 1.2 * limit)
        problem_found = None
        if rc is None:
            problem_found = f"ran past {30 + 1.2 * limit:.0f} s"
        elif rc < 0 or rc not in (0, 1, 2, 3):
            problem_found = f"exit {rc}"
        elif SANITIZER.search(err):
            problem_found = "sanitizer report"
        elif NON_FINITE.search(out) or NON_FINITE.search(err):
            problem_found = "non-finite number in the output: " + NON_FINITE.search(out + err).group(0).decode()
        counts[rc] = counts.get(rc, 0) + 1
        if problem_found:
            failures += 1
            os.makedirs(args.out, exist_ok=True)
            stem = os.path.join(args.out, f"case{case}-{target}")
            write(stem + ".json", mutated)
            write(stem + ".cmd", " ".join(cmd).replace(tmp, "<tmp>") + "\n")
            print(f"FAIL case {case} ({target}, {' '.join(cmd[1:3])}): {problem_found}; input kept as {stem}.json")
            sys.stdout.write(err[-800:].decode(errors="replace") + "\n")
    summary = ", ".join(f"exit {k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    print(f"fuzz: {args.cases} cases in {time.monotonic() - started:.0f} s, seed {args.seed}; {summary}; {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
