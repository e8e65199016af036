"""The exact top-k of a logits array on a device: ``topk_logits`` (docs/ops.md, "Top-k").

Arguments are handled as by the other ops (hipindexer.ops.launch): numpy arrays are copied to the device on
the op's stream, DeviceArrays and foreign device arrays are used in place; every shape, dtype and host value
is checked before anything is copied or launched; the op returns without synchronising. A call whose arrays
are all DeviceArrays keeps its prepared launch under their layouts and the options.
"""
from __future__ import annotations

import numpy as np

from ..arguments import F32, I32, check_top_k, expect
from ..catalog import KERNEL
from ..plan import topk as plan
from ..runtime import DeviceArray
from ..runtime.device import as_stream
from .launch import INT32_MAX, adopt, check_resident, check_tunables, device_only, kernel_for, prepared, remember, \
    resident_key, resolve_device, target_of, upload

BLOCK = KERNEL["topk_logits"].block
TOPK_POINTERS = ("logits", "lengths", "indices", "values")  # TopkParams' per-call pointers, in struct order
SPLIT_POINTERS = TOPK_POINTERS + ("work",)  # TopkSplitParams'
SPLIT_KERNELS = ("topk_split_floor", "topk_split_gather", "topk_split_finish")
MAX_BLOCKS = 1 << 16  # blocks per launch; a block takes rows r, r + MAX_BLOCKS, ... when there are more rows
TUNABLES = ("split", "part_columns", "cap", "group_rows", "rowwise", "held", "resident", "narrow", "cluster")  # plan_topk's
_workspaces: dict = {}  # (device, stream handle, rows class, row_bytes) -> a DeviceArray


def workspace_bytes(rows: int, top_k: int, cap: int | None = None) -> int:
    """Bytes a workspace= for rows x top_k must hold (the split path's; hipindexer.plan.topk)."""
    return plan.workspace_bytes(rows, top_k, cap)


def topk_workspace(rows: int, top_k: int, device=None, stream=None, cap: int | None = None) -> DeviceArray:
    """A workspace for topk_logits(..., workspace=) over up to `rows` rows at this top_k's power-of-two class: for
    a call captured into a graph, or one stream's calls that should not share the op's own. Its contents are the
    kernels' own: every call writes what it reads."""
    dev = resolve_device(device, ())
    return DeviceArray.empty((workspace_bytes(rows, top_k, cap),), np.uint8, dev, as_stream(stream, dev))


def _own_workspace(dev, st, rows: int, row_bytes: int) -> DeviceArray:
    """The op's workspace for this stream (calls on one stream run in order, so they may share it), allocated once
    per power-of-two class of rows."""
    rows_class = 1 << max(0, rows - 1).bit_length()
    key = (dev, st.handle, rows_class, row_bytes)
    w = _workspaces.get(key)
    if w is None:
        w = _workspaces[key] = DeviceArray.empty((rows_class * row_bytes,), np.uint8, dev, st)
    return w


