"""Where the layer decides otherwise than the peers' own DLPack tests
(PyTorch's, JAX's, TensorFlow's and PaddlePaddle's: ``tests/peer_suites.py``
runs them through the layer): a ``Row`` (suite, role, case, run) to the
reason. docs/internals/rules.md, "Differences from the peers' own suites",
says the same in prose.

A case is ``Class::method``, followed for a case of a product (JAX's
``sample_product``) by absl's ``(name=value, ...)``; ``*`` matches any text.
A row's run is ``""`` for every run of its suite, or one of the suite's runs
(``peer_suites.Suite.runs``: JAX's ``x64`` and ``x32``, with and without its
64-bit types) where the decision shows in that one only.
Every case a row matches must fail (a strict expected failure) in the runs
the row is for, and every row must match a case of the file it is for in
each of those runs. A row for the role ``itself`` is no decision of the
layer's: it names a case of a file older than the installed release that the
release no longer passes, and what the release changed.
"""

from typing import NamedTuple


class Row(NamedTuple):
    """Where a decision shows: a suite's cases in a role, in a run or all."""

    suite: str
    role: str
    case: str
    run: str = ""  # "" is every run of the suite


# TensorFlow's file at hand predates the release: TensorFlow 2.21 exports complex64.
_TF_OLDER_FILE = (
    "the file at hand (tensorflow/tensorflow 3175de1, the newest the project could read) expects "
    "to_dlpack of a complex64 tensor to raise 'is not supported by dlpack'; TensorFlow 2.21 exports "
    "complex64, so the case fails with TensorFlow's own to_dlpack, as it is and as the consumer "
    "role runs it (which keeps TensorFlow's to_dlpack)"
)
# A legacy capsule, the only kind PaddlePaddle's to_dlpack gives: imported read-only, so copied.
_LEGACY_COPIED = (
    "a legacy capsule (paddle.to_dlpack and paddle.utils.dlpack.to_dlpack give only 'dltensor') "
    "cannot say whether its memory may be written: the layer imports it read-only, as NumPy does, "
    "and convert(capsule, 'paddle') hands Paddle, which ignores READ_ONLY, a C-order copy "
    "(on_readonly='share' shares the memory), so the result has its own data pointer and strides "
    "and a write through it does not reach the producer's tensor"
)
# TensorFlow's tensors are immutable: no legacy capsule of them.
_TF_IMMUTABLE = (
    "TensorFlow's tensors are immutable and a legacy capsule cannot say that its memory must not "
    "be written: export(x) of a TensorFlow tensor (legacy, as TensorFlow's to_dlpack gives and "
    "its from_dlpack takes) is ReadOnlyError, a BufferError with its remedies (a versioned "
    "capsule, or copy=True), where TensorFlow hands out a capsule any consumer may write through; "
    "convert(x, 'tensorflow') copies"
)

# A JAX array handed on through the layer: never writeable, and a legacy capsule cannot say so.
_JAX_IMMUTABLE = (
    "JAX's arrays are immutable and a legacy capsule cannot say that its memory must not be "
    "written: in {}, the consumer asks for a legacy capsule (no max_version), and the layer's "
    "export of a JAX array as one is ReadOnlyError, a BufferError with its remedies (a versioned "
    "capsule, or copy=True), where JAX hands out a capsule any consumer may write through"
)
# Without jax_enable_x64 (JAX's default), JAX would narrow 64-bit data.
_X32_NARROWED = (
    "without jax_enable_x64 JAX imports 64-bit data narrowed (int64 as int32, uint64 as uint32, "
    "float64 as float32, complex128 as complex64), changing values that do not fit: convert(x, "
    "'jax') of such data is DtypeChangeError, a BufferError naming the setting that keeps the "
    "dtype and how to ask for the narrower one, where JAX's from_dlpack narrows silently"
)

