"""``sparse_csr``: direct convolution over the nonzero weights only (unstructured sparsity).

The kernel first copies the NCHW input into a zero-padded "flat" buffer: each channel's padded
image as one row-major strip with row stride RS (for stride s, s*s phase planes, so that every
tap becomes a constant shift). An output pixel p = h*RS + w then reads input p + offset(ci, kh,
kw) for every nonzero weight: the convolution is a 1-D sparse-times-dense product whose index
decode is one add. V vectors of 16 output pixels stay in registers; each output channel's
nonzeros are split by input-channel blocks of CB channels so the input strip in use stays in L1.
Block-sparse weights (BSR: blocks of R consecutive output channels zero or nonzero together, as
block pruning leaves them) get ``R`` > 1 variants: a block's nonzero position is decoded once,
its input vector loaded once, and it feeds R x V accumulators (R weights broadcast), where CSR
loads one input vector per FMA. A last pass writes the NCHW output, dropping the junk columns, with the epilogue applied there
(``fused=1``), or without it (``fused=0``): then the kernel is opaque to Relax's fusion and the
epilogue runs as its own scheduled PrimFunc, whose measured time the solver adds.
"""
# no `from __future__ import annotations`: TVMScript reads the kernel's annotations as objects
import zlib

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from .base import EPILOGUES, Candidate, finish

FAMILY = "sparse_csr"
LANES = 16
# Below this fraction of zeros a kernel that does ~1/3 of dense FLOP/s per useful FLOP cannot
# win, so its candidates would only cost measurement time (a stray zero in a dense layer after
# BN folding must not add 8 builds). This bounds what is measured, not what is chosen: above it,
# dense and sparse are both measured and the solver decides.
MIN_SPARSITY = 0.1


