"""The benchmarks behind `hipindexer bench`, by the method of docs/benchmarks.md.

timing.py: how a call is timed and the ceilings measured on the same run; prefill.py, decode.py, cache.py: one
op's benchmark rows each.
"""
