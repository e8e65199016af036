"""The kernels the catalog marks test_only: build.py writes them beside the shipped ones, in
<kernels>/test-only/ with a manifest of their own, so no wheel carries them. A test asks for one by
naming that manifest: get_kernel("echo_params", device=dev, manifest=manifest_of_test_kernels())."""


def manifest_of_test_kernels():
    """The test-only manifest next to the runtime's default one (of whichever package copy is imported)."""
    from hipindexer.runtime import module
    return module.DEFAULT_MANIFEST.parent / "test-only" / "manifest.json"
