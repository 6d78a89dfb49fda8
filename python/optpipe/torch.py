"""optpipe.torch: an optpipe plan run by PyTorch's own pipeline runtime, memory decisions included.

    import optpipe.torch
    plan = optpipe.torch.load_plan("problem.json", "schedule.json")  # refused here if it is not valid
    schedule = optpipe.torch.PlanSchedule(plan, stages, n_microbatches=8, loss_fn=loss_fn)
    schedule.step(x, target=y)  # on every rank, as any torch pipeline schedule
    schedule.stats              # what this rank ran: offloads, reloads, recomputes, waits

The order is optpipe's PyTorch CSV (microbatches renumbered the way torch's runtime needs),
loaded into torch.distributed.pipelining's `_PipelineScheduleRuntime`. The plan's memory
decisions ride on the stages: each stage is given a subclass of its own class (as FSDP2's
`fully_shard` does) whose forward and backward calls run the plan's memory ops around them:
- offload: the microbatch's saved activations (caught by saved-tensor hooks) go to host memory
  after its F, in the plan's FIFO order: on a GPU to pinned memory on a side stream, on the CPU
  to a separate host copy (so the mechanics and the gradients are tested without a GPU);
- reload: issued once its anchor op starts and its `after` ops are done, in the plan's order;
  a WAIT holds the next op until its offload is done;
- recompute: F keeps none of the microbatch's saved activations; the plan's R re-runs the
  stage's forward (with F's random state) and refills them before the backward;
- V-shape on gloo: the warm-up sends and receives a stage would address to its own rank (the
  V's turn) are left out.
Parameters are never moved. torch is imported only when this module is.
"""
import abc
import json
import os
import re
import tempfile

import torch
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from . import _optpipe

__all__ = ["Plan", "load_plan", "PlanSchedule", "gloo_v_stage"]

_OP = re.compile(r"^(F|B|W|BW|R|WAIT|OFFLOAD|RELOAD)(\d+) s(\d+)$")
_TORCH_KIND = {"F": "F", "B": "I", "W": "W", "BW": "B"}  # optpipe's op → torch's action letter


class Plan:
    """A validated plan: the problem (re-cut to the schedule's placement and partition) and the
    schedule as dicts, their optpipe JSON forms."""

    def __init__(self, problem, schedule):
        self.problem = _optpipe.problem_for(problem, schedule)
        self.schedule = schedule
        self.num_devices = len(schedule["devices"])
        self.num_stages = self.num_devices * schedule["chunks_per_device"]
        self.num_microbatches = problem["num_microbatches"]
        self.csv, notes = _optpipe.export_csv(schedule, drop_memory_ops=True)
        # What the CSV leaves out, the stages run; what is left to say is the renumbering.
        self.notes = [n for n in notes if n.startswith("microbatches renumbered")]

    @property
    def layers_per_stage(self):
        """Transformer layers per stage (the embedding and head left out), or None for a problem
        without its layers (a profile's)."""
        layers = self.problem.get("layers")
        if not layers:
            return None
        counts = [st["num_layers"] for st in self.problem["stages"]]
        counts[0] -= layers[0].get("kind") == "embedding"
        counts[-1] -= layers[-1].get("kind") == "head"
        return counts

    def memory_op_counts(self, device):
        """The plan's offloads, reloads, recomputes and WAITs on one device."""
        d = self.schedule["devices"][device]
        return {
            "offloads": len(d.get("offloads", [])),
            "reloads": len(d.get("reloads", [])),
            "recomputes": sum(op.startswith("R") for op in d["compute"]),
            "waits": sum(op.startswith("WAIT") for op in d["compute"]),
        }


def _as_dict(source, what):
    if isinstance(source, dict):
        return source
    text = source
    if isinstance(source, (str, os.PathLike)) and not str(source).lstrip().startswith("{"):
        try:
            with open(source) as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"optpipe.torch: cannot read the {what} {source}: {e.strerror}") from None
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"optpipe.torch: the {what} is not JSON: {e}") from None


