"""The CuPy backend: CUDA and ROCm memory, and every copy that involves a GPU.

What CuPy refuses or does poorly is done here: ``copy=True`` on the array's
own device, device-to-host copies through pinned memory on the consumer's
stream, pinned host (CUDA_HOST) results, peer copies between GPUs, and
imports of host and pinned memory. Every copy is ``cudaMemcpyAsync`` on a
stream, or a CuPy kernel on it; every buffer a queued copy reads or writes
stays alive until it is done.

This package decides nothing: ``_rules`` says whether to copy and where to,
``_streams`` what each stream value means and when a copy must be complete.
Its modules, top to bottom: ``exports`` and ``imports`` side by side (each
says how it uses CuPy's own exporter and importer), the ``copies`` they
make, and the ``gpus`` they ask; this face names what the layer above calls.
"""

from .copies import to_host
from .exports import export_array, export_host
from .gpus import device_count, device_of, gpu_of, owns, serves
from .imports import aligned_copy, consume, gather, import_capsule, import_to

__all__ = [
    "aligned_copy", "consume", "device_count", "device_of", "export_array", "export_host", "gather", "gpu_of",
    "import_capsule", "import_to", "owns", "serves", "to_host",
]
