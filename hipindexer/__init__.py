"""hipindexer: lightning-indexer kernels (fp8 MQA logits) as precompiled HIP code objects, driven from Python."""
__version__ = "0.1.0"
