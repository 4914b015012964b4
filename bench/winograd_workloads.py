"""The conv workloads the Winograd A/B benches compare kernels on (``pipeline_ab``,
``winograd_comb_ab``, ``winograd_nchw_pack``)."""
from __future__ import annotations


def bias_relu_winograd(model: str):
    """(settings, [(workload key, ConvSpec)]): a zoo model's stride-1 3x3 convs with a bias+relu
    epilogue, one per workload, in the order of the layer graph."""
    import models
    from graphselect.candidates import winograd
    from graphselect.stages.load import load
    from graphselect.stages.settings import settings
    s = settings(cache=False)
    lg = load(models.build(model), s).lg
    specs = {l.conv.key: l.conv for l in lg.layers.values() if l.kind == "conv"}
    return s, [(k, spec) for k, spec in specs.items() if "epi=bias+relu" in k and winograd.applies(spec)]