def topk_logits(logits, top_k, lengths=None, sorted=False, return_values=False, out=None, values=None, stream=None,
                device=None, workspace=None, **tunables):
    """The exact top_k of each row of a float32 logits array, on a device; the selection of
    hipindexer.reference.topk_logits (docs/ops.md, "Top-k").

    Per row, the top_k valid positions by value, equal values by lower index. Valid: not -inf; with lengths
    ([rows] int32), the columns [0, lengths[r]) clipped to N, whatever they hold (-inf included). A row with
    V < top_k valid positions returns its V indices, then -1 (value -inf). sorted=True orders a row's
    indices by descending value, equal values by lower index; unsorted, the order is unspecified but
    deterministic (the kernel returns index order today). NaN: a numpy logits array with a NaN at a valid
    position raises ValueError, as the reference does; a NaN only the device holds is left out, as if its
    position were invalid. A negative length only the device holds selects nothing in its row.

    logits: [rows, N] float32, numpy (copied on `stream`), a DeviceArray or a foreign device array whose
    rows may be padded (row stride >= N, e.g. a logits op's out=). top_k: an int in 1..4096.
    out: None (a new array) or an int32 [rows, top_k] device array for the indices; values: None or a
    float32 [rows, top_k] device array, only with return_values=True. Either may have a row stride wider
    than top_k. stream, device: as for fp8_mqa_logits.

    Paths (hipindexer.plan.topk): rows whose keys fit a block's shared memory take the resident path where its
    fitted time is the least (rows of up to 16384 columns, at any count measured): one block a row in one launch,
    the row read once into shared memory and selected there, no workspace; a block of 512 threads where there are
    more rows than units and two such blocks fit a unit, of 1,024 otherwise. Other rows take the row-wise path where
    plan.topk.rowwise_pays, by its fit of the paths' H200 times (rows of up to 32768 columns, held in the block;
    about a device's worth of rows of 65536 columns): one block a row in one launch doing the split path's steps
    below with the kept keys in shared memory, no workspace. Other rows of N >= 16384 columns take the split path,
    in groups of up to 1024 rows: a
    floor per row from a sample of a sixteenth of it (at top_k >= 2048; a larger share below), then each row cut
    into parts so that rows x parts blocks fill the device, read once with 16-byte loads keeping the keys at or
    above the floor (about 1.75 top_k of a long row's), then one block per row selecting among them; other shorter
    rows take one block per row. The split path keeps a workspace (a floor, a count and max(8192, 4 top_k) entries per
    row of a group, independent of N): the op allocates one per device, stream and class of shape on first use
    and reuses it; for a call captured into a graph, pass workspace= (topk_workspace(rows, top_k), a uint8 device
    array of at least workspace_bytes(rows, top_k) bytes, used by one stream at a time; its contents need no
    zeroing). A row whose floor kept fewer than top_k keys, or more than the workspace holds (many keys equal to
    the floor, or a sample that misjudged the row), is selected by the single-block algorithm, correct and
    slower. On sm_90a the cluster path gives a row a cluster of 8 blocks in one launch, each block holding an eighth
    of the row's keys in its shared memory and the radix passes' counts summed across the cluster, no workspace:
    unsorted rows take it where 8 blocks a row fit the device at once and the planner's fits price it below the
    other paths (few long rows); cluster=True forces it, cluster=False keeps it out.
    Tunables: cluster (bool), resident (bool), narrow (bool), rowwise (bool), held (bool), split (bool), part_columns, cap,
    group_rows (plan_topk's).

    Returns the indices DeviceArray (int32 [rows, top_k]), or (indices, values) with return_values=True,
    without waiting. Raises before anything is copied or launched: ValueError for top_k outside 1..4096,
    wrong shapes, strides or values, a read-only out or values, values= without return_values=True, and
    host values out of range (a negative length, a NaN at a valid position); TypeError for wrong dtypes or a
    numpy out or values.

    >>> import numpy as np
    >>> import hipindexer
    >>> logits = np.array([[0.5, -np.inf, 2.0, 0.5], [1.0, -np.inf, -np.inf, -np.inf]], np.float32)
    >>> idx, val = hipindexer.topk_logits(logits, 2, sorted=True, return_values=True, device="emu:gfx950")
    >>> idx.numpy().tolist(), val.numpy().tolist()
    ([[2, 0], [0, -1]], [[2.0, 0.5], [1.0, -inf]])
    """
    arrays = (logits, lengths, out, values, workspace)
    key = resident_key(arrays, top_k, sorted, return_values, device, *tunables.items())
    hit = prepared(key)
    if hit is None:
        return _topk_logits(arrays, top_k, sorted, return_values, stream, device, tunables, key)
    launch, dev, shape, split = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    if out is None:
        out = DeviceArray.empty(shape, np.int32, dev, st)
    if return_values and values is None:
        values = DeviceArray.empty(shape, np.float32, dev, st)
    launch_topk(launch, dev, st, split, workspace, logits, lengths, out, values)
    return (out, values) if return_values else out


def _rows_of(name: str, a, what: str, width_name: str, width: int) -> int:
    """The row stride (elements) of a [rows, width] device array whose rows are contiguous and may be
    padded; host arrays are copied contiguous."""
    if not isinstance(a, DeviceArray):
        return width
    item = a.dtype.itemsize
    rows = a.shape[0]
    if a.strides[1] != item or (rows > 1 and (a.strides[0] % item or a.strides[0] < item * width)):
        raise ValueError(f"{name}: rows must be contiguous with a row stride >= {width_name} elements ({what}), "
                         f"got strides {a.strides}")
    return a.strides[0] // item if rows > 1 else width


