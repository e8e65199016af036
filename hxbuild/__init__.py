"""The kernel build behind build.py: catalog kernels in, code objects and a manifest out.

    toolchains.py          which compiler builds each target, and the driver its objects need
    jobs.py                one compile per kernel x target x variant: flags and the source hash
    compile.py             runs one job and describes the object it made
    resources.py           what an object uses (registers, LDS, shared memory, occupancy),
                           read from its metadata and cross-checked against the compiler's report
    manifest.py            manifest.json: which entries are current, --check, writing it
    trees.py               where each kernel goes: shipped, or test-only (never in a wheel)
    builder.py             an incremental build of every tree
    emu.py                 the emulator target (emu-gfx950): the CPU emulator's libraries and each
                           gfx950 kernel compiled for it (development and CI only, never in a wheel)
    hipindexer_modules.py  the package files the build reads (catalog, codeobj)
    process.py             running a tool; the build's errors

Stdlib only, plus msgpack for the AMDGPU metadata: a wheel build runs this in
an isolated environment that has neither numpy nor the hipindexer package.
"""
