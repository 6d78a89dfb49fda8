// Simulator throughput: ops simulated per second on family schedules of growing size.
//   build/bench_simulate --benchmark_filter=.
#include <benchmark/benchmark.h>

#include "optpipe/families.h"
#include "optpipe/simulate.h"

using namespace optpipe;

// Figures only (what a search scoring many candidates asks for), or with every op's times.
static void simulate_family(benchmark::State& state, const char* family, bool op_times, bool any_timing = false) {
  UniformSpec u;
  u.num_devices = static_cast<int>(state.range(0));
  u.num_microbatches = static_cast<int>(state.range(1));
  u.t_comm_us = 20;
  Result<FamilySchedule> fs = build_family(*find_family(family), make_uniform_problem(u));
  if (!fs.ok()) {
    state.SkipWithError(fs.status.message.c_str());
    return;
  }
  const size_t ops = fs.value.schedule.num_ops();
  for (auto _ : state) {
    SimResult r = simulate(fs.value.problem, fs.value.schedule, {.op_times = op_times, .any_timing = any_timing});
    benchmark::DoNotOptimize(r.timeline.makespan_us);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(ops) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(simulate_family, zb_h1, "zb-h1", false)->Args({8, 32})->Args({16, 64})->Args({32, 256});
BENCHMARK_CAPTURE(simulate_family, zb_v, "zb-v", false)->Args({8, 32})->Args({16, 64})->Args({32, 256});
BENCHMARK_CAPTURE(simulate_family, interleaved, "interleaved-1f1b", false)->Args({8, 32})->Args({32, 256});
BENCHMARK_CAPTURE(simulate_family, pipeoffload, "pipeoffload", false)->Args({8, 32})->Args({32, 256});
BENCHMARK_CAPTURE(simulate_family, zb_v_with_op_times, "zb-v", true)->Args({8, 32})->Args({32, 256});
// With the worst case over every timing (any_timing.h), on a schedule with transfers.
BENCHMARK_CAPTURE(simulate_family, pipeoffload_any_timing, "pipeoffload", false, true)->Args({8, 32})->Args({32, 256});

BENCHMARK_MAIN();
