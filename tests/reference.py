"""Numpy references the tests check kernels against."""
import numpy as np


def conv2d_nchw(x, w, *, stride=(1, 1), padding=(0, 0, 0, 0), bias=None, residual=None, lo=None, hi=None):
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, _, h, wd = xp.shape
    o, _, kh, kw = w.shape
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw], w[:, :, i, j])
    if bias is not None:
        y += bias[None, :, None, None]
    if residual is not None:
        y += residual
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)
    return y


def rel_err(got, ref) -> float:
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_candidate(cand, spec, x, w, b, r, target):
    """Build one conv candidate alone and run it on NCHW arrays; (NCHW output, its PrimFunc)."""
    import tvm
    from graphselect import candidates
    from graphselect.graph import layouts
    from graphselect.measure.builder import compile_executable
    fam = candidates.family(cand)
    f = fam.build(cand, spec, target, "main")
    ex = compile_executable(f, target)
    dev = tvm.cpu()
    args = [layouts.pack(x, cand.in_layout)] + fam.pack(cand, spec, w, b)
    if r is not None:
        args.append(layouts.pack(r, cand.out_layout))
    out = tvm.runtime.tensor(np.zeros(layouts.shape_in(spec.out_shape, cand.out_layout), "float32"), dev)
    ex["main"](*[tvm.runtime.tensor(a, dev) for a in args], out)
    return layouts.unpack(out.numpy(), cand.out_layout), f
