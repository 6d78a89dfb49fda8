"""One training step of a small Llama-like model in PyTorch's pipeline runtime, driven by an optpipe
plan with offloads and recomputes, checked against the same step in one process.

    PYTHONPATH=build/python build-cuda/torch-venv/bin/python examples/torch_pipeline.py \
        [--ranks 2] [--placement vshape] [--budget-activations 2.5] [--problem P --schedule S]

Without --problem/--schedule it plans itself: optpipe's cost model for gpt-tiny's shape (8
layers) on the ranks, a budget of the static memory plus that many stage activations, and
`optpipe.optimize` on it (a few thousand candidates), so the plan offloads and recomputes. The
model is cut into stages by the plan's partition (torchtitan's module names: tok_embeddings,
layers.N, norm, output); every rank is a process on this machine (gloo, CPU). It prints the
plan's memory ops, what each rank ran, and how far each rank's gradients are from one process's.
The tests (tests/test_torch_pipeline.py) drive run_cases() with every family and placement.
"""
import argparse
import copy
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

import optpipe
import optpipe.torch


class Config:
    vocab = 128
    dim = 64
    heads = 4
    ffn = 128
    seq_len = 16
    microbatch_size = 2

    def __init__(self, n_layers, n_microbatches):
        self.n_layers, self.n_microbatches = n_layers, n_microbatches


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """Pre-norm causal self-attention and a SwiGLU MLP, Llama's block without rotary embeddings."""

    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.attention_norm, self.ffn_norm = RMSNorm(cfg.dim), RMSNorm(cfg.dim)
        self.wqkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.w1 = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w2 = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.wqkv(self.attention_norm(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    """The whole model; a stage is a copy with the other stages' modules set to None."""

    def __init__(self, cfg):
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = RMSNorm(cfg.dim)
        self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.output is not None:
            x = self.output(self.norm(x))
        return x


def build_model(cfg, seed=0):
    torch.manual_seed(seed)
    return Transformer(cfg)


def stage_module(model, layers_per_stage, stage):
    """The stage's part of the model: its transformer layers, the embedding on the first stage,
    the norm and output on the last."""
    first = sum(layers_per_stage[:stage])
    keep = {str(i) for i in range(first, first + layers_per_stage[stage])}
    part = copy.deepcopy(model)
    for name in list(part.layers.keys()):
        if name not in keep:
            del part.layers[name]
    if stage > 0:
        part.tok_embeddings = None
    if stage < len(layers_per_stage) - 1:
        part.norm = part.output = None
    return part


def stage_io(cfg, stage, num_stages):
    """A microbatch's input and output of the stage, as PipelineStage takes them (so that it
    infers no shapes at run time)."""
    b, t = cfg.microbatch_size, cfg.seq_len
    x = torch.zeros(b, t, dtype=torch.long) if stage == 0 else torch.zeros(b, t, cfg.dim)
    y = torch.zeros(b, t, cfg.vocab if stage == num_stages - 1 else cfg.dim)
    return x, y


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def make_batch(cfg, step):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(cfg.vocab, (cfg.n_microbatches * cfg.microbatch_size, cfg.seq_len), generator=g)
    return tokens, (tokens + 1) % cfg.vocab


def reference_grads(cfg, model, step):
    """One process, no pipeline: the mean loss over the microbatches and every parameter's gradient."""
    model = copy.deepcopy(model)
    tokens, target = make_batch(cfg, step)
    loss = loss_fn(model(tokens), target)
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


# -- ranks --------------------------------------------------------------------------------------

def _worker(rank, world, init_file, cases, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    results = []
    for case in cases:
        results.append(_run_case(rank, world, case))
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


def _run_case(rank, world, case):
    """One case on this rank: its stages, the schedule, `steps` steps; what it ran and measured."""
    plan = optpipe.torch.load_plan(case["problem"], case["schedule"])
    cfg = Config(sum(plan.layers_per_stage), plan.num_microbatches)
    model = build_model(cfg)
    mine = sorted({int(op.split(" s")[1]) for op in plan.schedule["devices"][rank]["compute"]})
    num_stages = case.get("num_stages", plan.num_stages)
    stages = [PipelineStage(stage_module(model, plan.layers_per_stage, s), s, num_stages, torch.device("cpu"),
                            *stage_io(cfg, s, num_stages)) for s in mine]
    out = {"name": case["name"], "rank": rank}
    try:
        if case.get("mode") == "torch":  # torch's own runtime on the same order, for comparison
            schedule = _PipelineScheduleRuntime([optpipe.torch.gloo_v_stage(s) for s in stages], cfg.n_microbatches,
                                                loss_fn=loss_fn)
            with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
                f.write(plan.csv)
                f.flush()
                schedule._load_csv(f.name, format="compute_only")
        else:
            schedule = optpipe.torch.PlanSchedule(plan, stages, cfg.n_microbatches, loss_fn=loss_fn)
    except ValueError as e:
        out["refused"] = str(e)
        return out
    step_s = []
    for step in range(case.get("steps", 1)):
        for s in stages:
            s.submod.zero_grad(set_to_none=True)
        tokens, target = make_batch(cfg, 0)
        losses = []
        start = time.perf_counter()
        schedule.step(*([tokens] if 0 in mine else []), target=target if num_stages - 1 in mine else None,
                      losses=losses)
        step_s.append(time.perf_counter() - start)
    out["step_s"] = step_s
    out["stats"] = schedule.stats if isinstance(schedule, optpipe.torch.PlanSchedule) else None
    out["planned"] = plan.memory_op_counts(rank)
    ref_loss, ref = reference_grads(cfg, model, 0)
    worst, worst_name = 0.0, ""
    for s in stages:
        for name, p in s.submod.named_parameters():
            r = ref[name]
            err = (p.grad - r).abs().max().item() / max(r.abs().max().item(), 1e-30) if p.grad is not None else math.inf
            if err > worst:
                worst, worst_name = err, name
    out["grad_rel_error"], out["worst_param"] = worst, worst_name
    if losses:
        out["loss"], out["ref_loss"] = sum(l.item() for l in losses) / len(losses), ref_loss
    return out


def run_cases(cases, world):
    """Runs the cases (each: name, problem, schedule; optional steps, mode "torch", num_stages) on
    `world` gloo processes; returns per case the list of the ranks' results."""
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(world, os.path.join(d, "init"), cases, d), nprocs=world, join=True)
        per_rank = []
        for r in range(world):
            with open(os.path.join(d, f"rank{r}.json")) as f:
                per_rank.append(json.load(f))
    return [[per_rank[r][i] for r in range(world)] for i in range(len(cases))]


# -- planning -----------------------------------------------------------------------------------

def tight_problem(ranks, microbatches, budget_activations):
    """gpt-tiny's shape from optpipe's cost model, each device's budget its static memory plus
    `budget_activations` times its largest stage activation."""
    p = optpipe.preset_problem("gpt-tiny", f"{ranks}xa100-40gb", None, microbatches)
    # gpt-tiny computes for microseconds: a host link in proportion, so that offloads pay too.
    p["host_link"] = {"d2h_gb_per_s": 2000, "h2d_gb_per_s": 2000, "latency_us": 0}
    act = max(s["act_f_bytes"] for s in p["stages"])
    for d in p["devices"]:
        d["mem_budget_bytes"] = d["static_bytes"] + int(budget_activations * act)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--placement", default="vshape", choices=["linear", "interleaved", "vshape"])
    ap.add_argument("--budget-activations", type=float, default=2.5)
    ap.add_argument("--problem")
    ap.add_argument("--schedule")
    a = ap.parse_args()
    if bool(a.problem) != bool(a.schedule):
        sys.exit("give both --problem and --schedule, or neither")
    if a.problem:
        problem, schedule = a.problem, a.schedule
    else:
        problem = tight_problem(a.ranks, a.microbatches, a.budget_activations)
        r = optpipe.optimize(problem, max_evaluations=3000, placements=[a.placement], timing="any")
        problem, schedule = r["problem"], r["schedule"]
        print(f"plan: {r['outcome']}, makespan {r['makespan_us'] / 1e3:.3f} ms (cost model), "
              f"{r['schedule']['placement']} with {r['schedule']['chunks_per_device']} chunk(s) per rank")
    try:
        plan = optpipe.torch.load_plan(problem, schedule)
    except ValueError as e:
        sys.exit(str(e))
    if plan.layers_per_stage is None:
        sys.exit("the problem has no layers (a profile's): give one that plan or preset_problem built")
    print(f"partition: transformer layers per stage {','.join(map(str, plan.layers_per_stage))}")
    for note in plan.notes:
        print("csv:", note)
    [ranks] = run_cases([{"name": "example", "problem": plan.problem, "schedule": plan.schedule}], plan.num_devices)
    ok = True
    for r in ranks:
        ok &= r["grad_rel_error"] <= 1e-5 and r["stats"] and all(r["stats"][k] == v for k, v in r["planned"].items())
        print(f"rank {r['rank']}: ran {r['stats']} (plan: {r['planned']}); gradients within "
              f"{r['grad_rel_error']:.2e} relative of one process (worst {r['worst_param']}); "
              f"step {statistics.median(r['step_s']) * 1e3:.1f} ms")
    loss = next(r for r in ranks if "loss" in r)
    print(f"loss {loss['loss']:.6f} vs one process {loss['ref_loss']:.6f}: {'OK' if ok else 'MISMATCH'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