def _written(name: str, x, dtype, rows: int, top_k: int, what: str, dev, st) -> DeviceArray | None:
    """out= or values=: a writable device array of dtype [rows, top_k] (rows may be padded), or None."""
    if x is None:
        return None
    a = device_only(name, x, dev, st, what)
    if a.dtype != dtype or tuple(a.shape) != (rows, top_k):
        raise (TypeError if a.dtype != dtype else ValueError)(
            f"{name}: expected a {dtype.name} [rows={rows}, top_k={top_k}] device array ({what}), "
            f"got {a.dtype.name} {tuple(a.shape)}")
    if a.readonly:
        raise ValueError(f"{name}: the array is read-only")
    _rows_of(name, a, what, "top_k", top_k)
    return a


def _check_host_values(la: np.ndarray | None, ln: np.ndarray | None, N: int) -> None:
    """Host lengths >= 0; no NaN at a valid position of host logits (the reference's rules)."""
    if ln is not None and (ln < 0).any():
        r = int(np.argmax(ln < 0))
        raise ValueError(f"lengths: must be >= 0, got {int(ln[r])} for row {r}")
    if la is None:
        return
    nan = np.isnan(la)
    if ln is not None:
        nan &= np.arange(N)[None, :] < np.asarray(ln, np.int64)[:, None]
    if nan.any():
        r, c = (int(i) for i in np.argwhere(nan)[0])
        raise ValueError(f"logits: NaN at row {r}, col {c}, a position counted as valid")


def _workspace_arg(w, nbytes: int, dev, st) -> DeviceArray | None:
    """workspace=: a writable, contiguous device array of at least nbytes bytes (its contents the kernels' own),
    or None."""
    if w is None:
        return None
    a = device_only("workspace", w, dev, st, "the split path's workspace")
    if not a.is_contiguous or a.readonly or a.nbytes < nbytes:
        raise ValueError(f"workspace: expected a writable contiguous device array of at least {nbytes} bytes "
                         f"(workspace_bytes(rows, top_k)), got {a.dtype.name} {tuple(a.shape)}")
    return a


def _split_launch(dev, p, common, rows: int):
    """One call's launches of the split path, three a group of p.group_rows rows (the last group what is left), as
    one function of (stream, 4 pointers, workspace): a group's pointers are its first row's."""
    g = p.group_rows

    def prepared(n):
        fields = dict(common, rows=n, row_bytes=p.row_bytes, cand_off=p.cand_off, parts=p.parts,
                      part_len=p.part_len, cap=p.cap, step=p.step, r=p.r)
        return [kernel_for(dev, k).prepare(min(p.grid_parts, n * p.parts) if k == "topk_split_gather"
                                           else min(p.grid_rows, n), KERNEL[k].block, pointers=SPLIT_POINTERS,
                                           **fields) for k in SPLIT_KERNELS]
    full = prepared(g)
    tail = prepared(rows % g) if rows % g else None
    # bytes from one group's first row to the next's, in each array (0: an absent array)
    steps = [g * 4 * common[k] for k in ("logits_stride", "indices_stride", "values_stride")]

    def launch(handle, logits, lengths, out, values, work):
        for i, r0 in enumerate(range(0, rows, g)):
            ptrs = (logits + i * steps[0], lengths + i * g * 4 if lengths else 0, out + i * steps[1],
                    values + i * steps[2] if values else 0, work)
            for k in (full if r0 + g <= rows else tail):
                k(handle, *ptrs)
    return launch


def _rowwise_launch(dev, p, common):
    """The row-wise path's one launch, as a function of (stream, 4 pointers): TopkSplitParams with the whole row one
    part and no workspace."""
    k = kernel_for(dev, "topk_rowwise").prepare(p.grid_rows, KERNEL["topk_rowwise"].block, pointers=SPLIT_POINTERS,
                                                **common, row_bytes=0, cand_off=0, parts=1, part_len=common["N"],
                                                cap=0, step=p.step, r=p.r, held=p.held)

    def launch(handle, logits, lengths, out, values):
        k(handle, logits, lengths, out, values, 0)
    return launch


