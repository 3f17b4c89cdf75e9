"""Property tests: random arrays through every peer, both ways."""

import ml_dtypes
import numpy as np
import pytest

import gpu_dlpack

SUB_BYTE = ["int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"]


@pytest.mark.parametrize("name", SUB_BYTE)
@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0)])
def test_a_sub_byte_dtype_needs_a_consumer_of_dlpack_1_1(name, max_version):
    # IS_SUBBYTE_TYPE_PADDED appeared in DLPack 1.1: a 1.0 consumer would
    # read the padded bytes as packed data.
    x = np.zeros(4, getattr(ml_dtypes, name))
    with pytest.raises(BufferError, match=r"needs DLPack 1\.1"):
        gpu_dlpack.export(x, max_version=max_version)
    with pytest.raises(BufferError, match=r"needs DLPack 1\.1"):
        gpu_dlpack.wrap(x).__dlpack__(max_version=max_version)
    info = gpu_dlpack.inspect(gpu_dlpack.export(x, max_version=(1, 1)))
    assert info.flags & gpu_dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED


@pytest.mark.parametrize("max_version", [None, (0, 8)])
def test_read_only_data_of_another_producer_exports_legacy_when_copied(xp_strict, max_version):
    # The rules allow a legacy capsule of read-only data when it is a copy;
    # a NumPy-based producer refuses a legacy capsule of read-only data, so
    # the layer must not ask it for one when it copies anyway.
    x = np.arange(6.0)
    x.flags.writeable = False
    s = xp_strict.asarray(x)
    with pytest.raises(BufferError):
        gpu_dlpack.export(s, max_version=max_version)
    cap = gpu_dlpack.export(s, max_version=max_version, copy=True)
    info = gpu_dlpack.inspect(cap)
    assert not info.versioned and info.data != x.ctypes.data
    arr = gpu_dlpack.from_dlpack(cap)
    assert arr.tolist() == x.tolist()
