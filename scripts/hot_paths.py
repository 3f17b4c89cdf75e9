"""The hot paths of the compiled core, a few hundred times each, for
valgrind (scripts/sanitize.sh): NumPy, torch and JAX exports and imports,
wrap() and the C exchange API on both sides, the adaptation between capsule
kinds, inspect, and refusals of hand-made malformed capsules. Exits non-zero
if a result is wrong."""

import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import gpu_dlpack  # noqa: E402
import gpu_dlpack._core  # noqa: E402, F401  (what valgrind watches: not built, no run)
from tests import capsules  # noqa: E402

N = int(os.environ.get("GPU_DLPACK_HOT_PATH_CYCLES", "300"))
try:
    import torch
except ImportError:
    torch = None
try:
    import jax.numpy as jnp
except ImportError:
    jnp = None

a = np.arange(12.0).reshape(3, 4)
t = None if torch is None else torch.arange(12.0).reshape(3, 4)
bad = [dict(version=(2, 0)), dict(dtype=(2, 64, 2)), dict(device=(99, 0)), dict(data=0), dict(ndim=65),
       dict(ndim=0, data=0), dict(shape=(2**62, 4, 0), strides=(4, 1, 1))]
for i in range(N):
    for mv in (None, (1, 0)):
        b = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=mv))
        assert b[2, 3] == 11.0
    w = gpu_dlpack.wrap(a)
    assert np.from_dlpack(w)[1, 1] == 5.0 and w.__dlpack_device__() == (1, 0)
    assert gpu_dlpack.inspect(w.__dlpack__(max_version=(1, 0))).shape == (3, 4)
    if t is not None:
        assert gpu_dlpack.from_dlpack(t)[2, 0] == 8.0  # torch's C exchange API, into NumPy
        assert torch.from_dlpack(gpu_dlpack.wrap(t))[0, 1].item() == 1.0  # wrap's C exchange API
        assert torch.from_dlpack(gpu_dlpack.wrap(a))[1, 0].item() == 4.0
    if jnp is not None:
        j = jnp.arange(12.0).reshape(3, 4)
        assert gpu_dlpack.from_dlpack(j)[2, 1] == 9.0  # JAX's legacy capsule into NumPy, in C
        assert gpu_dlpack.inspect(gpu_dlpack.export(j, max_version=(1, 0))).readonly  # adapted in C
        assert np.from_dlpack(gpu_dlpack.wrap(j))[0, 2] == 2.0
    for versioned, device in ((False, (1, 0)), (True, (1, 0)), (False, (2, 0)), (True, (2, 0))):
        cap, rec = capsules.make(a, versioned=versioned, device=device, data=None if device == (1, 0) else 0x1000)
        out = gpu_dlpack.export(capsules.Producer(cap, device=device), max_version=None if versioned else (1, 0))
        if device == (1, 0):
            assert gpu_dlpack.from_dlpack(out)[1, 2] == 6.0
        del out
    cap, rec = capsules.make(a)
    assert gpu_dlpack.from_dlpack(cap)[0, 3] == 3.0
    cap, rec = capsules.make(a, **bad[i % len(bad)])
    try:
        gpu_dlpack.from_dlpack(cap)
    except BufferError:
        pass
    else:
        raise AssertionError(f"a malformed capsule was imported: {bad[i % len(bad)]}")
    del cap
gc.collect()
assert capsules.stray_calls == 0 and len(capsules.live) == 0, (capsules.stray_calls, len(capsules.live))
print(f"hot paths: {N} cycles, deleters {capsules.total_calls}, none twice")