def load_plan(problem, schedule):
    """A plan from the problem and schedule (paths, JSON text or dicts), refused with ValueError
    when optpipe's validator finds anything wrong with it (malformed, incomplete, deadlocking,
    over its budget) or when torch's runtime could not run it."""
    problem, schedule = _as_dict(problem, "problem"), _as_dict(schedule, "schedule")
    try:
        issues = _optpipe.validate(problem, schedule)
    except ValueError as e:
        raise ValueError(f"optpipe.torch: the plan is malformed: {e}") from None
    if issues:
        more = f" (and {len(issues) - 3} more)" if len(issues) > 3 else ""
        raise ValueError("optpipe.torch: the plan does not validate: " + "; ".join(issues[:3]) + more)
    stages = problem.get("stages", [])
    if any(s.get("recompute_layers", 0) for s in stages):
        raise ValueError(
            "optpipe.torch: the problem recomputes some layers inside stages (recompute_layers); "
            "this runtime recomputes whole stages for the plan's R ops only")
    return Plan(problem, schedule)


def _parse(name):
    m = _OP.match(name)
    if not m:
        raise ValueError(f"optpipe.torch: not an op name: {name!r}")
    return m.group(1), int(m.group(2)), int(m.group(3))


class _Saved:
    """One activation a forward saved for its backward; where it is now."""

    __slots__ = ("tensor", "host", "event")

    def __init__(self, tensor):
        self.tensor, self.host, self.event = tensor, None, None


class _Stash:
    """What one F of an offloaded or recomputed microbatch saved, through saved-tensor hooks.
    Parameters are packed as themselves; every other tensor behind a _Saved slot."""

    def __init__(self, name, recompute, param_storages):
        self.name, self.recompute, self.param_storages = name, recompute, param_storages
        self.slots = []  # a _Saved, or None where a parameter was packed as itself
        self.inputs = None  # (args, kwargs, rng states), for the recompute
        self.seen = {}  # id(tensor) → its slot: a tensor saved twice is moved once

    def _is_param(self, t):
        return t.untyped_storage().data_ptr() in self.param_storages

    def pack(self, t):
        if self._is_param(t):
            self.slots.append(None)
            return t
        slot = None if self.recompute else self.seen.get(id(t))
        if slot is None:
            slot = _Saved(None if self.recompute else t)
            if not self.recompute:
                self.seen[id(t)] = slot
        self.slots.append(slot)
        return slot

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        if packed.tensor is None:
            why = "its R has not run" if self.recompute else "its reload has not run"
            raise RuntimeError(f"optpipe.torch: the backward of {self.name} needs its activations, but {why}")
        if packed.event is not None:
            torch.cuda.current_stream().wait_event(packed.event)
        return packed.tensor

    def unique(self):
        return list(self.seen.values())