DIFFERENCES: dict[Row, str] = {
    # -- PyTorch's test/test_dlpack.py ----------------------------------------
    Row("torch", "consumer", "TestTorchDlPackCPU::test_dlpack_shared_storage_cpu"): (
        "a legacy capsule (torch.utils.dlpack.to_dlpack) cannot say whether its memory may be "
        "written: the layer imports it read-only, as NumPy does, and convert(capsule, 'torch') "
        "hands torch, which ignores READ_ONLY, a copy (on_readonly='share' shares it), so a write "
        "through the result does not reach the producer's tensor"
    ),
    Row("torch", "producer", "TestTorchDlPackCPU::test_dlpack_invalid_cpu_stream_cpu"): (
        "stream=0 for host memory is InvalidStreamError, a ValueError listing the valid values "
        "(None, -1), where torch raises AssertionError('stream should be None on cpu.')"
    ),
    Row("torch", "producer", "TestTorchDlPackCPU::test_unsupported_device_error_cpu"): (
        "dl_device=(kDLHexagon, 0) for CPU memory is DeviceUnreachableError, a BufferError as in "
        "torch, with the layer's message (the move asked for and the devices that can be asked), "
        "not torch's 'Unsupported device_type: 16'"
    ),
    Row("torch", "producer", "TestTorchDlPackCPU::test_dlpack_export_is_conj_cpu"): (
        "a tensor with its conjugate bit set (torch.conj(x) of a complex tensor) is exported with "
        "its values: the layer resolves the bit into a copy (flagged IS_COPIED; copy=False is "
        "CopyRequiredError), where torch raises BufferError ('conjugate bit') and leaves the caller "
        "to call resolve_conj() itself"
    ),
    # -- JAX's tests/array_interoperability_test.py ---------------------------
    Row("jax", "consumer", "DLPackTest::testNumpyToJax*(*copy=False, aligned=False)"): (
        "copy=False where JAX must copy (host data not aligned to its 64 bytes) is "
        "CopyRequiredError, a BufferError as the standard has it, where JAX raises ValueError "
        "('Specified input which requires a copy since the source data buffer is not aligned to "
        "64 bytes.  However copy=False...')"
    ),
    # Every run: JAX's arrays are immutable, TensorFlow's tensors too, and
    # JAX 0.10.2's from_dlpack and TensorFlow's ask for legacy capsules.
    Row("jax", "producer", "DLPackTest::testJaxArrayRoundTrip*(*gpu=False)"): _JAX_IMMUTABLE.format(
        "jax.dlpack.from_dlpack(wrap(x)) of a JAX array x"),
    Row("jax", "producer", "DLPackTest::testJaxToTensorFlow*"): _JAX_IMMUTABLE.format(
        "tf.experimental.dlpack.from_dlpack(wrap(x).__dlpack__()) of a JAX array x"),
    Row("jax", "producer", "DLPackTest::testTensorFlowToJax*"): (
        _TF_IMMUTABLE + "; jax.dlpack.from_dlpack(wrap(x)) of a TensorFlow tensor x asks for that "
        "legacy capsule (JAX 0.10.2's from_dlpack calls __dlpack__ without max_version)"
    ),
    # Without JAX's 64-bit types only: the 64-bit data the file hands JAX.
    **{Row("jax", "consumer", f"DLPackTest::testNumpyToJax*(*dtype=<class 'numpy.{dtype}'>, *", "x32"):
       _X32_NARROWED for dtype in ("int64", "uint64", "float64", "complex128")},
    Row("jax", "consumer", "DLPackTest::testNumpyToJaxNondefaultLayout", "x32"): _X32_NARROWED,
    Row("jax", "consumer", "DLPackTest::testTensorFlowToJax*(*dtype=<class 'numpy.complex128'>)", "x32"): (
        _X32_NARROWED + " (the file skips int64, uint64 and float64 without x64, not complex128)"),
    Row("jax", "consumer", "DLPackTest::testTensorFlowToJaxInt64", "x32"): (
        _X32_NARROWED + " (the file expects TensorFlow's int64 imported as int32)"),
    Row("jax", "consumer", "DLPackTest::testTensorFlowToJaxNondefaultLayout", "x32"): _X32_NARROWED,
    # -- TensorFlow's tensorflow/python/dlpack/dlpack_test.py ------------------
    Row("tensorflow", "itself", "DLPackTest::testUnsupportedTypeToDLPack"): _TF_OLDER_FILE,
    Row("tensorflow", "consumer", "DLPackTest::testUnsupportedTypeToDLPack"): _TF_OLDER_FILE,
    Row("tensorflow", "consumer", "DLPackTest::testTensorsCanBeConsumedOnceOnly"): (
        "a capsule imported twice is ConsumedCapsuleError, a ValueError and a BufferError, with the "
        "layer's message ('this DLPack capsule was already consumed ...'), not TensorFlow's 'a DLPack "
        "tensor may be consumed at most once'"
    ),
    Row("tensorflow", "producer", "DLPackTest::testRoundTrip*"): _TF_IMMUTABLE,
    Row("tensorflow", "producer", "DLPackTest::testTensorsCanBeConsumedOnceOnly"): _TF_IMMUTABLE,
    Row("tensorflow", "producer", "DLPackTest::testDLPackFromWithoutContextInitialization"): _TF_IMMUTABLE,
    Row("tensorflow", "producer", "DLPackTest::testUnsupportedTypeToDLPack"): (
        _TF_IMMUTABLE + "; the refusal comes before the dtype is read, so a qint16 tensor is that "
        "ReadOnlyError too, not 'is not supported by dlpack' (and complex64, which the file at hand "
        "expects refused, TensorFlow 2.21 exports)"
    ),
    Row("tensorflow", "producer", "DLPackTest::testMustPassTensorArgumentToDLPack"): (
        "export of a list is NotDLPackError, a TypeError naming what can be exported, where "
        "TensorFlow's to_dlpack raises InvalidArgumentError ('The argument to `to_dlpack` must be a TF "
        "tensor, not Python object')"
    ),
    # -- PaddlePaddle's test/legacy_test/test_dlpack.py -------------------------
    Row("paddle", "consumer", "TestDLPack::test_to_dlpack_data_ptr_consistency"): _LEGACY_COPIED,
    Row("paddle", "consumer", "TestDLPack::test_to_dlpack_from_zero_dim"): _LEGACY_COPIED,
    Row("paddle", "consumer", "TestDLPack::test_to_dlpack_from_zero_size"): _LEGACY_COPIED,
    Row("paddle", "consumer", "TestDLPack::test_to_dlpack_modification"): _LEGACY_COPIED,
    Row("paddle", "consumer", "TestDLPack::test_to_dlpack_strides_consistency"): _LEGACY_COPIED,
    Row("paddle", "producer", "TestDLPack::test_dlpack_static"): (
        "a static-mode DenseTensor (base.create_lod_tensor) speaks no DLPack (no __dlpack__: "
        "Paddle's to_dlpack reads it through its private _to_dlpack) and no array interface; the "
        "layer's export tries the buffer protocol it claims, whose export fails in Paddle "
        "('pybind11_getbuffer(): Internal error'): the layer's BufferError names that and the "
        "remedy (Paddle's own to_dlpack), where Paddle's to_dlpack exports it"
    ),
    Row("paddle", "producer", "TestDLPackDevice::test_dlpack_device*"): (
        "Paddle's __dlpack_device__ answers (kDLCPU, None) for a CPU tensor, which names no DLPack "
        "device (device-id-none in its row of the peers' table): the layer's wrap(x).__dlpack_device__() "
        "answers the device it reads, (kDLCPU, 0), as the standard has it, where the file expects "
        "Paddle's None"
    ),
}
