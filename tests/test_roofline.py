"""tools/support/roofline.py: the decode estimator's calibration on aiter's HIP kernel, the model's bounds, and the
prefill model on hand-made loops (pure Python; our kernels' estimates, which need their ISA, are in
tests/test_gfx950_decode.py and tests/test_gfx950_prefill.py)."""
from tools.support import roofline as R


def test_the_calibration_lands_within_30_percent_on_at_least_four_measured_rows():
    fit, ratios = R.calibrate()
    assert sum(0.7 <= r <= 1.3 for r in ratios) >= 4, ratios
    assert 1000 <= fit.latency_cycles <= 9600 and fit.overhead_us <= 4


def test_the_host_heuristic_reproduces_the_published_example_configurations():
    # B = 64, next_n = 6, 128K: 3 rows per block, 4 waves, chunk 64; B = 1, next_n = 2, 32K: 1 row, 256 chunk
    assert R.aiter_hip_config(64, 6, 131072) == (4, 64, 3, 4)
    assert R.aiter_hip_config(1, 2, 32768) == (4, 256, 1, 128)


def test_an_estimate_is_never_below_its_memory_floor_and_grows_with_the_work():
    fit = R.Fit(3000.0, 2.0)
    small = R.Launch(4096, 4, 10, 512, 400, 2, 1, 1, 3, 1e9, 1e12)
    big = R.Launch(4096, 4, 20, 512, 400, 2, 1, 1, 3, 2e9, 2e12)
    a, b = R.estimate(small, fit), R.estimate(big, fit)
    assert a.us >= a.memory_floor_us and b.us > a.us
    assert a.memory_floor_us == 1e9 / R.HBM_BYTES_PER_S * 1e6


# ------------------------------------------------------------------ the prefill model (mqa_logits_mfma)

def _figure(events, mfma=600.0, valu=300.0, lds=0.0, dma=0.0, fill=0.0, tiles=1.0):
    """A hand-made key loop: `events` per iteration of `tiles` tiles, the pipes' cycles per tile."""
    return {"tiles_per_iteration": tiles, "mfma_cycles": mfma, "valu_cycles": valu, "nop_wait_states": 0.0,
            "issue_cycles": 0.0, "lds_read_bytes": lds, "dma_bytes": dma, "store_bytes": 0.0,
            "waves_per_simd_vgpr": 2, "waves_per_simd_resident": 2.0, "blocks_per_cu": 2, "waves_per_block": 4,
            "fill_cycles_per_element": fill, "events": events}


def test_the_wave_timeline_waits_for_what_each_counter_drains_in_issue_order():
    terms = R.PrefillTerms(lds_latency_cycles=128, store_ack_cycles=500)
    ev = [["busy", 100], ["lds"], ["lds"], ["wait", -1, 1], ["busy", 64], ["store"], ["wait", 0, -1]]
    t = R.wave_timeline(ev, 3000.0, terms)
    # 100 busy, two LDS issues (4 each); lgkmcnt(1) drains the first: ready at 100 + 128 = 228 (stall 120);
    # its issue to 232, 64 busy to 296, the store's issue to 300, vmcnt(0) until 296 + 500 = 796, issue: 800
    assert t == {"cycles": 800.0, "vm_stall": 496.0, "lds_stall": 120.0}
    # a load issued before the loop's wait is covered by the work in between
    far = R.wave_timeline([["load"], ["busy", 5000], ["wait", 0, -1]], 3000.0, terms)
    assert far["vm_stall"] == 0 and far["cycles"] == 5008


def test_the_tile_time_is_the_largest_of_the_wave_the_shared_pipes_and_the_cu_traffic():
    f = _figure([["busy", 1000]], mfma=600, valu=300)
    one, two = R.prefill_tile_cycles(f, 1, 3000.0), R.prefill_tile_cycles(f, 2, 3000.0)
    assert (one["cycles"], one["bound"]) == (1000, "wave")      # alone, the wave's own stream
    assert (two["cycles"], two["bound"]) == (1200, "mfma")      # two waves share the MFMA pipe
    assert R.prefill_tile_cycles(_figure([["busy", 1000]], valu=700), 2, 3000.0)["bound"] == "valu"
    # 8 waves x (4096 + 4096) bytes at 128 B/clk: 512 cycles per tile
    lds = R.prefill_tile_cycles(_figure([["busy", 100]], mfma=10, valu=10, lds=4096, dma=4096), 2, 3000.0)
    assert lds["bound"] == "lds" and lds["terms"]["lds"] == 512


def test_a_prefill_estimate_computed_by_hand():
    # M = 8 rows: one row block; N = 131072 = 4096 tiles, split 512 ways (plan_prefill: ~2 blocks per CU, >= 8
    # tiles a part): 512 units of 8 tiles, all resident at once, two per CU. Each: one latency (every window is
    # [0, N), so the first chunk staged before the windows are read is the part's own), then 8 tiles at
    # max(wave 1000, 2 x MFMA 600) = 1200 cycles.
    fit = R.Fit(3000.0, 2.0)
    e = R.prefill_estimate(_figure([["busy", 1000]]), 8, 131072, 64, False, "full", fit)
    assert e.grid == (1, 512, 1) and e.units == 512 and e.tiles_per_unit == (8, 8)
    assert e.tile_cycles == 1200 and e.tile_bound == "mfma" and e.bound == "mfma"
    assert abs(e.loop_us - (3000 + 8 * 1200) / R.CLOCK_HZ * 1e6) < 1e-9
    assert abs(e.us - (e.loop_us + 2.0)) < 1e-9
    assert abs(e.tflops - 2 * 64 * 128 * 8 * 131072 / e.us * 1e-6) < 1e-6


