"""Stage 4: this machine's caches and peak: the residency budget and steps (DESIGN.md, "Cache")."""
from __future__ import annotations

from dataclasses import dataclass

from .settings import Settings

@dataclass(frozen=True)
class Machine:
    budget: int | None                 # residency budget before calibration (bytes)
    steps: tuple[tuple[int, float], ...]
    hardware: dict                     # what the report shows
    launch_ms: float = 0.0             # a kernel call's runtime cost, probed (0: not probed)
    floor: tuple[float, float, float] = (0.0, 0.0, 0.0)   # the protocol's reading of an empty kernel, ms


def machine(s: Settings, store) -> Machine:
    from costmodels.hardware import (detect, fma_peak, launch_cost, residency, residency_budget, throughput,
                                     timing_floor)
    from ..measure.peak import measure_floor_ms, measure_launch_ms, measure_peak_gflops
    from ..target import cpu_id
    hw = detect()
    if s.cache_budget == "auto":
        budget = residency_budget(hw)
    else:
        budget = None if s.cache_budget in (None, "off") else int(s.cache_budget)
    if s.remote:    # this machine's caches say nothing of the device's, and no probe runs there
        return Machine(budget, (), {"source": f"RPC device {s.ctx.cpu} (key {s.rpc.key}): caches and peak not probed"})
    hardware = {"l1d_bytes": hw.l1d_bytes, "l2_bytes": hw.l2_bytes, "l3_bytes": hw.l3_bytes,
                "line_bytes": hw.line_bytes, "source": hw.source, "residency_budget_bytes": residency_budget(hw)}
    steps = ()
    launch, floor = 0.0, (0.0, 0.0, 0.0)
    if store.path is not None:     # peak FLOP/s, bandwidth, residency steps: measured once per CPU and threads
        # BLAS throughput, bandwidth and residency do not depend on the target: kept under the CPU's
        # family and model too (the marketing name alone names several generations)
        cpu = cpu_id()
        tp = throughput(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=cpu)
        peak = fma_peak(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=s.ctx.cpu,
                        isa=s.spec.key, measure=lambda: measure_peak_gflops(s.target, s.spec.threads))
        launch = launch_cost(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=s.ctx.cpu,
                             isa=s.spec.key, measure=lambda: measure_launch_ms(s.target, s.spec.threads))
        floor = timing_floor(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=s.ctx.cpu,
                            isa=s.spec.key, measure=lambda: measure_floor_ms(s.target, s.spec.threads))
        # peak: what the target's FMAs issue (the kernels' ceiling); blas: numpy's GEMM
        hardware.update(peak_gflops=peak, blas_gflops=tp.peak_gflops, bandwidth_gbs=tp.bandwidth_gbs,
                        launch_us=round(launch * 1e3, 2), floor_us=[round(f * 1e3, 2) for f in floor])
        if s.cache_budget == "auto" and budget:
            res = residency(store.path.parent / "hardware.json", budget, threads=s.spec.threads, cpu=cpu)
            steps = tuple(res.steps)
            hardware["residency_steps"] = [list(st) for st in res.steps]
    return Machine(budget, steps, hardware, launch, floor)


