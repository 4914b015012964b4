"""``winograd``: F(m x m, 3x3) for 3x3 stride-1 convolutions, m in {2, 4, 6}.

Stages: input transform V = B^T d B per tile (vectorized over the input channel block), a
batched GEMM over the alpha^2 points (register tile: ``pt`` tiles x 32 output channels), and the
output transform Y = A^T M A with the epilogue (bias, residual add, clamp) applied as it writes.
The weights are transformed once, offline: U = G w G^T (alpha^2 / 9 times the direct weights).
The tiny transforms are written as sums whose coefficients a Select on the (unrolled) transform
index picks among constants (``_comb``), which fold to the explicit sums of the matrices' non-zero
entries, so builds take about a second (a generic matmul form took minutes).

Layouts: NCHW[ib]c in / NCHW[ob]c out like the ``nchwc`` family (neighbours need no transform),
or plain NCHW in and out (channels gathered into blocks inside the kernel: for F(2x2) as the
input transform reads them; for F(4x4) into a padded NCHW[ib]c copy first, ``packs``).
"""
from __future__ import annotations

import functools

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from . import lowp
from .base import Candidate, epilogue_compute, finish, make_candidate

FAMILY = "winograd"
TILES = (2, 4, 6)
# Max relative error (against a float64 direct convolution, output scale) a Winograd candidate
# may show on the layer's own weights before it is rejected: F(6x6) on ResNet-sized layers
# measures 1-3e-5 here; a candidate beyond this would eat the network's 1e-4 budget.
TOLERANCE = 5e-5
_PT = {2: 7, 4: 7, 6: 5}      # tiles per GEMM register tile (measured best in the prototype)
_LANES = 32                   # output channels per GEMM register tile


def applies(spec: ConvSpec) -> bool:
    return spec.kernel == (3, 3) and spec.stride == (1, 1) and spec.groups == 1 and not spec.dilated


