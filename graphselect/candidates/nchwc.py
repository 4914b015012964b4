"""``nchwc``: channel-blocked NCHW[ic]c -> NCHW[oc]c convolution (TOPI's conv2d_NCHWc compute with
the classic x86 schedule: a reg_n x oc_bn register tile, epilogue applied per tile).

Grouped convolutions (1 < groups < channels) take blocks that divide the group width on both
sides, so one output block reads the input blocks of one group only (TOPI's grouped
conv2d_NCHWc); the weight is packed per group, (O/oc_bn, I/groups/ic_bn, kh, kw, ic_bn, oc_bn).
Depthwise convolutions belong to ``depthwise``.

Output channels that are a multiple of half a vector but not of a vector (24, 40, 56, ...) would
otherwise get half-width blocks only (AVX-512: 8 lanes, at most half the FMA peak). For those,
``oc_pad=P`` candidates compute a full-width P-lane register tile over the output channels padded
with zero weights to a multiple of P and write only the real channels, in half-vector blocks
(the layout the neighbours see stays NCHW[oc_bn]c): 144->24 at 56x56 0.109 -> 0.073 ms, 96->24
0.068 -> 0.046, 144->40 at 28x28 0.040 -> 0.028 on Zen 5 (alone, warm). The epilogue is its own
pass over the padded tile (TVM cannot place it inside the tile: the output block is not the
tile's)."""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from .base import Candidate, divisors_in, epilogue_compute, finish, make_candidate, schedule_tail

FAMILY = "nchwc"


