#!/usr/bin/env python3
"""Check a pipeline schedule CSV in PyTorch's "compute_only" form against the
rules torch.distributed.pipelining applies when it loads one with
_PipelineScheduleRuntime._load_csv(filename, format="compute_only").

Why it exists: optpipe exports schedules for PyTorch, and the tests must show an
exported CSV would load there without torch being installed.

Source followed (read through the code index, not run):
  pytorch/pytorch @ 1f1416a34fd869bab1df91ac807ced3e3f11c722
    torch/distributed/pipelining/schedules.py  _action_regex, _Action.from_str,
        _validate_schedule, PipelineScheduleMulti._load_csv
    torch/distributed/pipelining/runtime.py    _PipelineScheduleRuntime._load_csv,
        _prepare_schedule_with_comms, _add_send_recv
What that _load_csv does, in order:
  1. csv.reader over the file (opened with newline=""); row i is rank i, so a
     blank line is a rank with no actions. Each cell goes through
     _Action.from_str: strip; "" -> None (idle); "(a;b;...)T" -> a container of
     sub-actions (meant for OVERLAP_F_B); otherwise _action_regex.match -- a
     prefix match -- or RuntimeError.
  2. _validate_schedule: row count == pp_group_size; scanning each rank's row in
     order, B and I need an earlier F of the same (stage, microbatch), W needs an
     earlier I; a stage met on two ranks is an error; then for every stage in
     range(num_stages): #F == M, #I == #W, #B + (#I + #W) // 2 == M, where each
     count is of *distinct* microbatch indices (PyTorch keeps sets).
  3. _prepare_schedule_with_comms: a type other than F, B, I, W, OVERLAP_F_B
     (UNSHARD, RESHARD, REDUCE_GRAD, SEND_*, RECV_*) is a ValueError.
  4. Lowering (_add_send_recv) places sends/recvs by sweeping the ranks; it
     raises "Malformed compute schedule" when no rank can move (a cross-rank
     ordering deadlock) and asserts on a rank that has no actions at all.
Deliberate differences:
  - PyTorch stops at the first error; this reports all it can (lowering is only
    tried when nothing else failed, as PyTorch would never get there).
  - An F/B/I/W stage outside [0, num_stages) is a KeyError crash in PyTorch;
    here it is a reported violation.
  - strict extras (on by default, --no-strict turns them off): every cell must
    match the regex in full and be a plain action, not the "(...)" form (.match
    would silently ignore trailing text); every compute action needs a
    microbatch index in [0, M); no action may repeat on a rank (the sets above
    would hide a repeated F, which the runtime would then execute twice).
Not confirmed: only this commit was compared. An older copy
(pytorch/pytorch @ 1fd7abc2) has no REDUCE_GRAD in the regex and no sub-action
form; whether its _validate_schedule differs was not checked. PyTorch opens the
file with the locale encoding; this reads UTF-8.
"""
import argparse
import csv
import re
import sys
from typing import NamedTuple, Optional, Tuple

# Copied verbatim from schedules.py so parsing matches PyTorch byte for byte.
ACTION_RE = re.compile(
    r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)"
)
# _ComputationType values: what the "(...)T" form accepts as T.
ALL_TYPES = {"F", "I", "W", "UNSHARD", "RESHARD", "SEND_F", "RECV_F", "SEND_B",
             "RECV_B", "B", "OVERLAP_F_B", "REDUCE_GRAD"}
COMPUTE_TYPES = {"F", "B", "I", "W", "OVERLAP_F_B"}  # _Action.is_compute_op


class Action(NamedTuple):
    stage: int
    kind: str
    mb: Optional[int] = None
    subs: Optional[Tuple["Action", ...]] = None

    def __str__(self):  # same spelling as PyTorch's _Action.__repr__
        if self.subs is not None:
            return "(" + ";".join(map(str, self.subs)) + ")" + self.kind
        return f"{self.stage}{self.kind}{'' if self.mb is None else self.mb}"


def parse(text):
    """Mirror of _Action.from_str; raises ValueError where PyTorch raises."""
    text = text.strip()
    if text == "":
        return None
    if text.startswith("(") and ")" in text:
        end = text.find(")")
        inner = text[1:end]
        subs = [parse(p.strip()) for p in inner.split(";")] if inner.strip() else []
        subs = tuple(a for a in subs if a is not None)
        if text[end + 1:] not in ALL_TYPES:
            raise ValueError(f"invalid computation type {text[end + 1:]!r}")
        return Action(-1, text[end + 1:], None, subs or None)
    m = ACTION_RE.match(text)
    if not m:
        raise ValueError("not of the form [stage][type][microbatch], e.g. 2F0")
    return Action(int(m[1]), m[2], int(m[3]) if m[3] else None)


def leaves(action):
    """PyTorch validates the sub-actions of a container instead of the container."""
    return action.subs if action.subs is not None else (action,)