def _rup(a: int, b: int) -> int:
    return -(-a // b) * b


def geometry(spec: ConvSpec, V: int):
    s = spec.stride[0]
    kh, kw = spec.kernel
    hp = spec.height + spec.padding[0] + spec.padding[2]
    wp = spec.width + spec.padding[1] + spec.padding[3]
    rs = -(-wp // s)                         # row stride of a phase plane
    hq = -(-hp // s)                         # rows of a phase plane
    npix = spec.out_h * rs
    vl = V * LANES
    nt = -(-npix // vl)
    shift_max = ((kh - 1) // s) * rs + (kw - 1) // s
    s_in = _rup(max(hq * rs, shift_max + nt * vl), LANES)
    return dict(s=s, rs=rs, hq=hq, nt=nt, vl=vl, s_in=s_in, planes=spec.in_channels * s * s,
                npix_pad=nt * vl)


def offsets(spec: ConvSpec, V: int, ci, kh, kw):
    g = geometry(spec, V)
    s = g["s"]
    plane = (ci * s + kh % s) * s + kw % s
    return plane * g["s_in"] + (kh // s) * g["rs"] + kw // s


def _csr(spec: ConvSpec, weight: np.ndarray, V: int, CB: int, R: int = 1):
    """Values (``R`` per nonzero block, block-major), flat input offsets and row pointers per
    (output-channel block, input-channel block)."""
    O, C = weight.shape[:2]
    ncb = -(-C // CB)
    vals, offs, ptr = [], [], [0]
    for ob in range(O // R):
        blk = weight[ob * R:(ob + 1) * R]
        for cb in range(ncb):
            sub = blk[:, cb * CB:(cb + 1) * CB]
            ci, kh, kw = np.nonzero(np.any(sub != 0, axis=0))
            vals.append(sub[:, ci, kh, kw].T.reshape(-1))
            offs.append(offsets(spec, V, ci + cb * CB, kh, kw))
            ptr.append(ptr[-1] + len(ci))
    return (np.concatenate(vals).astype("float32"), np.concatenate(offs).astype("int32"),
            np.asarray(ptr, "int32"))


def blocks(weight: np.ndarray, R: int) -> int:
    """Nonzero blocks of ``R`` consecutive output channels (at one input channel and tap)."""
    O = weight.shape[0]
    return int(np.count_nonzero(np.any(weight.reshape(O // R, R, -1) != 0, axis=1)))


# A block variant is proposed where at least this fraction of its blocks' entries are nonzero
# (unstructured 90% sparsity fills 4-blocks ~30%: CSR does less work there).
MIN_BLOCK_FILL = 0.5
BLOCK_V = {1: (4, 8), 4: (2, 4), 8: (2,)}     # pixel vectors per block: R x V accumulators <= 16


def applies(spec: ConvSpec) -> bool:
    return spec.groups == 1 and spec.stride[0] == spec.stride[1] and spec.stride[0] in (1, 2) and not spec.dilated


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=None) -> list[Candidate]:
    if weight is None or not applies(spec):
        return []
    nnz = int(np.count_nonzero(weight))
    if nnz == 0 or nnz > (1 - MIN_SPARSITY) * weight.size:
        return []              # (nearly) dense weights: nothing worth skipping
    # the timing depends on where the nonzeros are, so their pattern is part of the key
    pattern = zlib.crc32(np.packbits(weight != 0).tobytes())
    cbs = sorted({min(cb, spec.in_channels) for cb in (32, 64)})
    out = []
    for R, Vs in BLOCK_V.items():
        if R > 1:
            if spec.out_channels % R:
                continue
            nnzb = blocks(weight, R)
            if nnz < MIN_BLOCK_FILL * nnzb * R:
                continue
        else:
            nnzb = nnz
        for V in Vs:
            g = geometry(spec, V)
            work = 4 * (g["planes"] * g["s_in"] + spec.out_channels * g["npix_pad"])
            for CB in cbs:
                ncb = -(-spec.in_channels // CB)
                wbytes = 4 * ((R + 1) * nnzb + spec.out_channels // R * ncb + 1) + (4 * spec.out_channels if spec.bias else 0)
                # the kernel's own epilogue knows bias, residual and clamp; an activation runs unfused
                for fused in ((1, 0) if spec.act is None and spec.quant is None and spec.quant_pre is None else (0,)):
                    params = dict(V=V, CB=CB, fused=fused, nnz=nnzb, pattern=pattern) | ({"R": R} if R > 1 else {})
                    out.append(Candidate(
                        family=FAMILY, params=tuple(sorted(params.items())),
                        in_layout=layouts.NCHW, out_layout=layouts.NCHW, weight_layout=f"BSR{R}" if R > 1 else "CSR",
                        fusable_epilogues=EPILOGUES if fused else frozenset(), weight_bytes=wbytes, workspace_bytes=work))
    return out


def _kernel(spec: ConvSpec, V: int, CB: int, nnz: int, threads: int, epi: bool, R: int = 1):
    from tvm.script import tirx as T
    g = geometry(spec, V)
    N, C, H, W = spec.in_shape
    O, OH, OW = spec.out_channels, spec.out_h, spec.out_w
    s, rs, nt, vl, s_in = g["s"], g["rs"], g["nt"], g["vl"], g["s_in"]
    npix_pad, planes = g["npix_pad"], g["planes"]
    pt, pl = spec.padding[0], spec.padding[1]
    ncb = -(-C // CB)
    OB = O // R
    ng = max(d for d in range(1, min(OB, 2 * threads) + 1) if OB % d == 0)
    og = OB // ng
    has_bias, has_res = spec.bias and epi, spec.residual and epi
    has_lo = epi and spec.clip_lo is not None
    has_hi = epi and spec.clip_hi is not None
    lo = float(spec.clip_lo) if has_lo else 0.0
    hi = float(spec.clip_hi) if has_hi else 0.0
    bias_shape = (O,) if has_bias else (1,)
    res_shape = spec.out_shape if has_res else (1,)
    nvec_in = s_in // LANES

    @T.prim_func
    def kern(x: T.Buffer((N, C, H, W), "float32"), wv: T.Buffer((max(nnz, 1) * R,), "float32"),
             wo: T.Buffer((max(nnz, 1),), "int32"), ptr: T.Buffer((OB * ncb + 1,), "int32"),
             bias: T.Buffer(bias_shape, "float32"), res: T.Buffer(res_shape, "float32"),
             out: T.Buffer((N, O, OH, OW), "float32")):
        T.func_attr({"tirx.noalias": True})
        xf = T.alloc_buffer((planes * s_in + vl,), "float32")
        yf = T.alloc_buffer((O * npix_pad,), "float32")
        for n in range(N):
            # 1. padded flat (phase-plane) copy of the input
            for p in T.parallel(planes):
                for i in range(nvec_in):
                    for l in T.vectorized(16):
                        xf[p * s_in + i * 16 + l] = T.float32(0)
            if s == 1:      # rows copy straight into the padded strip
                for c in T.parallel(C):
                    for h in range(H):
                        for w in T.vectorized(W):
                            xf[c * s_in + (h + pt) * rs + pl + w] = x[n, c, h, w]
            else:
                for c in T.parallel(C):
                    for ph, pw, r in T.grid(s, s, g["hq"]):
                        for q in range(rs):
                            if r * s + ph - pt >= 0 and r * s + ph - pt < H and q * s + pw - pl >= 0 and q * s + pw - pl < W:
                                xf[((c * s + ph) * s + pw) * s_in + r * rs + q] = x[n, c, r * s + ph - pt, q * s + pw - pl]
            # 2. sparse x dense: R x V x 16 accumulators per (output-channel block, tile)
            for gi in T.parallel(ng):
                for t in range(nt):
                    for cb in range(ncb):
                        for oo in range(og):
                            acc = T.alloc_buffer((R * vl,), "float32", scope="local")
                            xv = T.alloc_buffer((vl,), "float32", scope="local")
                            if cb == 0:
                                for r in T.unroll(R):
                                    for v in T.unroll(V):
                                        for l in T.vectorized(16):
                                            acc[r * vl + v * 16 + l] = T.float32(0)
                            else:
                                for r in T.unroll(R):
                                    for v in T.unroll(V):
                                        for l in T.vectorized(16):
                                            acc[r * vl + v * 16 + l] = yf[((gi * og + oo) * R + r) * npix_pad + t * vl + v * 16 + l]
                            for j in range(ptr[(gi * og + oo) * ncb + cb], ptr[(gi * og + oo) * ncb + cb + 1]):
                                for v in T.unroll(V):
                                    for l in T.vectorized(16):
                                        xv[v * 16 + l] = xf[wo[j] + t * vl + v * 16 + l]
                                for r in T.unroll(R):
                                    for v in T.unroll(V):
                                        for l in T.vectorized(16):
                                            acc[r * vl + v * 16 + l] = acc[r * vl + v * 16 + l] + wv[j * R + r] * xv[v * 16 + l]
                            for r in T.unroll(R):
                                for v in T.unroll(V):
                                    for l in T.vectorized(16):
                                        yf[((gi * og + oo) * R + r) * npix_pad + t * vl + v * 16 + l] = acc[r * vl + v * 16 + l]
            # 3. NCHW output without the junk columns, epilogue on the write
            for o in T.parallel(O):
                for h in range(OH):
                    for w in T.vectorized(OW):
                        out[n, o, h, w] = yf[o * npix_pad + h * rs + w]
                        if has_bias:
                            out[n, o, h, w] = out[n, o, h, w] + bias[o]
                        if has_res:
                            out[n, o, h, w] = out[n, o, h, w] + res[n, o, h, w]
                        if has_lo:
                            out[n, o, h, w] = T.max(out[n, o, h, w], T.float32(lo))
                        if has_hi:
                            out[n, o, h, w] = T.min(out[n, o, h, w], T.float32(hi))
    return kern


def _R(cand: Candidate) -> int:
    return dict(cand.params).get("R", 1)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    threads = int(target.attrs["num-cores"]) if "num-cores" in target.attrs else 2
    f = _kernel(spec, cand.param("V"), cand.param("CB"), cand.param("nnz"), threads, bool(cand.param("fused")),
                _R(cand))
    return finish(f, cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    vals, offs, ptr = _csr(spec, weight, cand.param("V"), cand.param("CB"), _R(cand))
    fused = bool(cand.param("fused"))
    # the kernel always takes (bias, residual): placeholders of one element stand for the parts
    # this variant does not apply (the residual, when fused, is the call's last input instead)
    out = [vals, offs, ptr, np.ascontiguousarray(bias, dtype="float32") if spec.bias and fused
           else np.zeros(1, "float32")]
    if not (spec.residual and fused):
        out.append(np.zeros(1, "float32"))
    return out
