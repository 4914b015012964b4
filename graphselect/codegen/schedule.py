"""A generic CPU schedule for every PrimFunc the conv families do not schedule themselves
(pooling, layout_transform, elementwise, reductions, dense): inline injective producers, then
parallelize the outer spatial loops and vectorize the innermost one (in a reduction block over
one axis, such as a dense layer, a wide chunk of it: several vector accumulators per step). Without this, TVM's default
CPU pipeline runs these as serial scalar loops (ResNet-18: ~1.5 s instead of milliseconds)."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _extent(sch, loop) -> int | None:
    import tvm
    e = sch.get(loop).extent
    return int(e) if isinstance(e, tvm.tirx.IntImm) else None


def _vector_width(extent: int | None) -> int | None:
    if extent is None:
        return None
    for v in (16, 8, 4):
        if extent % v == 0:
            return v
    return extent if extent <= 16 else None


def chunk_width(extent: int | None) -> int | None:
    """Lanes of the innermost spatial loop of a reduction block (a dense layer at batch 1: one
    row of weights per reduction step): the widest multiple of 8 up to 128 that divides the
    extent and leaves at least 8 parallel chunks, so each weight row read feeds several vector
    accumulators (a 1280x1000 classifier: 8 lanes 80 us, 40 lanes 43 us alone; 25088x4096:
    34 -> 10 ms). None: the plain vector width."""
    if extent is None or extent < 64:
        return None
    ws = [w for w in range(128, 15, -8) if extent % w == 0 and extent // w >= 8]
    return ws[0] if ws else None


def _children(sch):
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _schedule_block(sch, blk, min_parallel: int = 2) -> None:
    loops = sch.get_loops(blk)
    ivs = sch.get(blk).iter_vars
    if not loops:
        return
    if len(loops) != len(ivs):           # loops not one-to-one with iter vars: outermost parallel only
        sch.parallel(loops[0])
        return
    kinds = [int(iv.iter_type) for iv in ivs]   # 0 spatial, 2 reduction
    spatial = [l for l, k in zip(loops, kinds) if k == 0]
    reduce_ = [l for l, k in zip(loops, kinds) if k != 0]
    if reduce_ and kinds != sorted(kinds):  # a reduction inside spatial loops: keep it simple
        sch.parallel(loops[0])
        return
    if not spatial:
        return
    # rows narrower than a vector (28, 14, 7 of a feature map): vectorize along the fused last
    # two loops (a channel's whole image), one parallel task per outer index; one parallel task
    # per 4-lane piece of a row ran ShuffleNetV2's channel shuffle 3-7x slower
    image_in_task = not reduce_ and len(spatial) >= 3 and bool((_extent(sch, spatial[-1]) or 16) % 16)
    if image_in_task:
        spatial = spatial[:-2] + [sch.fuse(spatial[-2], spatial[-1])]
    inner = None
    outer = spatial
    width = (chunk_width(_extent(sch, spatial[-1])) if len(reduce_) == 1 else None) or \
        _vector_width(_extent(sch, spatial[-1]))
    if width and width > 1:
        if width < _extent(sch, spatial[-1]):
            o, inner = sch.split(spatial[-1], [None, width])
            outer = spatial[:-1] + [o]
        else:
            inner, outer = spatial[-1], spatial[:-1]
        if reduce_:    # reduce over the vector lanes' inputs: lanes innermost
            sch.reorder(*(outer + reduce_ + [inner]))
    if image_in_task and len(outer) == len(spatial):
        outer = outer[:-1]    # the (split or whole) image loop stays inside the task
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if (_extent(sch, fused) or 2) >= min_parallel:
            sch.parallel(fused)
    if inner is not None:
        sch.vectorize(inner)
    if reduce_:
        init = sch.decompose_reduction(blk, reduce_[0])   # after parallel/vectorize (TVM 0.27 trap)
        if inner is not None:
            sch.vectorize(sch.get_loops(init)[-1])


def schedule_func(func):
    """Return ``func`` scheduled; raises if the schedule primitives reject it."""
    from tvm.s_tir import Schedule
    sch = Schedule(func)
    changed = True
    while changed:                      # inline pads, broadcasts and transforms into their consumers
        changed = False
        blocks = _children(sch)
        for b in blocks[:-1]:
            try:
                sch.compute_inline(b)
                changed = True
                break
            except Exception:  # noqa: BLE001 - not inlinable is the common, expected case
                pass
    for b in _children(sch):
        _schedule_block(sch, b)
    return sch.mod["main"].with_attr("tir.is_scheduled", True)


def schedule_module(mod):
    """Schedule every not-yet-scheduled PrimFunc of ``mod``; a PrimFunc the generic schedule
    rejects keeps its default (serial) form and is logged."""
    from tvm import tirx
    mod = mod.clone() if hasattr(mod, "clone") else mod
    for gv, f in list(mod.functions_items()):
        if not isinstance(f, tirx.PrimFunc):
            continue
        if f.attrs is not None and "tir.is_scheduled" in f.attrs and bool(f.attrs["tir.is_scheduled"]):
            continue
        try:
            mod[gv] = schedule_func(f.with_attr("global_symbol", gv.name_hint))
        except Exception as e:  # noqa: BLE001 - fall back to the unscheduled function
            log.warning("generic schedule failed for %s: %s", gv.name_hint, str(e).splitlines()[-1][:200])
    return mod
