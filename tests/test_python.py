"""The optpipe Python module, as a training script would use it (run by ctest with PYTHONPATH)."""
import json
import os
import tempfile
import unittest

import optpipe


class PythonModule(unittest.TestCase):
    def test_families(self):
        names = [f["name"] for f in optpipe.families()]
        self.assertIn("zb-v", names)
        self.assertIn("1f1b", names)
        self.assertEqual(len(names), len(set(names)))

    def test_schedule_and_simulate(self):
        built = optpipe.schedule("1f1b")
        figures = optpipe.simulate(built["problem"], built["schedule"])
        # Built-in problem: D=4, M=8, 10 ms passes: (M+D-1)(tF+tB+tW) = 330 ms.
        self.assertAlmostEqual(figures["makespan_us"], 330000.0)
        self.assertEqual(len(figures["devices"]), 4)
        self.assertTrue(figures["fits_budget"])

    def test_v_schedule_on_the_linear_problem(self):
        built = optpipe.schedule("zb-v")
        self.assertEqual(built["schedule"]["placement"], "vshape")
        figures = optpipe.simulate(optpipe.default_problem(), built["schedule"])  # re-cut on the way in
        self.assertAlmostEqual(figures["max_span_us"], 240000.0)

    def test_round_trip(self):
        problem = optpipe.default_problem()
        problem["host_link"] = {"d2h_gb_per_s": 1000, "h2d_gb_per_s": 1000, "latency_us": 0}
        built = optpipe.schedule("pipeoffload", problem)
        self.assertTrue(any(d["offloads"] for d in built["schedule"]["devices"]))  # something to carry
        text = optpipe.schedule_to_json(built["schedule"])
        self.assertEqual(json.loads(text), built["schedule"])
        self.assertEqual(optpipe.schedule_to_json(json.loads(text)), text)
        self.assertEqual(optpipe.schedule_to_json(text), text)

    def test_exports(self):
        built = optpipe.schedule("zb-h1")
        csv, notes = optpipe.export_csv(built["schedule"])
        rows = csv.strip().split("\n")
        self.assertEqual(len(rows), 4)
        self.assertEqual(rows[0].split(",")[:2], ["0F0", "0F1"])
        self.assertEqual(notes, [])
        trace = json.loads(optpipe.export_trace(built["problem"], built["schedule"]))
        spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        self.assertEqual(len(spans), 4 * 8 * 3)
        svg = optpipe.export_svg(built["problem"], built["schedule"], "zb-h1")
        self.assertTrue(svg.startswith("<svg"))

    def test_recompute_and_offload_are_refused_or_noted_in_csv(self):
        schedule = optpipe.schedule("1f1b-recompute", optpipe.default_problem())["schedule"]
        with self.assertRaisesRegex(ValueError, "recompute/offload"):
            optpipe.export_csv(schedule)
        _, notes = optpipe.export_csv(schedule, drop_memory_ops=True)
        self.assertTrue(any("recompute" in n for n in notes))

    def test_compare_with_practitioner_tunings(self):
        # llama2-13b at 36 GiB: no family but full recompute fits as published; tuned, 1F1B fits
        # with a few layers recomputed per stage, and the tuned problem re-simulates to its row.
        problem = optpipe.preset_problem("llama2-13b", "8xa100-40gb", "36GiB", microbatches=16)
        rows = optpipe.compare(problem)
        published = [r for r in rows if r["tuning"] == "as published"]
        # The interleaved families at every chunk count the layers allow.
        self.assertEqual(list(dict.fromkeys(r["family"] for r in published)), [f["name"] for f in optpipe.families()])
        self.assertEqual([r["chunks_per_device"] for r in published if r["family"] == "pipeoffload"], [2, 3, 4, 5])
        tuned = {r["label"]: r for r in rows if r["tuning"] == "recompute" and r["family"] == "1f1b"}
        self.assertEqual(len(tuned), 1)
        row = next(iter(tuned.values()))
        self.assertTrue(row["fits_budget"])
        self.assertTrue(row["label"].startswith("1f1b +recompute "))
        layers = [s["recompute_layers"] for s in row["problem"]["stages"]]
        self.assertEqual(layers, row["recompute_layers"])
        self.assertGreater(sum(layers), 0)
        again = optpipe.simulate(row["problem"], row["schedule"])
        self.assertAlmostEqual(again["makespan_us"], row["makespan_us"])
        # On the families' own chunk counts (at five, pipeoffload fits as published).
        result = optpipe.optimize(problem, max_evaluations=1500, chunks=[1, 2])
        self.assertEqual(result["best_published_family"]["name"], "1f1b-recompute")
        self.assertLess(result["best_family"]["makespan_us"], result["best_published_family"]["makespan_us"])

    def test_preset_and_optimize(self):
        problem = optpipe.preset_problem("gpt-7b", "4xh100", "30GiB", microbatches=8)
        self.assertEqual(problem["num_devices"], 4)
        self.assertEqual(problem["devices"][0]["mem_budget_bytes"], 30 << 30)
        result = optpipe.optimize(problem, max_evaluations=2000)
        self.assertIn(result["outcome"], ("optimal", "feasible"))
        self.assertTrue(result["fits_budget"])
        self.assertTrue(result["fits_any_timing"])
        self.assertEqual(result["timing"], "any")
        self.assertLessEqual(result["lower_bound_us"], result["makespan_us"])
        if result["best_family"]:
            self.assertLessEqual(result["makespan_us"], result["best_family"]["makespan_us"] + 1e-6)
        # The schedule it returns simulates to the same figures.
        again = optpipe.simulate(result["problem"], result["schedule"])
        self.assertAlmostEqual(again["makespan_us"], result["makespan_us"])
        with self.assertRaisesRegex(ValueError, "unknown model"):
            optpipe.preset_problem("gpt-9000", "4xh100")

    def test_timing_and_noise(self):
        # At 30 GiB llama2-13b needs offloads: held to the profile's timings only, the answer
        # counts on them (and noisy samples overflow); by default it is gated, and none does.
        problem = optpipe.preset_problem("llama2-13b", "8xa100-40gb", "30GiB")
        loose = optpipe.optimize(problem, max_evaluations=1500, timing="exact")
        self.assertTrue(loose["fits_budget"])
        self.assertFalse(loose["fits_any_timing"])
        safe = optpipe.optimize(problem, max_evaluations=1500)
        self.assertTrue(safe["fits_any_timing"])
        self.assertGreater(safe["stats"]["waits_added"] + safe["stats"]["reload_gates_added"], 0)
        plain = optpipe.optimize(problem, max_evaluations=1500, placements=["linear"], offload=False, recompute=False)
        self.assertEqual(plain["placement"], "linear")
        self.assertFalse(plain["rules"]["offload"])
        self.assertFalse(any(d["offloads"] for d in plain["schedule"]["devices"]))
        self.assertFalse(any(op.startswith("R") for d in plain["schedule"]["devices"] for op in d["compute"]))
        csv, _ = optpipe.export_csv(plain["schedule"])  # nothing left out
        span = optpipe.optimize(problem, max_evaluations=500, objective="span")
        self.assertEqual(span["objective"], "span")
        self.assertAlmostEqual(span["objective_us"], span["max_span_us"])
        with self.assertRaisesRegex(ValueError, "placements"):
            optpipe.optimize(problem, placements=["ring"])
        noisy = optpipe.evaluate_noise(safe["problem"], safe["schedule"], sigma=0.1, samples=50)
        self.assertEqual(noisy["overflowed"], 0)
        self.assertEqual(noisy["stuck"], 0)
        self.assertLessEqual(noisy["p50_makespan_us"], noisy["p95_makespan_us"])
        risky = optpipe.evaluate_noise(loose["problem"], loose["schedule"], sigma=0.1, samples=50)
        self.assertGreater(risky["overflowed"], 0)
        issues = optpipe.validate(loose["problem"], loose["schedule"])
        self.assertTrue(any("if offloads run late" in i for i in issues), issues)
        with self.assertRaisesRegex(ValueError, "sigma"):
            optpipe.evaluate_noise(safe["problem"], safe["schedule"], sigma=-1)

    def test_plan_and_plan_files(self):
        r = optpipe.plan("gpt-7b", "8xh100", budget="60GiB", microbatches=5, tp=2, dp=2, max_evaluations=300,
                         placements=["interleaved"])
        self.assertNotEqual(r["outcome"], "infeasible")
        optimized = r["schedules"][-1]
        self.assertEqual(optimized["schedule"], "optimized")
        self.assertTrue(any(not row.get("in_table", True) for row in r["schedules"]))  # other chunk counts
        f = r["plan_file"]
        self.assertEqual(f["format"], "optpipe.schedule/2")
        self.assertEqual((f["planned_for"]["tp"], f["planned_for"]["dp"], f["planned_for"]["global_batch"]), (2, 2, 10))
        self.assertAlmostEqual(optpipe.simulate(None, f)["makespan_us"], optimized["makespan_us"])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            optpipe.write_plan(path, f)
            self.assertEqual(optpipe.read_plan(path), f)
            with open(path, "w") as out:
                out.write('{"format": "optpipe.schedule/3"}')
            with self.assertRaisesRegex(ValueError, "format"):
                optpipe.read_plan(path)
        flags = optpipe.export(f, "megatron")
        self.assertIn("--tensor-model-parallel-size 2", flags)
        self.assertIn("--global-batch-size 10", flags)
        self.assertIn("--microbatch-group-size-per-vp-stage 3", flags)  # 5 microbatches on 2 ranks
        self.assertIn("local_batch_size = 5", optpipe.export(f, "torchtitan"))
        with self.assertRaisesRegex(ValueError, "format"):
            optpipe.export(f, "deepspeed")
        # The problem a plan file holds wins over none given; a different one is refused.
        with self.assertRaisesRegex(ValueError, "is not the problem the plan file holds"):
            optpipe.simulate(optpipe.default_problem(), f)
        with self.assertRaisesRegex(ValueError, "budget"):
            optpipe.plan("gpt-7b", "4xh100", budget="lots")

    def test_plan_with_context_parallelism_and_fp8(self):
        r = optpipe.plan("llama3-8b", "16xh100", microbatches=8, tp=2, cp=2, precision="fp8", tp_comm_overlap=True,
                         max_evaluations=200, placements=["linear"])
        planned = r["plan_file"]["planned_for"]
        self.assertEqual((planned["cp"], planned["precision"], planned["tp_comm_overlap"]), (2, "fp8", True))
        self.assertEqual(r["plan_file"]["problem"]["num_devices"], 4)  # 16 GPUs / (tp 2 × cp 2)
        flags = optpipe.export(r["plan_file"], "megatron")
        for flag in ("--context-parallel-size 2", "--fp8-format hybrid", "--tp-comm-overlap"):
            self.assertIn(flag, flags)
        with self.assertRaisesRegex(ValueError, "expected bf16 or fp8"):
            optpipe.plan("llama3-8b", "8xh100", precision="fp4")
        with self.assertRaisesRegex(ValueError, "no FP8 tensor cores"):
            optpipe.plan("llama3-8b", "8xa100-80gb", precision="fp8")

    def test_bad_input_raises_with_the_field(self):
        problem = optpipe.default_problem()
        problem["stages"][2]["t_b_us"] = -1
        with self.assertRaisesRegex(ValueError, r"stages\[2\]\.t_b_us"):
            optpipe.schedule("1f1b", problem)
        with self.assertRaisesRegex(ValueError, "unknown family"):
            optpipe.schedule("nosuch")
        built = optpipe.schedule("1f1b")
        built["schedule"]["devices"][0]["compute"].pop()
        issues = optpipe.validate(built["problem"], built["schedule"])
        self.assertTrue(any("is missing" in i for i in issues), issues)
        with self.assertRaisesRegex(ValueError, "is missing"):
            optpipe.simulate(built["problem"], built["schedule"])


if __name__ == "__main__":
    unittest.main()
