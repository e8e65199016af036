"""Measurement and profiling: where the kernels' and the host's time goes. stage_variants times builds
of a kernel with one stage left out (its variants are text substitutions like mutate's plants);
launch_cost and host_overhead split the host's microseconds per call; profile_op makes one call for a
profiler to capture; deepgemm_bench times DeepGEMM's kernels on our benchmark shapes (on the device, with
torch); reference_cost measures the numpy reference's time and peak memory (tests/test_memory_bound.py
bounds it); results_table turns benchmark JSON into the tables of docs/benchmarks.md. Run from the
repository root: `python -m tools.measure.<name> ...`.
"""