class _Copier:
    """Moves activations between device and host: on a GPU on two side streams (one each way)
    into pinned memory; on the CPU synchronously into a separate host copy."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.d2h = torch.cuda.Stream(device)
            self.h2d = torch.cuda.Stream(device)

    def offload(self, slot):
        t = slot.tensor
        if not self.cuda:
            slot.host = t.clone()
        else:
            self.d2h.wait_stream(torch.cuda.current_stream(t.device))
            with torch.cuda.stream(self.d2h):
                slot.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                slot.host.copy_(t, non_blocking=True)
                slot.event = torch.cuda.Event()
                slot.event.record(self.d2h)
            t.record_stream(self.d2h)  # its memory is reused only after the copy
        slot.tensor = None

    def wait(self, slot):
        if slot.event is not None:
            slot.event.synchronize()

    def reload(self, slot, device):
        if not self.cuda:
            slot.tensor, slot.host = slot.host.clone(), None
            return
        with torch.cuda.stream(self.h2d):
            self.h2d.wait_event(slot.event)  # the offload's copy is done
            t = torch.empty(slot.host.shape, dtype=slot.host.dtype, device=device)
            t.copy_(slot.host, non_blocking=True)
            slot.event = torch.cuda.Event()
            slot.event.record(self.h2d)
        t.record_stream(torch.cuda.current_stream(device))
        slot.tensor, slot.host = t, None


class _RankRun:
    """One rank's walk through its device's ops in the plan during a step: checks that torch runs
    the plan's compute ops in the plan's order, and runs the memory ops around them."""

    def __init__(self, plan, rank, stages):
        self.rank = rank
        device = plan.schedule["devices"][rank]
        rows = plan.csv.splitlines()
        cells = [c for c in rows[rank].split(",") if c] if rank < len(rows) else []
        self.ops = []  # (kind, plan microbatch, stage, torch action or None)
        for name in device["compute"]:
            kind, mb, stage = _parse(name)
            self.ops.append([kind, mb, stage, None])
        torch_ops = [op for op in self.ops if op[0] in _TORCH_KIND]
        if len(torch_ops) != len(cells):
            raise ValueError(f"optpipe.torch: rank {rank}: the plan's CSV has {len(cells)} actions for "
                             f"{len(torch_ops)} compute ops")
        for op, cell in zip(torch_ops, cells):  # the same op, its microbatch perhaps renumbered
            if not re.fullmatch(rf"{op[2]}{_TORCH_KIND[op[0]]}\d+", cell):
                raise ValueError(f"optpipe.torch: rank {rank}: CSV action {cell} is not {op[0]}{op[1]} s{op[2]}")
            op[3] = cell
        self.offload_order = [_parse(n)[1:] for n in device.get("offloads", [])]
        self.offload_index = {key: i for i, key in enumerate(self.offload_order)}
        self.recomputed = {(mb, s) for kind, mb, s, _ in self.ops if kind == "R"}
        self.reload_order = []
        for r in device.get("reloads", []):
            after = r.get("after", [])
            after = [after] if isinstance(after, str) else after
            self.reload_order.append((_parse(r["op"])[1:], _parse(r["anchor"]), [_parse(a) for a in after]))
        self.stages = {s.stage_index: s for s in stages}
        self.copier = _Copier(stages[0].device)
        self.param_storages = {p.untyped_storage().data_ptr() for s in stages for p in s.submod.parameters()}
        self.reset()

    def reset(self):
        self.pos = 0
        self.started, self.done = set(), set()  # (kind, microbatch, stage)
        self.stashes = {}  # (microbatch, stage) → _Stash
        self.next_offload = self.next_reload = 0
        self.stats = {"offloads": 0, "reloads": 0, "recomputes": 0, "waits": 0, "offloaded_bytes": 0}

    # -- the plan's walk --------------------------------------------------------------------
    def begin(self, stage, torch_kind, torch_mb):
        """Before torch runs an action: the plan's R and WAIT ops up to it, then its start.
        Returns the stash its F saves into (None: kept as torch keeps it)."""
        self._run_memory_ops()
        action = f"{stage}{torch_kind}{torch_mb}"
        if self.pos >= len(self.ops) or self.ops[self.pos][3] != action:
            want = self.ops[self.pos][3] if self.pos < len(self.ops) else "nothing more"
            raise RuntimeError(f"optpipe.torch: rank {self.rank}: torch runs {action} where the plan has {want}")
        kind, mb, s, _ = self.ops[self.pos]
        self._start((kind, mb, s))
        if kind != "F" or ((mb, s) not in self.offload_index and (mb, s) not in self.recomputed):
            return None
        stash = _Stash(f"F{mb} s{s}", (mb, s) in self.recomputed, self.param_storages)
        self.stashes[(mb, s)] = stash
        return stash

    def end(self):
        kind, mb, s, _ = self.ops[self.pos]
        self.pos += 1
        self._finish((kind, mb, s))

    def finish_step(self):
        self._run_memory_ops()
        if self.pos != len(self.ops) or self.next_offload != len(self.offload_order) or \
                self.next_reload != len(self.reload_order):
            raise RuntimeError(
                f"optpipe.torch: rank {self.rank}: the step ended with {len(self.ops) - self.pos} compute op(s), "
                f"{len(self.offload_order) - self.next_offload} offload(s) and "
                f"{len(self.reload_order) - self.next_reload} reload(s) of the plan not run")
        self.stashes.clear()

    def _run_memory_ops(self):
        """The plan's R and WAIT ops from here up to its next op that torch runs."""
        while self.pos < len(self.ops) and self.ops[self.pos][3] is None:
            kind, mb, s, _ = self.ops[self.pos]
            self._start((kind, mb, s))
            if kind == "R":
                self._recompute(mb, s)
            else:
                self._offload_through((mb, s))
                for slot in self.stashes[(mb, s)].unique():
                    self.copier.wait(slot)
                self.stats["waits"] += 1
            self.pos += 1
            self._finish((kind, mb, s))

    # -- the memory ops ----------------------------------------------------------------------
    def _start(self, op):
        self.started.add(op)
        self._issue_reloads()

    def _finish(self, op):
        self.done.add(op)
        self._issue_offloads()
        self._issue_reloads()

    def _issue_offloads(self):
        """Offloads in the plan's order, each once its F is done."""
        while self.next_offload < len(self.offload_order):
            mb, s = self.offload_order[self.next_offload]
            if ("F", mb, s) not in self.done:
                return
            for slot in self.stashes[(mb, s)].unique():
                self.stats["offloaded_bytes"] += slot.tensor.numel() * slot.tensor.element_size()
                self.copier.offload(slot)
            self.stats["offloads"] += 1
            self.next_offload += 1

    def _offload_through(self, key):
        """Makes sure the offload of `key` (a WAIT's, or a reload's own) has been issued."""
        self._issue_offloads()
        if self.offload_index[key] >= self.next_offload:
            raise RuntimeError(f"optpipe.torch: rank {self.rank}: OFFLOAD{key[0]} s{key[1]} is needed before "
                               f"an offload ahead of it in the plan's order could start")

    def _issue_reloads(self):
        """Reloads in the plan's order, each once its anchor has started and its `after` ops and
        its offload are done."""
        while self.next_reload < len(self.reload_order):
            (mb, s), anchor, after = self.reload_order[self.next_reload]
            if anchor not in self.started or not all(self._is_done(a) for a in after):
                return
            self._offload_through((mb, s))
            device = self.stages[s].device
            for slot in self.stashes[(mb, s)].unique():
                self.copier.reload(slot, device)
            self.stats["reloads"] += 1
            self.next_reload += 1

    def _is_done(self, op):
        kind, mb, s = op
        if kind == "OFFLOAD":
            return self.offload_index[(mb, s)] < self.next_offload
        return op in self.done

    def _recompute(self, mb, s):
        stash = self.stashes.get((mb, s))
        if stash is None or stash.inputs is None:
            raise RuntimeError(f"optpipe.torch: rank {self.rank}: R{mb} s{s} before its F")
        args, kwargs, rng = stash.inputs
        stage = self.stages[s]
        refilled = []

        def pack(t):
            refilled.append(t)
            return t

        devices = [stage.device] if stage.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(rng[0])
            if devices:
                torch.cuda.set_rng_state(rng[1], stage.device)
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                super(_OptpipeStage, stage).forward_maybe_with_nosync(*args, **kwargs)
        if len(refilled) != len(stash.slots):
            raise RuntimeError(
                f"optpipe.torch: R{mb} s{s}: the stage's forward saved {len(refilled)} tensors, its F "
                f"{len(stash.slots)}: a recompute needs a forward that saves the same tensors each time")
        for slot, t in zip(stash.slots, refilled):
            if slot is not None:
                slot.tensor = t
        stash.inputs = None
        self.stats["recomputes"] += 1


