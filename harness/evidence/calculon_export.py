"""Export an evidence profile in Calculon 0.1.0's system format.

Used only by the oracle runner, so that Calculon prices exactly the numbers
of our versioned profile (and, for the peak-only view, the same profile with
every compute, memory and network efficiency at 1.0).
"""

from __future__ import annotations

from typing import Any

from harness.evidence.profile import Curve, EvidenceProfile


def _curve(curve: Curve, scale: float, peak: bool) -> list[list[float]]:
    return [[p.threshold / scale, 1.0 if peak else p.efficiency] for p in curve.points]


def calculon_system(profile: EvidenceProfile, peak_only: bool = False) -> dict[str, Any]:
    def engines(table):
        return {dt: {"tflops": e.peak_flops_per_s / 1e12,
                     "gflops_efficiency": _curve(e.operation_size_efficiency, 1e9, peak_only)}
                for dt, e in table.items()}

    def memory(tier):
        return {"GiB": tier.capacity_bytes / 1024**3, "GBps": tier.bandwidth_bytes_per_s / 1e9,
                "MB_efficiency": _curve(tier.transfer_size_efficiency, 1e6, peak_only)}

    networks = []
    for n in profile.networks:
        ops = {}
        for op, model in n.collectives.items():
            ops[op] = [model.volume_multiplier, None if op == "p2p" else model.participant_offset]
        networks.append({"bandwidth": n.bandwidth_bytes_per_s / 1e9, "efficiency": 1.0 if peak_only else n.efficiency,
                         "size": n.size_processors, "latency": n.latency_s, "ops": ops,
                         "must_be_filled": n.must_be_filled, "processor_usage": n.processor_usage})
    return {"matrix": engines(profile.matrix), "vector": engines(profile.vector),
            "mem1": memory(profile.memory_tier1), "mem2": memory(profile.memory_tier2),
            "processing_mode": profile.processing_mode, "networks": networks}
