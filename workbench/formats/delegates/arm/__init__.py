"""Arm backends: Ethos-U NPU blobs (Vela binary stream) and VGF (ML SDK for Vulkan) files.

Example:
    >>> from workbench.formats.delegates.arm import ethosu, vgf
    >>> ethosu.IDS[0], vgf.IDS[0]
    ('EthosUBackend', 'VgfBackend')
"""

from . import ethosu, vgf

__all__ = ["ethosu", "vgf"]
