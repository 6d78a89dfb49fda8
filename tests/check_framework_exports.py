#!/usr/bin/env python3
"""Reads optpipe's Megatron-LM and torchtitan exports back the way those frameworks do.

  check_framework_exports.py megatron FLAGS_FILE PLAN_JSON [--frameworks DIR]
  check_framework_exports.py torchtitan TOML_FILE PLAN_JSON
  check_framework_exports.py torchtitan-py PY_FILE PLAN_JSON [--frameworks DIR]

PLAN_JSON is the plan file (optpipe.schedule/2 with its problem). Megatron's flags are parsed
with argparse as Megatron declares them, the layout string with Megatron-LM's own grammar
(parse_str_to_list of megatron/core/transformer/pipeline_parallel_layer_layout.py) and the
checks of validate_args (megatron/training/arguments.py) and of the interleaved schedule
(megatron/core/pipeline_parallel/schedules.py) that these flags meet, transcribed at Megatron-LM
commit d98e8a6. torchtitan 0.2's TOML is read with tomllib and its microbatch count derived as
torchtitan/distributed/pipeline_parallel.py does; torchtitan 0.3's Python configuration is run on
a Trainer.Config stand-in.

With --frameworks DIR (what scripts/fetch_framework_sources.sh puts in build/frameworks), the
frameworks' own code checks too: megatron-core 0.16.1's PipelineParallelLayerLayout parses and
validates the layout, and the torchtitan 0.3 configuration runs on torchtitan 0.3.0's own
ParallelismConfig and TrainingConfig (slotted dataclasses: a field name they lack is an error).
Their imports that need a GPU stack are stubbed: the layout class uses parallel_state only when
building a model, configs.py uses torch only for a GPU capability check off by default.
"""
import importlib.util
import os
import argparse
import json
import re
import shlex
import sys
import tomllib
import types


def megatron_parse_str_to_list(layout_str):
    # Transcribed from Megatron-LM: commas are cosmetic, "(...)*n" then "x*n" are unrolled.
    layout_str = layout_str.replace(",", "")
    patterns = [r'\(([^)]+)\)\*(\d+)', r'(.)\*(\d+)']
    for pattern in patterns:
        layout_str = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), layout_str)
    char2layer_type = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
    layout_list = []
    for stage in layout_str.split('|'):
        layout_list.append([])
        for layer_char in stage:
            assert layer_char in char2layer_type, f"Invalid layer character: {layer_char}"
            layout_list[-1].append(char2layer_type[layer_char])
    return layout_list


def items_per_stage(plan):
    if "items_per_stage" in plan:
        return plan["items_per_stage"]
    return [s["num_layers"] for s in plan["problem"]["stages"]]


