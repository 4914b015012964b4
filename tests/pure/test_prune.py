import numpy as np
import pytest
from onnx import numpy_helper

import models


@pytest.mark.parametrize("sparsity", [0.3, 0.7, 0.9])
def test_every_conv_pruned_to_the_fraction_by_magnitude(sparsity):
    dense = models.build("tiny")
    m = models.build("tiny", sparsity=sparsity)
    convw = {n.input[1] for n in m.graph.node if n.op_type == "Conv"}
    before = {i.name: numpy_helper.to_array(i) for i in dense.graph.initializer}
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if init.name in convw:
            assert abs(np.mean(w == 0) - sparsity) <= 1.0 / w.size
            kept = np.abs(before[init.name][w != 0])
            dropped = np.abs(before[init.name][w == 0])
            assert kept.min() >= dropped.max()            # magnitude order
            np.testing.assert_array_equal(w[w != 0], before[init.name][w != 0])
        else:
            np.testing.assert_array_equal(w, before[init.name])   # BN, Gemm untouched


def test_bad_sparsity():
    with pytest.raises(ValueError):
        models.build("tiny", sparsity=1.0)
    assert models.build("tiny", sparsity=0.0).SerializeToString() == models.build("tiny").SerializeToString()


def test_block_pruning_zeroes_whole_blocks_of_output_channels_by_norm():
    dense = models.build("resnet18", image_size=32)
    m = models.build("resnet18", image_size=32, sparsity=0.9, block=4)
    convw = {n.input[1] for n in m.graph.node if n.op_type == "Conv"}
    before = {i.name: numpy_helper.to_array(i) for i in dense.graph.initializer}
    for init in m.graph.initializer:
        if init.name not in convw:
            continue
        w = numpy_helper.to_array(init)
        blocks = w.reshape(w.shape[0] // 4, 4, -1)
        zero = np.all(blocks == 0, axis=1)
        # every block is all zero or untouched; the zero fraction is the sparsity
        nz = ~zero
        np.testing.assert_array_equal(np.any(blocks == 0, axis=1) & nz, np.zeros_like(nz))
        assert abs(zero.mean() - 0.9) <= 1.0 / zero.size
        orig = before[init.name].reshape(blocks.shape)
        norm = np.sqrt((orig.astype(np.float64) ** 2).sum(axis=1))
        assert norm[nz].min() >= norm[zero].max()
        np.testing.assert_array_equal(blocks[np.broadcast_to(nz[:, None, :], blocks.shape)],
                                      orig[np.broadcast_to(nz[:, None, :], blocks.shape)])
    with pytest.raises(ValueError):
        models.build("tiny", sparsity=0.5, block=0)
