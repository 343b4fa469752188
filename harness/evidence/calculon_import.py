"""Convert a Calculon 0.1.0 system JSON into an evidence profile.

Only numbers are carried over; units are resolved into the profile's own
(operations per second, bytes, bytes per second, seconds).
"""

from __future__ import annotations

from typing import Any

from harness.evidence.profile import EvidenceProfile


def _curve(points: list[list[float]], scale: float) -> dict[str, Any]:
    return {"points": [{"threshold": _exact(t * scale), "efficiency": e} for t, e in points]}


def _exact(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _engine(cfg: dict[str, Any]) -> dict[str, Any]:
    return {dt: {"peak_flops_per_s": _exact(v["tflops"] * 1e12),
                 "operation_size_efficiency": _curve(v["gflops_efficiency"], 1e9)} for dt, v in cfg.items()}


def _memory(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"capacity_bytes": cfg["GiB"] * 1024**3, "bandwidth_bytes_per_s": _exact(cfg["GBps"] * 1e9),
            "transfer_size_efficiency": _curve(cfg["MB_efficiency"], 1e6)}


def profile_from_calculon(name: str, system: dict[str, Any], provenance: str) -> EvidenceProfile:
    networks = []
    for net in system["networks"]:
        networks.append({
            "bandwidth_bytes_per_s": _exact(net["bandwidth"] * 1e9),
            "efficiency": net["efficiency"],
            "size_processors": net["size"],
            "latency_s": net["latency"],
            "must_be_filled": net["must_be_filled"],
            "processor_usage": net["processor_usage"],
            "collectives": {op: {"volume_multiplier": scalar, "participant_offset": offset or 0}
                            for op, (scalar, offset) in net["ops"].items()},
        })
    return EvidenceProfile.model_validate({
        "name": name,
        "description": f"{name}: processor, memory and network evidence",
        "provenance": provenance,
        "processing_mode": system["processing_mode"],
        "matrix": _engine(system["matrix"]),
        "vector": _engine(system["vector"]),
        "memory_tier1": _memory(system["mem1"]),
        "memory_tier2": _memory(system["mem2"]),
        "networks": networks,
    })