@functools.lru_cache(maxsize=None)
def matrices(m: int):
    """A (alpha x m), B (alpha x alpha), G (alpha x 3) as TOPI builds them (float64; read-only:
    kept per ``m``, since TOPI's exact polynomial arithmetic took 14 ms a call, 0.3 s of each
    ResNet-18 network's rewrite)."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points
    A, B, G = _cook_toom_convolution(_interpolation_points(m + 1), m, 3)
    out = tuple(np.asarray(x, np.float64) for x in (A, B, G))
    for x in out:
        x.flags.writeable = False
    return out


def packs(m: int) -> bool:
    """Whether a plain-NCHW F(m x m) kernel copies its input into a padded NCHW[ib]c buffer (one
    parallel pass, vectorized over the channel block) before the input transform, instead of
    gathering each channel block as the transform reads it. F(4x4) does: its unrolled transform
    gathers 64 strided vectors per tile, and it compiled in 1.3-2.9 s against 0.35-0.65 s packed
    (Zen 4, ResNet-18's layers, ``bench/winograd_nchw_pack.py``). Packed, it ran 0.84-0.97x the
    gathered time on the 28x28 to 7x7 layers in three runs, and on 56x56 0.75x in one run but
    1.23x in two taken while the machine ran slow (its 0.86 MB copy competes for a cache a
    neighbour is taking). F(2x2) gathers: it compiles in 0.4-0.8 s either way, and packing was no
    faster in every run (0.85-1.20x). Plain-NCHW F(6x6) is not proposed."""
    return m >= 4


def padded_size(out_h: int, out_w: int, m: int, pt: int) -> tuple[int, int]:
    """(height, width) of the padded input an F(m x m) kernel's tiles read, ``pt`` tiles to a
    block: whole rows of zero tiles pad the last tile block."""
    nw = -(-out_w // m)
    blocks = -(-(-(-out_h // m) * nw) // pt)
    return -(-(blocks * pt) // nw) * m + 2, nw * m + 2


def _blocks(ch: int) -> list[int]:
    return [b for b in (16, 32) if ch % b == 0]


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=None) -> list[Candidate]:
    if not applies(spec) or spec.out_channels % 16 or spec.in_channels % 8:
        return []
    out = []
    for m in TILES:
        alpha = m + 2
        welems = alpha * alpha * spec.out_channels * spec.in_channels
        tiles = -(-spec.out_h // m) * -(-spec.out_w // m)
        pt = min(_PT[m], tiles)
        layouts_ = [(layouts.blocked(ib), layouts.blocked(ob), ib, ob)
                    for ib in _blocks(spec.in_channels) for ob in _blocks(spec.out_channels)]
        if m < 6:   # plain-NCHW F(6x6) gathers so much that it builds in ~9 s and never wins
            layouts_.append((layouts.NCHW, layouts.NCHW, 16 if spec.in_channels % 16 == 0 else 8, 16))
        for lin, lout, ib, ob in layouts_:
            ntile_blocks = -(-tiles // pt)
            # V (transformed input) and M (GEMM result) live between the stages
            work = 4 * alpha * alpha * ntile_blocks * pt * (spec.in_channels + spec.out_channels)
            if lin == layouts.NCHW and packs(m):        # and the padded, blocked copy of the input
                hp, wp = padded_size(spec.out_h, spec.out_w, m, pt)
                work += 4 * spec.in_channels * hp * wp
            # the plain-NCHW variant's key must differ from the blocked one with the same blocks
            # (the key names the record: sharing it shared one timing between two kernels)
            extra = {"nchw": 1} if lin == layouts.NCHW else {}
            out.append(make_candidate(FAMILY, spec, in_layout=lin, out_layout=lout,
                                      weight_layout=f"winograd{alpha}x{alpha}O{ob}o", weight_elems=welems,
                                      workspace_bytes=work, m=m, ic_bn=ib, oc_bn=ob, pt=pt, **extra))
    return out


def _id(v):
    return v


def _sel(idx, exprs):
    import tvm
    r = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        r = tvm.tirx.Select(idx == k, exprs[k], r)
    return r


def _comb(idx, M, terms):
    """Element ``idx`` (a loop variable, unrolled before vectorizing: ``codegen.pipeline``) of
    ``M^T terms``: sum over r of ``terms[r] * M[r, idx]``, each coefficient a Select on the index
    among constants. Unrolled, the Select folds to a constant and TVM's constant folding drops the
    zero terms and the multiplications by 1, leaving the explicit sum of the non-zero entries.
    Until 2026-12 the Select chose among whole linear combinations, one per index value: the same
    machine code (assembly identical, ``bench/winograd_comb_ab.py``), but every alternative's
    loads were simplified before the Select folded, alpha times the work (F(6x6) compiled in
    1.26 s against 0.95 s now, the plain-NCHW F(4x4) 2.26 s against 1.42 s, Zen 4)."""
    import tvm
    e = None
    for r, t in enumerate(terms):
        row = [float(np.float32(c)) for c in M[r]]
        if not any(row):
            continue
        term = t * _sel(idx, [tvm.tirx.const(c, "float32") for c in row])
        e = term if e is None else e + term
    return e if e is not None else tvm.tirx.const(0.0, "float32")


def compute(spec: ConvSpec, cand: Candidate, bf16: bool = False):
    """The Winograd stages; ``bf16``: V and the weights in bf16 (uint16 bits, weights packed
    (alpha, alpha, K/ob, C/2, ob, 2)) and the GEMM as bf16 dot products into fp32 (``lowp``)."""
    import tvm
    from tvm import te
    m, ib, ob, pt = (cand.param(k) for k in ("m", "ic_bn", "oc_bn", "pt"))
    nchw = cand.in_layout == layouts.NCHW
    alpha = m + 2
    A, B, _ = matrices(m)
    N, C, H, W = spec.in_shape
    K, OH, OW = spec.out_channels, spec.out_h, spec.out_w
    top, left = spec.padding[0], spec.padding[1]
    CB, KB = C // ib, K // ob
    nH, nW = -(-OH // m), -(-OW // m)
    P = nH * nW
    Po = -(-P // pt)
    Hp, Wp = padded_size(OH, OW, m, pt)
    zero = tvm.tirx.const(0.0, "float32")
    if nchw:
        data = te.placeholder((N, C, H, W), name="data")
        load = lambda n, cb, h, w, c: data[n, cb * ib + c, h, w]   # noqa: E731
    else:
        data = te.placeholder((N, CB, H, W, ib), name="data")
        load = lambda n, cb, h, w, c: data[n, cb, h, w, c]         # noqa: E731
    if bf16:
        U = te.placeholder((alpha, alpha, KB, C // 2, ob, 2), "uint16", name="weight")
    else:
        U = te.placeholder((alpha, alpha, KB, C, ob), name="weight")
    pad = te.compute((N, CB, Hp, Wp, ib), lambda n, cb, h, w, c: te.if_then_else(
        tvm.tirx.all(h >= top, h < H + top, w >= left, w < W + left), load(n, cb, h - top, w - left, c), zero),
        name="data_pad")

    def dval(n, po, cb, pi, ra, rb, c):
        p = po * pt + pi
        return pad[n, cb, (p // nW) * m + ra, (p % nW) * m + rb, c]

    T1 = te.compute((N, alpha, Po, CB, pt, alpha, ib), lambda n, e, po, cb, pi, rb, c: _comb(
        e, B, [dval(n, po, cb, pi, ra, rb, c) for ra in range(alpha)]),
        name="T1")
    V = te.compute((N, alpha, alpha, Po, CB, pt, ib), lambda n, e, nu, po, cb, pi, c: (lowp.narrow if bf16 else _id)(
        _comb(nu, B, [T1[n, e, po, cb, pi, rb, c] for rb in range(alpha)])),
        name="V")
    rcb = te.reduce_axis((0, CB), "rcb")
    if bf16:
        r2, r1 = te.reduce_axis((0, ib // 2), "rc"), te.reduce_axis((0, 2), "r1")
        M = te.compute((N, alpha, alpha, KB, Po, pt, ob), lambda n, e, nu, kb, po, pi, c: te.sum(
            lowp.widen(V[n, e, nu, po, rcb, pi, r2 * 2 + r1]) * lowp.widen(U[e, nu, kb, rcb * (ib // 2) + r2, c, r1]),
            axis=[rcb, r2, r1]), name="M")
    else:
        rc = te.reduce_axis((0, ib), "rc")
        M = te.compute((N, alpha, alpha, KB, Po, pt, ob), lambda n, e, nu, kb, po, pi, c: te.sum(
            V[n, e, nu, po, rcb, pi, rc] * U[e, nu, kb, rcb * ib + rc, c], axis=[rcb, rc]), name="M")

    def mval(n, kb, p, e, nu, c):
        return M[n, e, nu, kb, p // pt, p % pt, c]

    T2 = te.compute((N, KB, P, m, alpha, ob), lambda n, kb, p, i, nu, c: _comb(
        i, A, [mval(n, kb, p, e, nu, c) for e in range(alpha)]), name="T2")
    Y = te.compute((N, KB, P, m, m, ob), lambda n, kb, p, i, j, c: _comb(
        j, A, [T2[n, kb, p, i, nu, c] for nu in range(alpha)]), name="Y")
    bias = te.placeholder((K,) if nchw else (KB, ob), name="bias") if spec.bias else None
    if nchw:
        conv = lambda n, k, h, w: Y[n, k // ob, (h // m) * nW + w // m, h % m, w % m, k % ob]  # noqa: E731
        bidx = lambda n, k, h, w: (k,)                                                         # noqa: E731
        oshape = (N, K, OH, OW)
    else:
        conv = lambda n, kb, h, w, c: Y[n, kb, (h // m) * nW + w // m, h % m, w % m, c]        # noqa: E731
        bidx = lambda n, kb, h, w, c: (kb, c)                                                  # noqa: E731
        oshape = (N, KB, OH, OW, ob)
    res = te.placeholder(oshape, name="residual") if spec.residual else None

    class _Conv:                 # epilogue_compute reads conv(*idx) and conv.shape
        shape = oshape

        def __call__(self, *idx):
            return conv(*idx)
    out = epilogue_compute(_Conv(), spec, bias, res, bidx)
    args = [data, U] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv", bf16: bool = False):
    from tvm.s_tir import Schedule
    m, ob = cand.param("m"), cand.param("oc_bn")
    nchw = cand.in_layout == layouts.NCHW
    sch = Schedule(compute(spec, cand, bf16))
    # input transform: per (tile block, channel block), T1 then V, vectorized over channels
    if nchw and packs(m):
        n, cb, h, w, c = sch.get_loops(sch.get_sblock("data_pad"))
        sch.parallel(sch.fuse(n, cb, h))
        sch.vectorize(c)
    else:
        sch.compute_inline(sch.get_sblock("data_pad"))
    V, T1 = sch.get_sblock("V"), sch.get_sblock("T1")
    n, e, nu, po, cb, pi, c = sch.get_loops(V)
    sch.reorder(n, po, cb, pi, e, nu, c)
    sch.compute_at(T1, pi)
    t_e, t_rb, t_c = sch.get_loops(T1)[-3:]
    sch.unroll(t_e)
    sch.unroll(t_rb)
    sch.vectorize(t_c)
    sch.unroll(e)
    sch.unroll(nu)
    sch.vectorize(c)
    sch.parallel(sch.fuse(n, po, cb))
    # batched GEMM: pt tiles x (cot * ob) output channels in registers
    Mb = sch.get_sblock("M")
    loops = sch.get_loops(Mb)
    n, e, nu, kb, po, pi, c, rcb, rc = loops[:9]
    KB = spec.out_channels // ob
    cot = max(1, _LANES // ob) if KB % max(1, _LANES // ob) == 0 else 1
    kbo, kbi = sch.split(kb, [None, cot])
    if bf16:                 # 16-lane bf16 dot products over channel pairs (r1) into fp32
        lowp.register()
        cv, c16 = sch.split(c, [None, 16])
        sch.reorder(n, e, nu, kbo, po, rcb, rc, pi, kbi, cv, c16, loops[9])
        sch.unroll(cv)
    else:
        sch.reorder(n, e, nu, kbo, po, rcb, rc, pi, kbi, c)
    wb = sch.cache_write(Mb, 0, "global")
    sch.reverse_compute_at(wb, po)
    if not bf16:
        sch.vectorize(c)
    sch.unroll(kbi)
    sch.unroll(pi)
    sch.vectorize(sch.get_loops(wb)[-1])
    sch.parallel(sch.fuse(n, e, nu, kbo))
    init = sch.decompose_reduction(Mb, rcb)
    sch.vectorize(sch.get_loops(init)[-1])
    if bf16:
        sch.tensorize(c16, lowp.DOT)
    # output transform per output tile, epilogue on the write
    ob_ = sch.get_sblock("epilogue")
    loops = sch.get_loops(ob_)
    if nchw:
        n, k, h, w = loops
        ko, ki = sch.split(k, [None, ob])
        ho, hi = sch.split(h, [None, m])
        wo, wi = sch.split(w, [None, m])
        sch.reorder(n, ko, ho, wo, hi, ki, wi)
        inner, outer = wi, (n, ko, ho)
    else:
        n, kb, h, w, c = loops
        ho, hi = sch.split(h, [None, m])
        wo, wi = sch.split(w, [None, m])
        sch.reorder(n, kb, ho, wo, hi, wi, c)
        inner, outer = c, (n, kb, ho)
    Yb, T2 = sch.get_sblock("Y"), sch.get_sblock("T2")
    sch.compute_at(Yb, wo)
    sch.compute_at(T2, wo)
    for blk in (Yb, T2):
        l = sch.get_loops(blk)[-3:]
        sch.unroll(l[0])
        sch.unroll(l[1])
        sch.vectorize(l[2])
    sch.unroll(hi)
    if nchw:
        sch.unroll(wi)
    else:
        sch.unroll(wi)
        sch.vectorize(inner)
    sch.parallel(sch.fuse(*outer))
    func = finish(sch.mod["main"], cand, spec, name)
    return lowp.with_llvm_import(func) if bf16 else func


def transform_weight(weight: np.ndarray, m: int, ob: int) -> np.ndarray:
    """OIHW -> U[alpha, alpha, K/ob, C, ob] = G w G^T (float64, then float32)."""
    _, _, G = matrices(m)
    G = G.astype(np.float32).astype(np.float64)
    # optimize: two BLAS contractions instead of einsum's one nested loop (256x256 weights, m=6:
    # 0.025 s against 0.094 s; the check packs it for every Winograd candidate measured)
    U = np.einsum("ek,ockl,nl->enoc", G, weight.astype(np.float64), G, optimize=True)      # (a, a, K, C)
    a, _, K, C = U.shape
    return np.ascontiguousarray(U.reshape(a, a, K // ob, ob, C).transpose(0, 1, 2, 4, 3).astype(np.float32))


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    ob = cand.param("oc_bn")
    out = [transform_weight(weight, cand.param("m"), ob)]
    if spec.bias:
        b = bias.astype("float32")
        out.append(np.ascontiguousarray(b if cand.in_layout == layouts.NCHW else b.reshape(-1, ob)))
    return out