def _topk_logits(arrays, top_k, sorted, return_values, stream, device, tunables, key):
    """The full path: check, upload host arrays, prepare the launch (kept under `key`), launch."""
    check_tunables("topk_logits", tunables, TUNABLES)
    top_k = check_top_k(top_k)
    for name, flag in (("sorted", sorted), ("return_values", return_values)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {flag!r}")
    dev = resolve_device(device, arrays)
    st = as_stream(stream, dev)
    logits, lengths, out, values, workspace = arrays
    if values is not None and not return_values:
        raise ValueError("values: given, but return_values=False (pass return_values=True to have values written)")
    la = adopt("logits", logits, dev, st)
    rows, N = expect("logits", la, F32, 2, "[rows, N] float32")
    if N > INT32_MAX or rows > INT32_MAX:
        raise ValueError(f"logits: shape ({rows}, {N}) is past int32 (rows are blocks, columns int32 indices)")
    stride = _rows_of("logits", la, "the logits", "N", N)
    ln = None
    if lengths is not None:
        ln = adopt("lengths", lengths, dev, st)
        (Rl,) = expect("lengths", ln, I32, 1, "[rows] int32")
        if Rl != rows:
            raise ValueError(f"lengths: length is {Rl}, but logits has {rows} rows")
        check_resident("lengths", ln)
    host = lambda a: a if isinstance(a, np.ndarray) else None  # noqa: E731
    _check_host_values(host(la), host(ln), N)
    o = _written("out", out, I32, rows, top_k, "the indices", dev, st)
    v = _written("values", values, F32, rows, top_k, "the values", dev, st) if return_values else None
    if o is None:
        o = DeviceArray.empty((rows, top_k), np.int32, dev, st)
    if return_values and v is None:
        v = DeviceArray.empty((rows, top_k), np.float32, dev, st)
    p = plan.plan_topk(rows, N, top_k, target_of(dev), max_blocks=MAX_BLOCKS, sorted=sorted, **tunables)
    w = _workspace_arg(workspace, p.workspace_bytes, dev, st) if p.split else None
    if rows == 0:
        return (o, v) if return_values else o
    launch, split = prepare_topk(dev, p, rows, N, top_k, stride, _rows_of("out", o, "the indices", "top_k", top_k),
                                 _rows_of("values", v, "the values", "top_k", top_k) if v is not None else 0,
                                 sorted)
    remember(key, (launch, dev, (rows, top_k), split))
    la = upload(la, dev, st)
    ln = None if ln is None else upload(ln, dev, st)
    launch_topk(launch, dev, st, split, w, la, ln, o, v)
    return (o, v) if return_values else o


def prepare_topk(dev, p, rows: int, N: int, top_k: int, logits_stride: int, indices_stride: int,
                 values_stride: int, sorted: bool) -> tuple:
    """(launch, split) of a selection planned by plan_topk (p) for rows x N logits at top_k, over logits, indices
    and values of the given row strides (elements; values 0 without values): the launch for launch_topk, and the
    split path's (group rows, row bytes) for its workspace, else None."""
    common = dict(logits_stride=logits_stride, indices_stride=indices_stride, values_stride=values_stride,
                  rows=rows, N=N, top_k=top_k, sorted=int(bool(sorted)))
    if p.split:
        return _split_launch(dev, p, common, rows), (p.group_rows, p.row_bytes)
    if p.rowwise:
        return _rowwise_launch(dev, p, common), None
    if p.cluster:
        return kernel_for(dev, "topk_cluster").prepare(p.grid_rows, KERNEL["topk_cluster"].block,
                                                       shared_mem=plan.cluster_smem(N, top_k, sorted),
                                                       pointers=TOPK_POINTERS, **common), None
    if p.resident:
        key = "topk_resident_narrow" if p.narrow else "topk_resident"
        smem = plan.resident_smem(N, top_k, sorted)
        return kernel_for(dev, key).prepare(p.grid_rows, KERNEL[key].block, shared_mem=smem, pointers=TOPK_POINTERS,
                                            **common), None
    return kernel_for(dev, "topk_logits").prepare(p.grid_rows, BLOCK, pointers=TOPK_POINTERS, **common), None


def launch_topk(launch, dev, st, split, workspace, logits, lengths, out, values) -> None:
    """A prepared launch of either path on stream st; the split path's workspace is the caller's or the op's own."""
    ptrs = (logits.ptr, 0 if lengths is None else lengths.ptr, out.ptr, 0 if values is None else values.ptr)
    if split is None:
        launch(st.handle, *ptrs)
    else:
        launch(st.handle, *ptrs, (workspace if workspace is not None else _own_workspace(dev, st, *split)).ptr)


def _grid(n: int) -> int:
    return max(1, min(MAX_BLOCKS, n))


def _stride(a, R: int, width: int) -> int:
    """Elements between rows of a [R, width] array (any value for one row)."""
    return a.strides[0] // a.itemsize if a is not None and R > 1 else width