def _blocks(ch: int, isa=AVX512) -> list[int]:
    """Channel blocks of half, one and two vector registers (AVX-512: 8, 16, 32; NEON: 4, 8)."""
    bs = [b for b in (isa.lanes // 2, isa.lanes, 2 * isa.lanes) if b >= 4 and ch % b == 0]
    if len(bs) > 2:
        bs = bs[1:]       # one and two registers: half a register never won on AVX-512 and doubles the candidates
    if not bs:            # e.g. 3 input channels: one block holds them all
        bs = [max(divisors_in(ch, 1, max(16, isa.lanes)))]
    return bs


def _reg_ns(ow: int, oc_bn: int, isa=AVX512) -> list[int]:
    # accumulators: reg_n vectors of oc_bn floats must fit half the vector registers (AVX-512: 16 of 32)
    budget = max(4, isa.registers // 2 * isa.lanes // max(oc_bn, isa.lanes))
    ds = divisors_in(ow, 4, budget)
    if not ds:
        ds = [max(divisors_in(ow, 1, budget))]
    return ds[-2:]


def _pads(spec: ConvSpec, isa=AVX512) -> list[int]:
    """Padded tile widths for output channels that only half-vector blocks divide: one and two
    vectors, where at least two thirds of the padded lanes are real channels."""
    O, half = spec.out_channels, isa.lanes // 2
    if spec.groups != 1 or half < 4 or O % half or O % isa.lanes == 0:
        return []
    return [p for p in (isa.lanes, 2 * isa.lanes) if 3 * O >= 2 * _padded(O, p)]


def _padded(channels: int, block: int) -> int:
    return -(-channels // block) * block


def _guarded_pad(spec: ConvSpec) -> bool:
    """Whether a variant that reads the padding as a guarded load (no padded copy of the input)
    is proposed: padded stems with at most 4 input channels, where the copy is a pass over the
    whole image for a few FMAs per pixel (ShuffleNetV2's 3->24 3x3/2 at 224x224: 0.087 -> 0.071 ms
    alone, Zen 5). Grouped convs always read their padding this way."""
    return spec.groups == 1 and any(spec.padding) and spec.in_channels <= 4


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    g = spec.groups
    if spec.depthwise or spec.in_channels % g or spec.out_channels % g:
        return []
    out = []
    ig, og = spec.in_channels // g, spec.out_channels // g
    kelems = spec.out_channels * ig * spec.kernel[0] * spec.kernel[1]
    work = spec.padded_input_bytes if g == 1 else 0
    for ib in _blocks(ig, isa):
        for ob in _blocks(og, isa):
            for rn in _reg_ns(spec.out_w, ob, isa):
                out.append(make_candidate(
                    FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(ob),
                    weight_layout=f"OIHW{ib}i{ob}o", weight_elems=kelems, workspace_bytes=work,
                    ic_bn=ib, oc_bn=ob, reg_n=rn))
                if _guarded_pad(spec):
                    out.append(make_candidate(
                        FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(ob),
                        weight_layout=f"OIHW{ib}i{ob}o", weight_elems=kelems,
                        ic_bn=ib, oc_bn=ob, reg_n=rn, pad_inline=1))
        for pb in _pads(spec, isa):
            P = _padded(spec.out_channels, pb)
            for rn in _reg_ns(spec.out_w, pb, isa):
                out.append(make_candidate(
                    FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(isa.lanes // 2),
                    weight_layout=f"OIHW{ib}i{pb}o", weight_elems=kelems // spec.out_channels * P,
                    workspace_bytes=work + 4 * spec.batch * P * spec.out_h * spec.out_w,
                    ic_bn=ib, oc_bn=isa.lanes // 2, oc_pad=pb, reg_n=rn))
    return out


class _Unpadded:
    """The padded conv (blocks of ``pb`` over ``P`` >= O channels) seen as NCHW[ob]c of the O real
    channels: what the epilogue reads."""

    def __init__(self, conv, O: int, ob: int, pb: int):
        n, _, oh, ow, _ = conv.shape
        self.shape = (n, O // ob, oh, ow, ob)
        self.conv, self.ob, self.pb = conv, ob, pb

    def __call__(self, b, cb, y, x, c):
        o = cb * self.ob + c
        return self.conv[b, o // self.pb, y, x, o % self.pb]


def compute(spec: ConvSpec, ib: int, ob: int, target, pb: int | None = None):
    """TOPI's conv2d_NCHWc with the epilogue; ``pb``: computed in ``pb``-lane blocks over the
    output channels zero-padded to a multiple of ``pb``, written in ``ob``-lane blocks."""
    from tvm import te, topi
    n, c, h, w = spec.in_shape
    O = spec.out_channels
    cb = pb or ob
    data = te.placeholder((n, c // ib, h, w, ib), name="data")
    # conv2d_NCHWc infers the groups from the kernel's input blocks (c // ib when dense)
    kern = te.placeholder((_padded(O, cb) // cb, c // spec.groups // ib, spec.kernel[0], spec.kernel[1], ib, cb),
                          name="weight")
    bias = te.placeholder((O // ob, ob), name="bias") if spec.bias else None
    with target:    # conv2d_NCHWc reads Target.current()
        conv = topi.nn.conv2d_NCHWc(data, kern, list(spec.stride), list(spec.padding), list(spec.dilation),
                                    f"NCHW{ib}c", f"NCHW{cb}c", "float32")
    view = _Unpadded(conv, O, ob, pb) if pb else conv
    res = te.placeholder(view.shape, name="residual") if spec.residual else None
    out = epilogue_compute(view, spec, bias, res, lambda b, oc, y, x, cb: (oc, cb))
    args = [data, kern] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    from tvm.s_tir import Schedule
    ib, ob, reg_n = cand.param("ic_bn"), cand.param("oc_bn"), cand.param("reg_n")
    pb = dict(cand.params).get("oc_pad")
    sch = Schedule(compute(spec, ib, ob, target, pb))
    conv, epi = sch.get_sblock("conv2d_NCHWc"), sch.get_sblock("epilogue")
    n, occ, oh, ow, ocb, ic, kh, kw = sch.get_loops(conv)
    ow_o, ow_i = sch.split(ow, [None, reg_n])
    ic_o, ic_i = sch.split(ic, [None, ib])
    sch.reorder(n, occ, oh, ow_o, ic_o, kh, kw, ic_i, ow_i, ocb)
    # vectorize/unroll/parallel before decompose_reduction (TVM 0.27 trap)
    sch.vectorize(ocb)
    sch.unroll(ow_i)
    sch.unroll(kw)
    el = sch.get_loops(epi)
    if pb:
        # its own pass, one parallel task per output block and row
        sch.parallel(sch.fuse(*el[:3]))
        sch.vectorize(el[-1])
    else:
        # the reg_n x oc_bn accumulator tile is consumed at once by the epilogue, so the conv buffer
        # shrinks to that tile and the epilogue costs no extra pass over memory
        sch.reverse_compute_at(epi, ow_o)
        el = sch.get_loops(epi)
        sch.vectorize(el[-1])
        sch.unroll(el[-2])
    sch.parallel(sch.fuse(n, occ, oh))
    if any(spec.padding) and (spec.groups > 1 or dict(cand.params).get("pad_inline")):
        # padding as a guarded load instead of a padded copy: grouped convs (3-15% faster on
        # RegNet's group-width-16 convs, where the short reduction makes the extra pass count)
        # and the pad_inline variant of small stems
        sch.compute_inline(sch.get_sblock("data_pad"))
        init = sch.decompose_reduction(conv, ic_o)
        sch.vectorize(sch.get_loops(init)[-1])
    else:
        schedule_tail(sch, conv, ic_o, spec, pad_outer=3)
    return finish(sch.mod["main"], cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    ib, ob = cand.param("ic_bn"), cand.param("oc_bn")
    O, I, KH, KW = weight.shape
    pb = dict(cand.params).get("oc_pad")
    w = weight
    if pb:
        w = np.concatenate([weight, np.zeros((_padded(O, pb) - O, I, KH, KW), weight.dtype)])
    cb = pb or ob
    w = w.reshape(-1, cb, I // ib, ib, KH, KW).transpose(0, 2, 4, 5, 3, 1)
    out = [np.ascontiguousarray(w, dtype="float32")]
    if spec.bias:
        out.append(np.ascontiguousarray(bias.reshape(O // ob, ob), dtype="float32"))
    return out
