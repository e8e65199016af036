"""The tools the project's checks rest on: the tests import or run them, `hipindexer info --isa` imports
isa_report and roofline (from a source checkout), and .ci/run runs check_wheel.sh. mutate plants named bugs
in a copy of hsaco_src/ and runs a suite on each build, in a copy of the package (package_copy) whose
kernels/ is that build; emu_plants does the same for the logits tile on the emulator; isa_report reads
gfx950 assembly (resources, the hot loop's mix and cycles) and roofline turns a decode loop's figures into
an estimated time; isa_lint rejects known bad gfx950 patterns; sass_mix reads an sm_90a object's hot loop;
fp8_tc_model models the tensor cores' fp8 accumulation; check_wheel.sh builds a wheel and installs it
with no compiler. Run from the repository root: `python -m tools.support.<name> ...`.
"""
