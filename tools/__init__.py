"""Developer tools of the source checkout (no wheel carries them), in three folders by purpose:

    support/   what the project's checks rest on: the mutation harness and the package copies it builds
               into, the gfx950 ISA report and lint, the roofline estimate, the SASS mix, the accumulation
               model, the wheel check (tests import or run them, `hipindexer info --isa` imports the ISA
               report and the roofline, .ci/run runs check_wheel.sh)
    measure/   measurements and profiling: stage-removal builds, launch and host costs, the profiler's one
               call, DeepGEMM beside ours, the reference's cost, the benchmark tables
    device/    shell scripts for one call on a GPU machine (run from the repository root), and the staging
               of what such a call builds there

The Python tools are modules of this package: run them from the repository root with
`python -m tools.support.mutate ...`, and import them as `from tools.support import roofline`.
"""
