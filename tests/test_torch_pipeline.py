"""optpipe's plans in PyTorch's own pipeline runtime (torch.distributed.pipelining), on 2 and 4
gloo processes on the CPU: every family's CSV export in torch's plain _PipelineScheduleRuntime,
and every family and optimized schedules with and without offloads and recomputes through
optpipe.torch, on linear, interleaved and V-shape placements, and at three chunks a rank looped
and as a wave. Each step's gradients must equal
one process's (relative 1e-5), and each rank must run exactly the plan's offloads, reloads,
recomputes and WAITs. Plans that are malformed or for another stage count are refused before
any step.

Needs torch (CI's venv for the CUDA build) and the optpipe package:
    PYTHONPATH=build/python build-cuda/torch-venv/bin/python tests/test_torch_pipeline.py
"""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import optpipe  # noqa: E402
import optpipe.torch  # noqa: E402
import torch_pipeline as example  # noqa: E402

MAX_REL_ERROR = 1e-5
EVALUATIONS = 1500  # optimizer budget in candidates, so that the plans repeat


def has_memory_ops(schedule):
    return any(d.get("offloads") or any(op.startswith("R") for op in d["compute"]) for d in schedule["devices"])


def loose_problem(ranks, microbatches):
    return optpipe.preset_problem("gpt-tiny", f"{ranks}xa100-40gb", None, microbatches)


def cases_for(ranks, microbatches, families):
    """Families through optpipe.torch (and, where the CSV says everything, in torch's plain
    runtime), optimized schedules without and with memory ops on each placement."""
    cases = []
    for name in families:
        built = optpipe.schedule(name, loose_problem(ranks, microbatches))
        cases.append({"name": f"{name}", **built})
        if not has_memory_ops(built["schedule"]):
            cases.append({"name": f"{name} csv in torch's runtime", "mode": "torch", **built})
    for placement in ("linear", "interleaved", "vshape"):
        r = optpipe.optimize(loose_problem(ranks, microbatches), max_evaluations=EVALUATIONS, placements=[placement],
                             offload=False, recompute=False)
        cases.append({"name": f"optimized {placement}", "problem": r["problem"], "schedule": r["schedule"]})
        r = optpipe.optimize(example.tight_problem(ranks, microbatches, 2.5), max_evaluations=EVALUATIONS,
                             placements=[placement])
        cases.append({"name": f"optimized {placement} under a tight budget", "problem": r["problem"],
                      "schedule": r["schedule"], "memory_ops": True})
    # Three chunks a rank where the layers allow them (gpt-tiny's 10 items on 2 ranks): looped,
    # and a wave (down, up, down the ranks).
    for placement in ("interleaved", "wave") if ranks == 2 else ():
        r = optpipe.optimize(loose_problem(ranks, microbatches), max_evaluations=EVALUATIONS, placements=[placement],
                             chunks=[3])
        assert r["schedule"]["chunks_per_device"] == 3, r["schedule"]["chunks_per_device"]
        cases.append({"name": f"optimized {placement} v3", "problem": r["problem"], "schedule": r["schedule"]})
    return cases


class TorchPipeline(unittest.TestCase):
    RANKS, MICROBATCHES, FAMILIES = 2, 8, [f["name"] for f in optpipe.families()]

    @classmethod
    def setUpClass(cls):
        cls.cases = cases_for(cls.RANKS, cls.MICROBATCHES, cls.FAMILIES)
        # Refused before any step: the first case's plan given stages for one stage more.
        cls.cases.append({**cls.cases[0], "name": "another stage count",
                          "num_stages": optpipe.torch.load_plan(cls.cases[0]["problem"],
                                                                cls.cases[0]["schedule"]).num_stages + 1})
        cls.results = dict(zip((c["name"] for c in cls.cases), example.run_cases(cls.cases, cls.RANKS)))

    def test_gradients_and_memory_ops(self):
        for case in self.cases:
            if case["name"] == "another stage count":
                continue
            with self.subTest(case=case["name"]):
                if case.get("memory_ops"):
                    self.assertTrue(has_memory_ops(case["schedule"]), "a tight budget should need memory ops")
                for r in self.results[case["name"]]:
                    self.assertNotIn("refused", r, r.get("refused"))
                    self.assertLessEqual(r["grad_rel_error"], MAX_REL_ERROR,
                                         f"rank {r['rank']}: worst {r['worst_param']}")
                    if case.get("mode") != "torch":
                        ran = {k: r["stats"][k] for k in r["planned"]}
                        self.assertEqual(ran, r["planned"], f"rank {r['rank']}")
                        if r["planned"]["offloads"]:
                            self.assertGreater(r["stats"]["offloaded_bytes"], 0)
                    if "loss" in r:
                        self.assertAlmostEqual(r["loss"], r["ref_loss"], places=5)

    def test_memory_ops_were_exercised(self):
        planned = [r["planned"] for c in self.cases if c.get("memory_ops") for r in self.results[c["name"]]]
        for kind in ("offloads", "reloads", "recomputes", "waits"):
            self.assertGreater(sum(p[kind] for p in planned), 0, f"no case has {kind}")

    def test_another_stage_count_is_refused(self):
        for r in self.results["another stage count"]:
            self.assertIn("the plan is for", r.get("refused", ""))
            self.assertNotIn("step_s", r)


class TorchPipelineFourRanks(TorchPipeline):
    RANKS, MICROBATCHES = 4, 8
    FAMILIES = ["1f1b", "interleaved-1f1b", "zb-v", "pipeoffload", "dualpipe-v"]


class Refusals(unittest.TestCase):
    def setUp(self):
        self.built = optpipe.schedule("1f1b", loose_problem(2, 4))

    def test_malformed_plan(self):
        broken = copy.deepcopy(self.built["schedule"])
        broken["devices"][1]["compute"].pop()
        with self.assertRaisesRegex(ValueError, "does not validate"):
            optpipe.torch.load_plan(self.built["problem"], broken)
        with self.assertRaisesRegex(ValueError, "malformed"):
            optpipe.torch.load_plan(self.built["problem"], {"devices": "none"})
        with self.assertRaisesRegex(ValueError, "not JSON"):
            optpipe.torch.load_plan(self.built["problem"], "{not json")
        with self.assertRaisesRegex(ValueError, "cannot read"):
            optpipe.torch.load_plan("/nonexistent/problem.json", self.built["schedule"])

    def test_over_budget_plan(self):
        problem = copy.deepcopy(self.built["problem"])
        for d in problem["devices"]:
            d["mem_budget_bytes"] = d["static_bytes"] + 1
        with self.assertRaisesRegex(ValueError, "does not validate"):
            optpipe.torch.load_plan(problem, self.built["schedule"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
