#!/usr/bin/env python3
"""Reads optpipe's Megatron-LM and torchtitan exports back the way those frameworks do.

  check_framework_exports.py megatron FLAGS_FILE SCHEDULE_JSON PROBLEM_JSON
  check_framework_exports.py torchtitan TOML_FILE SCHEDULE_JSON PROBLEM_JSON

The layout string is parsed with Megatron-LM's own grammar (parse_str_to_list of
megatron/core/transformer/pipeline_parallel_layer_layout.py, commit d98e8a6, transcribed below)
and validated as its validate_layer_layout does (E first, L last, once each, count of t equal to
--num-layers); the stages must hold the schedule's items per stage. torchtitan's TOML is read with
tomllib; module_fqns_per_model_part must list every module once, in order, stage by stage.
"""
import json
import re
import shlex
import sys
import tomllib


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


def items_per_stage(schedule, problem):
    if "items_per_stage" in schedule:
        return schedule["items_per_stage"]
    return [s["num_layers"] for s in problem["stages"]]


def check_megatron(text, schedule, problem):
    flags = [line for line in text.splitlines() if line.startswith("--")]
    assert len(flags) == 1, text
    args = shlex.split(flags[0])
    value = lambda name: args[args.index(name) + 1]
    pp = int(value("--pipeline-model-parallel-size"))
    num_layers = int(value("--num-layers"))
    stages = megatron_parse_str_to_list(value("--pipeline-model-parallel-layout"))
    assert len(stages) % pp == 0, (len(stages), pp)
    flat = [layer for stage in stages for layer in stage]  # stage order is layer order (looped)
    assert flat[0] == "embedding" and flat[-1] == "loss", flat
    assert flat.count("embedding") == 1 and flat.count("loss") == 1
    assert flat.count("decoder") == num_layers, (flat.count("decoder"), num_layers)
    want = items_per_stage(schedule, problem)
    assert [len(s) for s in stages] == want, ([len(s) for s in stages], want)
    assert pp == problem["num_devices"] and len(stages) // pp == schedule["chunks_per_device"]
    print(f"ok: Megatron layout of {len(stages)} stages on {pp} ranks, {num_layers} layers, items {want}")


def check_torchtitan(text, schedule, problem):
    config = tomllib.loads(text)["parallelism"]
    parts = config["module_fqns_per_model_part"]
    assert config["pipeline_parallel_degree"] == problem["num_devices"]
    assert len(parts) == problem["num_devices"] * schedule["chunks_per_device"]
    flat = [name for part in parts for name in part]
    layers = [n for n in flat if n.startswith("layers.")]
    expected = ["tok_embeddings"] + [f"layers.{i}" for i in range(len(layers))] + ["norm", "output"]
    assert flat == expected, flat
    want = items_per_stage(schedule, problem)
    got = [len(part) - (part[-1] == "output") for part in parts]  # norm + output: the head item
    assert got == want, (got, want)
    style_v = config["pipeline_parallel_schedule"] in ("ZBVZeroBubble", "DualPipeV")
    assert style_v == (schedule["placement"] == "vshape"), config["pipeline_parallel_schedule"]
    print(f"ok: torchtitan {len(parts)} model parts cover {len(flat)} modules once, in order")


def main():
    kind, text_path, schedule_path, problem_path = sys.argv[1:5]
    text = open(text_path).read()
    schedule, problem = json.load(open(schedule_path)), json.load(open(problem_path))
    (check_megatron if kind == "megatron" else check_torchtitan)(text, schedule, problem)


if __name__ == "__main__":
    main()
