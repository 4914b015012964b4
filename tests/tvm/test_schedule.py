"""The generic schedule (graphselect.codegen.schedule) on dense layers: numerics against numpy
for widths that divide, do not divide, and fall back; the vector chunk it picks."""
import numpy as np
import pytest
import tvm
from tvm import te

from graphselect.codegen.schedule import _reduction_width, schedule_func
from graphselect.target import parse_target


def _dense(M, K, N):
    x = te.placeholder((M, K), name="x")
    w = te.placeholder((K, N), name="w")
    b = te.placeholder((N,), name="b")
    k = te.reduce_axis((0, K), "k")
    mm = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="matmul")
    out = te.compute((M, N), lambda i, j: mm[i, j] + b[j], name="add")
    return te.create_prim_func([x, w, b, out])


@pytest.mark.parametrize("M,K,N", [(1, 1280, 1000), (1, 64, 256), (4, 96, 1000), (1, 50, 36), (1, 33, 1009)])
def test_dense_scheduled_matches_numpy(M, K, N):
    f = schedule_func(_dense(M, K, N)).with_attr("global_symbol", "main")
    mod = tvm.compile(tvm.IRModule({"main": f}), target=parse_target("llvm", threads=2).tvm_target()).mod
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((M, K), (K, N), (N,)))
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((M, N), "float32"), dev)
    mod["main"](*(tvm.runtime.tensor(a, dev) for a in (x, w, b)), out)
    ref = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_reduction_width_keeps_eight_chunks_and_whole_vectors():
    assert _reduction_width(1000) == 40          # 8 and 40 divide 1000; 200 leaves 5 chunks
    assert _reduction_width(4096) == 128
    assert _reduction_width(256) == 32
    assert _reduction_width(1009) is None        # prime: the plain schedule
    assert _reduction_width(36) is None          # too small to split


@pytest.mark.parametrize("M,K,N", [(1, 1280, 1000), (3, 64, 256)])
def test_matmul_by_a_constant_runs_as_a_packed_gemv(M, K, N):
    from tvm import relax as rx

    from graphselect.codegen.emit import emit_dense
    from graphselect.codegen.lower import build
    rng = np.random.default_rng(1)
    w = rng.standard_normal((K, N)).astype("float32")
    x = rx.Var("x", rx.TensorType((M, K), "float32"))
    bb = rx.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            expr = rx.op.matmul(x, rx.const(w))
            y = emit_dense(bb, expr, {})
            assert y is not None
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    assert "dense_gemv" in [gv.name_hint for gv in mod.get_global_vars()]
    target = parse_target("llvm", threads=2).tvm_target()
    vm = rx.VirtualMachine(build(mod, target), tvm.cpu())
    xv = rng.standard_normal((M, K)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(xv)).numpy()
    ref = xv.astype(np.float64) @ w
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_other_matmuls_are_left_to_the_generic_path():
    from tvm import relax as rx

    from graphselect.codegen.emit import emit_dense
    x = rx.Var("x", rx.TensorType((1, 33), "float32"))
    y = rx.Var("y", rx.TensorType((33, 1009), "float32"))
    bb = rx.BlockBuilder()
    with bb.function("main", [x, y]):
        assert emit_dense(bb, rx.op.matmul(x, y), {}) is None                       # not a constant
        assert emit_dense(bb, rx.op.matmul(x, rx.const(np.ones((33, 1009), "float32"))), {}) is None  # prime N
        big = rx.Var("b", rx.TensorType((32, 33), "float32"))
        assert emit_dense(bb, rx.op.matmul(big, rx.const(np.ones((33, 64), "float32"))), {}) is None  # 32 rows
        bb.emit_func_output(x)
