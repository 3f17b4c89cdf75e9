"""Where the layer decides otherwise than PyTorch's and JAX's own DLPack
tests (``tests/peer_suites.py`` runs them through the layer): (suite, role,
case) to the reason. docs/internals/rules.md, "Differences from the peers'
own suites", says the same in prose.

A case is ``Class::method``, followed for a case of a product (JAX's
``sample_product``) by absl's ``(name=value, ...)``; ``*`` matches any text.
Every case a row matches must fail (a strict expected failure), and every row
must match a case of the file it is for.
"""

DIFFERENCES: dict[tuple[str, str, str], str] = {
    # -- PyTorch's test/test_dlpack.py ----------------------------------------
    ("torch", "consumer", "TestTorchDlPackCPU::test_dlpack_shared_storage_cpu"): (
        "a legacy capsule (torch.utils.dlpack.to_dlpack) cannot say whether its memory may be "
        "written: the layer imports it read-only, as NumPy does, and convert(capsule, 'torch') "
        "hands torch, which ignores READ_ONLY, a copy (on_readonly='share' shares it), so a write "
        "through the result does not reach the producer's tensor"
    ),
    ("torch", "producer", "TestTorchDlPackCPU::test_dlpack_invalid_cpu_stream_cpu"): (
        "stream=0 for host memory is InvalidStreamError, a ValueError listing the valid values "
        "(None, -1), where torch raises AssertionError('stream should be None on cpu.')"
    ),
    ("torch", "producer", "TestTorchDlPackCPU::test_unsupported_device_error_cpu"): (
        "dl_device=(kDLHexagon, 0) for CPU memory is DeviceUnreachableError, a BufferError as in "
        "torch, with the layer's message (the move asked for and the devices that can be asked), "
        "not torch's 'Unsupported device_type: 16'"
    ),
    # -- JAX's tests/array_interoperability_test.py ---------------------------
    ("jax", "consumer", "DLPackTest::testNumpyToJax*(*copy=False, aligned=False)"): (
        "copy=False where JAX must copy (host data not aligned to its 64 bytes) is "
        "CopyRequiredError, a BufferError as the standard has it, where JAX raises ValueError "
        "('Specified input which requires a copy since the source data buffer is not aligned to "
        "64 bytes.  However copy=False...')"
    ),
}