def test_a_unit_whose_first_chunk_was_guessed_starts_one_latency_earlier():
    """The kernel stages a part's first chunk for the union [0, N) before it reads the windows: right for every
    part of a block whose union ends within the row's last quantum of tiles, wrong for one that ends earlier."""
    from hipindexer.plan import TARGETS, plan_prefill
    M, N = 512, 32768  # 64 row blocks, 8 parts
    plan = plan_prefill(M, N, 64, 128, TARGETS["gfx950"])
    assert (plan.row_blocks, plan.split, plan.reverse_rows) == (64, 8, True)
    units = R.prefill_units(M, N, *R.prefill_windows(M, N, "causal"), plan)
    by_block = [[units[y * plan.row_blocks + x] for y in range(plan.split)] for x in range(plan.row_blocks)]
    assert all(u["guessed"] for u in by_block[0])  # block x 0 is the last row block: its union is [0, N)
    assert all(u["guessed"] for u in units[:plan.row_blocks])  # part 0 starts at key 0 whatever the union
    assert not all(u["guessed"] for u in units)  # early row blocks' unions end quanta short of N
    assert all(u["guessed"] for u in R.prefill_units(M, N, *R.prefill_windows(M, N, "full"), plan))
    # one latency (3000 cycles) less a unit: every unit guessed (128, 32768) against the same units all missed
    fit = R.Fit(3000.0, 2.0)
    f = _figure([["busy", 1000]])
    hit = R.prefill_estimate(f, 128, 32768, 64, False, "causal", fit)
    plan = plan_prefill(128, 32768, 64, 128, TARGETS["gfx950"])
    assert all(u["guessed"] for u in R.prefill_units(128, 32768, *R.prefill_windows(128, 32768, "causal"), plan))
    real = R.prefill_units
    try:
        R.prefill_units = lambda *a: [dict(u, guessed=False) for u in real(*a)]
        miss = R.prefill_estimate(f, 128, 32768, 64, False, "causal", fit)
    finally:
        R.prefill_units = real
    assert abs(miss.loop_us - hit.loop_us - 3000 / R.CLOCK_HZ * 1e6) < 1e-6


def test_the_prefill_estimate_grows_with_the_keys_and_names_its_bound():
    fit = R.Fit(3000.0, 2.0)
    f = _figure([["busy", 1000]])
    times = [R.prefill_estimate(f, 1024, n, 64, True, "causal", fit).us for n in (4096, 16384, 65536, 131072)]
    assert times == sorted(times) and times[0] < times[-1], times
    # a tile a unit: the unit's start (a latency) is most of its time
    assert R.prefill_estimate(f, 8, 32, 64, False, "full", fit).bound == "unit start"
    # next to no work per tile, every logit written: HBM
    tiny = _figure([["busy", 1]], mfma=1, valu=1)
    e = R.prefill_estimate(tiny, 8192, 8192, 64, True, "full", fit)
    assert e.bound == "memory" and e.us == e.memory_floor_us + 2.0
    # causal and full windows: the same longest unit, fewer valid pairs
    c, w = (R.prefill_estimate(f, 2048, 16384, 32, True, m, fit) for m in ("causal", "full"))
    assert c.tflops < w.tflops and c.compute_floor_us < w.compute_floor_us


def test_the_table_rows_carry_their_goals():
    figs = {f"mqa_logits_mfma.HX_HEADS-{h}": _figure([["busy", 1000]]) for h in (32, 64)}
    rows = R.prefill_rows(figs, R.Fit(3000.0, 2.0))
    assert len(rows) == 2 * (2 * len(R.BENCH_PREFILL_SHAPES) + 1) + 2 * len(R.AITER_TABLE_US)
    for r in rows:
        assert r["bound"] in ("memory", "unit start", "wave", "mfma", "valu", "lds", "l2"), r
        assert r["estimate_us"] >= max(r["memory_floor_us"], r["compute_floor_us"]), r
        if r["source"].startswith("aiter") or r["H"] == 64 or r["N"] == 32768 and r["M"] == 128:
            assert r["goal"] and r["meets"] in (True, False), r
        if (r["M"], r["N"]) == (128, 32768):
            assert r["compute_floor_us"] + 2.0 < r["fixed_floor_us"] <= r["estimate_us"], r
            assert r["fixed_floor_of_large_rate"] >= r["of_large_rate"], r
            assert r["launch_free_of_large_rate"] > r["of_large_rate"], r
    (g64,) = [r for r in rows if r["source"] == "aiter 5216" and r["H"] == 64]
    assert g64["aiter_us"] == round(2 * 64 * 128 * R.valid_pairs(8192, 32768, "causal") / 2317e12 * 1e6, 1)
    assert R.prefill_rows({}) == []
