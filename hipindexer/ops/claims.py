"""The claim pairs through which the sm_90a decode logits kernel deals the tail of a batch's work.

paged_mqa_logits_wgmma_tma gives each unit a static share of all but the last part of a batch's work and deals
that tail in chunks to the units that come free first (hsaco_src/sm90a/decode_feed.h, each_piece). The units of
one launch count their claims in a pair of 32-bit words: the next chunk, and the units that have seen the chunks
run out; the last of those returns the pair to zero, so it is zero again for the next launch that uses it. Two
launches that count in one pair at the same time would take each other's chunks, so each stream gets a pair of its
own: launches on one stream run one after another.

The pairs live in the kernel's code object (`hx_claim_pairs`, zero when the driver loads it), so handing one out
allocates nothing and copies nothing: a stream's first call may come inside a graph capture. A captured graph
keeps the pair of the stream it was captured on, which the op cannot see at replay: two graphs captured on one
stream must not run at the same time, nor a graph beside calls on its capture stream. Past PAIRS streams on one
device, a stream gets no pair and its launches deal nothing (each unit keeps its static share, as with
deal_share=0). A launch that deals nothing (the default) takes no pair (hipindexer.ops.decode.prepare_decode).
"""
from __future__ import annotations

import threading

PAIRS = 1024  # hx_claim_pairs' pairs (hsaco_src/sm90a/paged_mqa_logits_wgmma_tma.hip)
SYMBOL = "hx_claim_pairs"

_lock = threading.Lock()


class ClaimPairs:
    """f(stream handle) -> the device address of that stream's pair in one loaded kernel (0 once they run out)."""

    def __init__(self, kernel):
        base, nbytes = kernel.global_address(SYMBOL)
        if nbytes != 8 * PAIRS:
            raise RuntimeError(f"{kernel!r}: {SYMBOL} holds {nbytes} bytes, expected {8 * PAIRS}")
        self._base, self._given, self._of = base, 0, {}

    def __call__(self, stream_handle: int) -> int:
        a = self._of.get(stream_handle)
        if a is None:
            with _lock:
                a = self._of.get(stream_handle)
                if a is None:
                    a = self._base + 8 * self._given if self._given < PAIRS else 0
                    self._given += a != 0
                    self._of[stream_handle] = a
        return a


_pairs: dict = {}


def claim_pairs(kernel) -> ClaimPairs:
    """The claim pairs of one loaded kernel (made once)."""
    p = _pairs.get(kernel)
    if p is None:
        with _lock:
            p = _pairs.get(kernel)
            if p is None:
                p = _pairs[kernel] = ClaimPairs(kernel)
    return p
