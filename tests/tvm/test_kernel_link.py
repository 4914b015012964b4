"""Kernels measurement compiled, linked into a network instead of compiled again (measure.kernels)."""
import numpy as np
import tvm
from tvm import relax as rx
from tvm import te

from graphselect.codegen.lower import compile_module
from graphselect.measure import kernels
from graphselect.measure.builder import Builder

TARGET = tvm.target.Target("llvm")


def _add(c: float):
    x = te.placeholder((16,), "float32", name="x")
    y = te.compute((16,), lambda i: x[i] + np.float32(c), name="y")
    return te.create_prim_func([x, y])


def _network():
    """x -> +1 -> +2 -> +1, call_tirs to two PrimFuncs (the first called twice)."""
    bb = rx.BlockBuilder()
    x = rx.Var("x", rx.TensorType((16,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            g1 = bb.add_func(_add(1.0).with_attr("global_symbol", "conv1_direct"), "conv1_direct")
            g2 = bb.add_func(_add(2.0).with_attr("global_symbol", "conv2_direct"), "conv2_direct")
            y = bb.emit(rx.call_tir(g1, [x], rx.TensorType((16,), "float32")))
            z = bb.emit(rx.call_tir(g2, [y], rx.TensorType((16,), "float32")))
            o = bb.emit_output(bb.emit(rx.call_tir(g1, [z], rx.TensorType((16,), "float32"))))
        bb.emit_func_output(o)
    return bb.get()


def test_a_measured_kernel_is_linked_and_the_other_compiled(tmp_path):
    kdir = tmp_path / "kernels"
    with Builder(TARGET, 1, keep=kdir) as b:          # measurement's compile of the first add only
        (mod,) = b.compile_all([_add(1.0).with_attr("global_symbol", "main")])
    assert len(list(kdir.glob("*.o"))) == 1
    x = np.arange(16, dtype="float32")
    a = tvm.runtime.tensor(x)
    out = tvm.runtime.tensor(np.zeros(16, "float32"))
    mod["main"](a, out)                                   # the runners' entry name still works
    np.testing.assert_allclose(out.numpy(), x + 1)
    net = _network()
    new, objects, options = kernels.link_measured(net, kdir, TARGET)
    names = {gv.name_hint for gv, f in new.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert "conv1_direct" not in names and "conv2_direct" in names
    assert len(objects) == 1 and len(options) == 1 and "conv1_direct" in options[0]
    lib_path = tmp_path / "net.so"
    compile_module(new, TARGET).export_library(str(lib_path), addons=objects, options=options)
    vm = rx.VirtualMachine(tvm.runtime.load_module(str(lib_path)), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), x + 4)


def test_nothing_changes_without_a_kept_object(tmp_path):
    net = _network()
    assert kernels.link_measured(net, tmp_path / "none", TARGET) == (net, [], [])
    (tmp_path / "empty").mkdir()
    assert kernels.link_measured(net, tmp_path / "empty", TARGET) == (net, [], [])


def test_the_key_ignores_names_but_not_the_code():
    f = _add(1.0)
    assert kernels.kernel_key(f.with_attr("global_symbol", "a"), TARGET) == \
        kernels.kernel_key(f.with_attr("global_symbol", "b").with_attr("op_pattern", 8), TARGET)
    assert kernels.kernel_key(f, TARGET) != kernels.kernel_key(_add(2.0), TARGET)
    assert kernels.kernel_key(f, TARGET) != kernels.kernel_key(f, tvm.target.Target({"kind": "llvm", "mcpu": "x86-64"}))


def test_no_kernel_dir_without_a_store_or_for_another_cpu(tmp_path):
    assert kernels.kernel_dir(None) is None
    assert kernels.kernel_dir(tmp_path / "r.sqlite", foreign=True) is None
    assert kernels.kernel_dir(tmp_path / "r.sqlite", remote=True) is None
    assert kernels.kernel_dir(tmp_path / "r.sqlite") == tmp_path / "kernels"
