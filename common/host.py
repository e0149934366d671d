"""The host CPU's identity: the key of measurement caches and the label of every benchmark figure.

Torch-free (the gateway, the scheduler and the benchmark drivers use it too).
"""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name with its family and model numbers, e.g. ``"AMD EPYC (family 23, model 49)"``;
    the bare model name where /proc/cpuinfo lists no family (e.g. ARM), ``platform.processor()``
    (or the machine type) where it is unreadable. ``cpuinfo``: the file's text (tests).

    On KVM guests the model name alone is ``AMD EPYC`` for Zen 2, Zen 4 and Zen 5 (2026-12-03..05),
    CPUs whose kernels differ (AVX2 only / AVX-512 in halves / full AVX-512) and whose speeds
    differ up to 2.5x, so a kernel plan cached on one must not be read on another, and a figure
    must say which it came from."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():  # the first processor's block
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name
