"""The host CPU's identity (common/host.py)."""

import platform

from common.host import cpu_model

ZEN2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC
flags\t\t: fpu avx avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
"""

ARM = """processor\t: 0
BogoMIPS\t: 50.00
CPU implementer\t: 0x41
"""


def test_model_name_carries_family_and_model():
    """Two KVM guests both named 'AMD EPYC' (Zen 2: family 23 model 49; Zen 4: 25/17) get different
    identities, from the first processor's block."""
    assert cpu_model(ZEN2) == "AMD EPYC (family 23, model 49)"
    assert cpu_model(ZEN2.split("\n\n")[1]) == "AMD EPYC (family 25, model 17)"


def test_without_family_or_cpuinfo_falls_back_to_the_platform():
    """A cpuinfo without model name or family (ARM), or none at all, gives the platform's processor or machine type."""
    want = platform.processor() or platform.machine()
    assert cpu_model(ARM) == want and cpu_model("") == want


def test_this_host_has_an_identity():
    """On this host the identity is a non-empty string (what every benchmark JSON records)."""
    assert cpu_model().strip()