class _NoSelfSends(abc.ABC):
    """Leaves out the warm-up sends and receives a stage would address to its own rank: at the
    V's turn two adjacent stages share a rank, and gloo has no pair to itself. (An ABC as torch's
    stage base is, or Python refuses the __class__ swap.)"""

    def _get_init_p2p_neighbors_ops(self):
        return [op for op in super()._get_init_p2p_neighbors_ops() if op.group_peer != self.group_rank]


class _OptpipeStage(_NoSelfSends):
    """Mixed into each stage's own class: the plan's memory ops around torch's calls."""

    _optpipe_run = None
    _optpipe_stash = None

    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None, save_forward_output=True):
        stash = self._optpipe_run.begin(self.stage_index, "F", fwd_chunk_id)
        if stash is None:
            out = super().forward_one_chunk(fwd_chunk_id, args, kwargs, save_forward_output)
        else:
            self._optpipe_stash = stash
            try:
                with torch.autograd.graph.saved_tensors_hooks(stash.pack, stash.unpack):
                    out = super().forward_one_chunk(fwd_chunk_id, args, kwargs, save_forward_output)
            finally:
                self._optpipe_stash = None
        self._optpipe_run.end()
        return out

    def forward_maybe_with_nosync(self, *args, **kwargs):
        stash = self._optpipe_stash
        if stash is not None and stash.recompute:
            cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
            stash.inputs = (args, kwargs, (torch.get_rng_state(), cuda_rng))
        return super().forward_maybe_with_nosync(*args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
        self._optpipe_run.begin(self.stage_index, "B" if full_backward else "I", bwd_chunk_id)
        super().backward_one_chunk(bwd_chunk_id, loss=loss, full_backward=full_backward, last_backward=last_backward)
        self._optpipe_run.end()

    def backward_weight_one_chunk(self, bwd_chunk_id, last_backward=False):
        self._optpipe_run.begin(self.stage_index, "W", bwd_chunk_id)
        super().backward_weight_one_chunk(bwd_chunk_id, last_backward=last_backward)
        self._optpipe_run.end()


def _adopt(stage, mixin):
    """Gives the stage a subclass of its own class with `mixin` first, as FSDP2's fully_shard does."""
    cls = type(stage)
    if not issubclass(cls, mixin):
        stage.__class__ = type(mixin.__name__.strip("_") + cls.__name__, (mixin, cls), {})
    return stage


def gloo_v_stage(stage):
    """A torch PipelineStage that runs V-shape schedules on gloo (torch's own ZBVZeroBubble and
    DualPipeV too, and optpipe's CSV exports in _PipelineScheduleRuntime): the same stage, its
    warm-up to its own rank left out. PlanSchedule does this itself."""
    return _adopt(stage, _NoSelfSends)


class PlanSchedule(_PipelineScheduleRuntime):
    """torch's pipeline runtime driven by an optpipe plan: this rank's stages (torch
    PipelineStages, or subclasses) run the plan's order and its offloads, reloads and recomputes.
    Raises ValueError before any work when the stages are not the plan's for this rank."""

    def __init__(self, plan, stages, n_microbatches, loss_fn=None, scale_grads=True, **kwargs):
        if not isinstance(plan, Plan):
            raise ValueError("optpipe.torch: plan: expected optpipe.torch.load_plan(problem, schedule)")
        if not stages:
            raise ValueError("optpipe.torch: no stages given")
        rank, world = stages[0].group_rank, stages[0].group_size
        if stages[0].num_stages != plan.num_stages or world != plan.num_devices:
            raise ValueError(
                f"optpipe.torch: the plan is for {plan.num_stages} stages on {plan.num_devices} ranks, the "
                f"stages for {stages[0].num_stages} on {world}")
        if n_microbatches != plan.num_microbatches:
            raise ValueError(f"optpipe.torch: the plan has {plan.num_microbatches} microbatches, "
                             f"n_microbatches is {n_microbatches}")
        planned = sorted({_parse(op)[2] for op in plan.schedule["devices"][rank]["compute"]})
        given = sorted(s.stage_index for s in stages)
        if planned != given:
            raise ValueError(f"optpipe.torch: rank {rank} holds stages {planned} in the plan, "
                             f"but was given stages {given}")
        run = _RankRun(plan, rank, stages)
        for stage in stages:
            _adopt(stage, _OptpipeStage)._optpipe_run = run
        super().__init__(stages, n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads, **kwargs)
        self._optpipe_run = run
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "schedule.csv")
            with open(path, "w") as f:
                f.write(plan.csv)
            self._load_csv(path, format="compute_only")

    @property
    def stats(self):
        """What this rank ran in the last step: offloads, reloads, recomputes, waits, offloaded_bytes."""
        return dict(self._optpipe_run.stats)

    def step(self, *args, **kwargs):
        self._optpipe_run.reset()
        out = super().step(*args, **kwargs)
        self._optpipe_run.finish_step()
        return out