def check(path, ranks, stages, microbatches, strict=True):
    """Return the list of violations (empty when PyTorch would load the file)."""
    bad, extra = [], []  # PyTorch's own rules; strict extras
    try:
        with open(path, newline="", encoding="utf-8") as f:
            cells = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return [f"cannot read {path}: {e}"]

    rows = []
    for rank, row in enumerate(cells):
        parsed = []
        for pos, cell in enumerate(row):
            where = f"rank {rank}, position {pos}, action {cell.strip()!r}"
            try:
                a = parse(cell)
            except ValueError as e:
                bad.append(f"{where}: {e}")
                a = None
            if a is not None and strict and not ACTION_RE.fullmatch(cell.strip()):
                extra.append(f"{where}: [strict] cell is not exactly one plain action")
            parsed.append(a)
        rows.append(parsed)
    if bad:  # PyTorch raises while parsing; nothing later would run
        return bad + extra

    if len(rows) != ranks:
        bad.append(f"file has {len(rows)} rank rows, expected {ranks}")

    seen = {s: {"F": set(), "B": set(), "I": set(), "W": set()} for s in range(stages)}
    owner = {}
    for rank, row in enumerate(rows):
        done = set()
        for pos, act in enumerate(row):
            if act is None:
                continue
            where = f"rank {rank}, position {pos}, action {act}"
            if act.kind not in COMPUTE_TYPES:
                bad.append(f"{where}: {act.kind} is not allowed in compute_only form")
            for a in leaves(act):
                if a.kind in ("F", "B", "I", "W"):
                    if a.stage not in seen:
                        bad.append(f"{where}: stage {a.stage} not in [0, {stages})")
                        continue
                    got = seen[a.stage]
                    if a.kind in ("B", "I") and a.mb not in got["F"]:
                        bad.append(f"{where}: {a.kind} of microbatch {a.mb} before its F")
                    if a.kind == "W" and a.mb not in got["I"]:
                        bad.append(f"{where}: W of microbatch {a.mb} before its I")
                    got[a.kind].add(a.mb)
                    if strict and (a.mb is None or not 0 <= a.mb < microbatches):
                        extra.append(f"{where}: [strict] microbatch index "
                                     f"{'missing' if a.mb is None else a.mb} "
                                     f"not in [0, {microbatches})")
                    if strict and a in done:
                        extra.append(f"{where}: [strict] repeats an earlier action")
                    done.add(a)
                first = owner.setdefault(a.stage, rank)
                if first != rank:
                    bad.append(f"{where}: stage {a.stage} is on both rank {first} and rank {rank}")

    for s, got in seen.items():
        f, b, i, w = (len(got[k]) for k in "FBIW")
        if f != microbatches:
            bad.append(f"stage {s}: {f} distinct F microbatches, expected {microbatches}")
        if i != w:
            bad.append(f"stage {s}: I and W counts differ (I={i}, W={w})")
        if b + (i + w) // 2 != microbatches:
            bad.append(f"stage {s}: B + (I+W)/2 = {b} + ({i}+{w})//2, "
                       f"expected {microbatches} backwards")

    if not bad:
        bad = lowering_deadlocks(rows, owner, stages)
    return bad + extra


def lowering_deadlocks(rows, owner, stages):
    """Port of runtime._add_send_recv: which ranks get stuck placing sends/recvs.

    An F on stage s > 0 needs s-1's F for that microbatch, an I/B on stage
    s < last needs s+1's I/B; across ranks that arrives as a RECV that the
    sender's rank inserts when it places its action. The UNSHARD/RESHARD/
    REDUCE_GRAD actions PyTorch adds first are always ready, so they are left out.
    """
    queues = {r: [(p, a) for p, a in enumerate(row) if a is not None]
              for r, row in enumerate(rows)}
    empty = [f"rank {r} has no actions (PyTorch's lowering asserts on it)"
             for r, q in queues.items() if not q]
    if empty:
        return empty
    have = {r: set() for r in queues}  # per rank: actions placed and recvs received

    def crosses(a):  # _has_comms: does this action's output go to another rank?
        if a.kind == "F":
            return a.stage != stages - 1 and owner[a.stage + 1] != owner[a.stage]
        if a.kind in ("I", "B"):
            return a.stage != 0 and owner[a.stage - 1] != owner[a.stage]
        return False

    def ready(a, prev):  # _ready_to_schedule
        s, mb = a.stage, a.mb
        if a.kind == "F" and s != 0:
            return Action(s, "RECV_F", mb) in prev or Action(s - 1, "F", mb) in prev
        if a.kind in ("I", "B") and s != stages - 1:
            return any(x in prev for x in (Action(s, "RECV_B", mb),
                                           Action(s + 1, "I", mb), Action(s + 1, "B", mb)))
        return True

    while queues:
        moved = False
        for r in sorted(queues):
            pos, act = queues[r][0]
            if not all(ready(a, have[r]) for a in leaves(act)):
                continue
            for a in leaves(act):
                have[r].add(a)
                if crosses(a):  # validation passed, so every stage has an owner
                    to = a.stage + 1 if a.kind == "F" else a.stage - 1
                    kind = "RECV_F" if a.kind == "F" else "RECV_B"
                    have[owner[to]].add(Action(to, kind, a.mb))
            queues[r].pop(0)
            if not queues[r]:
                del queues[r]
            moved = True
        if not moved:
            return [f"rank {r}, position {q[0][0]}, action {q[0][1]}: waits forever for "
                    f"its input (PyTorch: Malformed compute schedule)"
                    for r, q in sorted(queues.items())]
    return []


def main():
    ap = argparse.ArgumentParser(
        description="Check a compute_only schedule CSV against PyTorch's _load_csv rules.")
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--no-strict", dest="strict", action="store_false",
                    help="apply only PyTorch's own rules")
    args = ap.parse_args()
    bad = check(args.file, args.ranks, args.stages, args.microbatches, args.strict)
    for line in bad:
        print(line)
    if bad:
        return 1
    with open(args.file, newline="", encoding="utf-8") as f:
        n = sum(1 for row in csv.reader(f) for cell in row if cell.strip())
    print(f"ok: {args.ranks} ranks, {args.stages} stages, "
          f"{args.microbatches} microbatches, {n} actions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
