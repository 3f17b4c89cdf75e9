"""The CuPy backend: CUDA and ROCm memory, and every copy that involves a GPU,
including what CuPy refuses or does poorly (``copy=True`` on the array's own
device, copies to the host through pinned memory on the consumer's stream,
pinned results, peer copies, imports of host and pinned memory). It decides
nothing: ``_rules`` and ``_streams`` do. Its modules, top to bottom:
``exports`` and ``imports`` side by side, the ``copies`` they make, the
``gpus`` they ask; this face names what the layer above calls.
"""

from .copies import to_host
from .exports import export_array, export_host
from .gpus import device_count, device_of, gpu_of, owns, serves
from .imports import aligned_copy, consume, gather, import_capsule, import_to

__all__ = [
    "aligned_copy", "consume", "device_count", "device_of", "export_array", "export_host", "gather", "gpu_of",
    "import_capsule", "import_to", "owns", "serves", "to_host",
]
