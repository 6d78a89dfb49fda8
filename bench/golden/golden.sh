#!/bin/bash
# Writes deterministic outputs (fixed seeds, --max-evaluations) of a build into a folder, so that
# two builds can be compared with bench/golden/compare.py: `bench/golden/golden.sh build /tmp/a`.
set -u
B=${1:-./build}; O=${2:-/tmp/golden}
mkdir -p $O/problems
$B/bench_suite --quick --threads 1 --suite bench/suite.json --problems-out $O/problems --out $O/quick.json > $O/quick.txt 2>&1
for f in $O/problems/*.json; do n=$(basename $f .json)
  $B/optpipe optimize -p $f --max-evaluations 1500 --threads 1 --seed 3 --json -q > $O/opt_$n.json 2>&1
  $B/optpipe compare -p $f --json > $O/cmp_$n.json 2>&1
done
$B/optpipe plan --model llama2-7b --cluster 8xa100-80gb --budget 40GiB --max-evaluations 800 --threads 1 --json -q -o $O/plan_s2.json > $O/plan.json 2>&1
$B/optpipe simulate --family zb-v --json > $O/sim.json 2>&1
$B/optpipe simulate --family 1f1b --noise 0.1 --samples 20 --json > $O/noise.json 2>&1
$B/optpipe plan --model llama2-7b --cluster 8xa100-80gb --budget 40GiB --max-evaluations 800 --threads 1 -q -o $O/plan_s.json > $O/plan.txt 2>&1
$B/optpipe compare -p $O/problems/u-d4-m8-tight.json > $O/cmp.txt 2>&1
$B/optpipe simulate --family zb-v > $O/sim.txt 2>&1
$B/optpipe optimize -p $O/problems/u-d4-m8-tight.json --max-evaluations 1500 --threads 1 --seed 3 -q > $O/opt.txt 2>&1
