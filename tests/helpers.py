"""Small helpers shared by the tests."""

import numpy as np


def pointer(x):
    """Address of the first element of a NumPy, PyTorch or JAX array."""
    if isinstance(x, np.ndarray):
        return x.ctypes.data
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    return x.unsafe_buffer_pointer()
