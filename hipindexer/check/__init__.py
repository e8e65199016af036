"""The correctness sweeps behind `hipindexer check`: the reference's own sweep and the device sweeps of each op
against it, under the gate (hipindexer.gate).

sweep.py: cases, outcomes and the prefill and decode sweeps; covering.py: the pairwise design the decode sweep
samples; cache.py: the paged cache ops against hipindexer.cache, bit for bit.
"""