def megatron_parser():
    # The flags optpipe writes, declared as Megatron declares them (types, store_true).
    p = argparse.ArgumentParser()
    for name in ("--pipeline-model-parallel-size", "--num-layers", "--tensor-model-parallel-size",
                 "--micro-batch-size", "--global-batch-size", "--hidden-size", "--ffn-hidden-size",
                 "--num-attention-heads", "--num-query-groups", "--seq-length", "--max-position-embeddings",
                 "--microbatch-group-size-per-vp-stage", "--recompute-num-layers", "--kv-channels",
                 "--context-parallel-size"):
        p.add_argument(name, type=int)
    p.add_argument("--pipeline-model-parallel-layout", type=str)
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--fp8-format", choices=["e4m3", "hybrid"])  # TransformerConfig.fp8's argparse name
    p.add_argument("--fp8-recipe", choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"])
    for name in ("--sequence-parallel", "--use-distributed-optimizer", "--group-query-attention", "--swiglu", "--bf16",
                 "--tp-comm-overlap", "--fp8-param-gather"):
        p.add_argument(name, action="store_true")
    return p


def check_megatron(text, plan):
    flags = [line for line in text.splitlines() if line.startswith("--")]
    assert len(flags) == 1, text
    args = megatron_parser().parse_args(shlex.split(flags[0]))  # an unknown flag fails here
    pp, num_layers = args.pipeline_model_parallel_size, args.num_layers
    stages = megatron_parse_str_to_list(args.pipeline_model_parallel_layout)
    assert len(stages) % pp == 0, (len(stages), pp)
    vp = len(stages) // pp
    flat = [layer for stage in stages for layer in stage]  # stage order is layer order (looped)
    assert flat[0] == "embedding" and flat[-1] == "loss", flat
    assert flat.count("embedding") == 1 and flat.count("loss") == 1
    assert flat.count("decoder") == num_layers, (flat.count("decoder"), num_layers)
    want = items_per_stage(plan)
    assert [len(s) for s in stages] == want, ([len(s) for s in stages], want)
    problem = plan["problem"]
    assert pp == problem["num_devices"] and vp == plan["chunks_per_device"]
    if FRAMEWORKS:
        layout_class = load_megatron_layout(FRAMEWORKS)
        layout = layout_class(args.pipeline_model_parallel_layout, pp)
        layout.validate_layer_layout(num_layers, None)
        assert layout.virtual_pipeline_model_parallel_size == vp
        print("ok: megatron-core 0.16.1's PipelineParallelLayerLayout accepts the layout")
    # validate_args: interleaving needs pp > 1 (overlap_p2p_comm is on by default, else pp > 2).
    if vp > 1:
        assert pp > 1, "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1"
        m = problem["num_microbatches"]
        group = args.microbatch_group_size_per_vp_stage or pp
        assert pp <= group <= m, f"group size {group} outside [PP={pp}, M={m}]"
        assert not (0 < m % group < pp), f"M % N = {m % group} is neither 0 nor >= PP"
    if args.recompute_granularity == "selective":
        assert args.recompute_method is None
    if args.recompute_granularity == "full":
        assert args.recompute_method is not None and args.recompute_num_layers is not None
    planned = plan.get("planned_for")
    if planned:
        model = planned["model"]
        tp, dp = args.tensor_model_parallel_size, planned["dp"]
        assert tp == planned["tp"]
        assert args.num_attention_heads % tp == 0, "heads divisible by tp"
        groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
        assert groups == model["kv_heads"] and groups % tp == 0
        assert args.global_batch_size % (args.micro_batch_size * dp) == 0
        assert args.global_batch_size // (args.micro_batch_size * dp) == problem["num_microbatches"], \
            "Megatron's microbatch count is the plan's"
        assert args.max_position_embeddings >= args.seq_length == model["seq_len"]
        assert args.sequence_parallel == (tp > 1 and planned["sequence_parallel"])
        assert (args.hidden_size, args.ffn_hidden_size, num_layers) == (model["hidden"], model["ffn"], model["num_layers"])
        assert args.swiglu == (model["mlp"] == "swiglu")
        assert (args.kv_channels or 0) == model.get("head_dim", 0)
        cp = args.context_parallel_size or 1
        assert cp == planned.get("cp", 1)
        if cp > 1:  # validate_args
            assert args.seq_length % (cp * 2) == 0, "seq-length should be a multiple of 2 * context-parallel-size"
        if args.tp_comm_overlap:
            assert args.sequence_parallel, "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled"
        assert (args.fp8_format is not None) == (planned.get("precision", "bf16") == "fp8")
        if args.fp8_param_gather:
            assert args.use_distributed_optimizer, "--fp8-param-gather only supported with distributed optimizer"
    print(f"ok: Megatron flags: {len(stages)} stages on {pp} ranks (vp {vp}), {num_layers} layers, items {want}")


def modules_of(parts, plan, head):
    flat = [name for part in parts for name in part]
    layers = [n for n in flat if n.startswith("layers.")]
    expected = ["tok_embeddings"] + [f"layers.{i}" for i in range(len(layers))] + ["norm", head]
    assert flat == expected, flat
    got = [len(part) - (part[-1] == head) for part in parts]  # norm + head: the head item
    assert got == items_per_stage(plan), (got, items_per_stage(plan))
    return len(flat)


def check_titan_fields(parallelism, training, plan, head):
    problem = plan["problem"]
    assert parallelism.pipeline_parallel_degree == problem["num_devices"]
    parts = parallelism.module_fqns_per_model_part
    assert len(parts) == problem["num_devices"] * plan["chunks_per_device"]
    n = modules_of(parts, plan, head)
    style_v = parallelism.pipeline_parallel_schedule in ("ZBVZeroBubble", "DualPipeV")
    assert style_v == (plan["placement"] in ("vshape", "wave")), parallelism.pipeline_parallel_schedule
    planned = plan.get("planned_for")
    if planned:
        # torchtitan/distributed/pipeline_parallel.py: n_microbatches = local_batch_size // microbatch size.
        assert training.local_batch_size % parallelism.pipeline_parallel_microbatch_size == 0
        n_microbatches = training.local_batch_size // parallelism.pipeline_parallel_microbatch_size
        assert n_microbatches == problem["num_microbatches"], (n_microbatches, problem["num_microbatches"])
        assert parallelism.tensor_parallel_degree == planned["tp"]
        assert parallelism.context_parallel_degree == planned.get("cp", 1)
        dp = parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree
        assert dp == planned["dp"] and training.global_batch_size == training.local_batch_size * dp
        assert training.seq_len == planned["model"]["seq_len"]
    return len(parts), n


def check_torchtitan(text, plan):
    config = tomllib.loads(text)
    parallelism = types.SimpleNamespace(**config["parallelism"])
    training = types.SimpleNamespace(**config.get("training", {}))
    parts, n = check_titan_fields(parallelism, training, plan, "output")
    print(f"ok: torchtitan 0.2 TOML: {parts} model parts cover {n} modules once, in order")


def load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_megatron_layout(root):
    # The package chain the layout module imports from, with parallel_state a stub.
    for name in ("megatron", "megatron.core", "megatron.core.transformer"):
        sys.modules.setdefault(name, types.ModuleType(name))
    stub = types.ModuleType("megatron.core.parallel_state")
    sys.modules["megatron.core.parallel_state"] = stub
    sys.modules["megatron.core"].parallel_state = stub
    base = os.path.join(root, "megatron", "core", "transformer")
    load_file("megatron.core.transformer.enums", os.path.join(base, "enums.py"))
    return load_file("megatron.core.transformer.pipeline_parallel_layer_layout",
                     os.path.join(base, "pipeline_parallel_layer_layout.py")).PipelineParallelLayerLayout


def check_torchtitan_py(text, plan):
    if FRAMEWORKS:
        sys.modules.setdefault("torch", types.ModuleType("torch"))
        configs = load_file("torchtitan_configs", os.path.join(FRAMEWORKS, "torchtitan", "config", "configs.py"))
        config = types.SimpleNamespace(parallelism=configs.ParallelismConfig(), training=configs.TrainingConfig())
        source = "torchtitan 0.3.0's own ParallelismConfig and TrainingConfig"
    else:
        config = types.SimpleNamespace(
            parallelism=types.SimpleNamespace(pipeline_parallel_microbatch_size=1, data_parallel_shard_degree=-1,
                                              data_parallel_replicate_degree=1, tensor_parallel_degree=1),
            training=types.SimpleNamespace(local_batch_size=8, global_batch_size=-1, seq_len=2048))
        source = "stand-ins with torchtitan 0.3's defaults"
    scope = {}
    exec(compile(text, "torchtitan-py", "exec"), scope)
    config = scope["apply_optpipe_plan"](config)
    parts, n = check_titan_fields(config.parallelism, config.training, plan, "lm_head")
    print(f"ok: torchtitan 0.3 configuration on {source}: {parts} model parts cover {n} modules")


FRAMEWORKS = None


def main():
    global FRAMEWORKS
    kind, text_path, plan_path = sys.argv[1:4]
    if sys.argv[4:6] and sys.argv[4] == "--frameworks":
        FRAMEWORKS = sys.argv[5]
    text = open(text_path).read()
    plan = json.load(open(plan_path))
    assert "problem" in plan, f"{plan_path}: a plan file with its problem is expected"
    {"megatron": check_megatron, "torchtitan": check_torchtitan, "torchtitan-py": check_torchtitan_py}[kind](text, plan)


if __name__ == "__main__":
    main()
