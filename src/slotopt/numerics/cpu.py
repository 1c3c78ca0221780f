"""The processor's vendor: whose ``rsqrtps`` estimate TensorFlow's fused float32 kernels take on this machine.

TensorFlow's fused float32 ``ApplyAdagrad``, ``ApplyProximalAdagrad`` and ``ApplyAdadelta`` kernels (and the
sparse Adagrad, ProximalAdagrad, Adadelta and RMSprop kernels, on rows of 8 floats or more) start ``rsqrt`` from
the processor's estimate, whose last bits are the vendor's design (Intel's and AMD's differ). slotopt takes the
same estimate from the same instruction, so its bits are those of TensorFlow run on a processor of the same
vendor (docs/exactness.md).

>>> vendor() != ""
True
"""

from __future__ import annotations

import platform
from functools import cache

__all__ = ["vendor", "INTEL", "AMD"]

INTEL = "GenuineIntel"
AMD = "AuthenticAMD"
# CPUID vendor strings that ``platform.processor()`` may carry where there is no /proc/cpuinfo (Windows names the
# vendor there; macOS does not).
_KNOWN = (INTEL, AMD, "HygonGenuine", "CentaurHauls")


@cache
def vendor() -> str:
    """The processor's CPUID vendor string (``"GenuineIntel"``, ``"AuthenticAMD"``, ...), as Linux reports it in
    ``/proc/cpuinfo``; ``"unknown"`` where it cannot be read (another system, another architecture). Read once:
    a process does not change processors' vendor."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id" and value.strip():
                    return value.strip()
                if not line.strip():  # (the first processor's block is enough: they are all the same chip's)
                    break
    except OSError:
        pass
    described = platform.processor()
    for known in _KNOWN:
        if known in described:
            return known
    return "unknown"
