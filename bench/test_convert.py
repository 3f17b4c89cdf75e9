"""``convert(x, "torch")``, the one call, beside the two calls it
stands for: ``torch.from_dlpack(wrap(x))`` (what it runs for a
plain NumPy array, after the checks that none of torch's faults meets it)
and ``torch.from_dlpack(x)`` (torch alone). Same run, same group, so the
ratios are read from one report."""

import pytest

from gpu_dlpack import convert, wrap

GROUP = "convert a numpy array to torch"
DIRECT = "torch.from_dlpack(x)"
WRAPPED = "torch.from_dlpack(wrap(x))"
CONVERT = 'convert(x, "torch")'


@pytest.mark.benchmark(group=GROUP)
def test_torch_direct(measure, torch, x):
    out = measure(lambda: torch.from_dlpack(x), DIRECT)
    assert out.data_ptr() == x.ctypes.data


@pytest.mark.benchmark(group=GROUP)
def test_torch_wrapped(measure, torch, x):
    out = measure(lambda: torch.from_dlpack(wrap(x)), WRAPPED)
    assert out.data_ptr() == x.ctypes.data


@pytest.mark.benchmark(group=GROUP)
def test_convert_against_the_wrapped_call(measure, torch, x):
    convert(x, "torch")  # the consumer is read once, on first use
    out = measure(lambda: convert(x, "torch"), CONVERT, role="gpu_dlpack", peer=WRAPPED, target=1.3)
    assert out.data_ptr() == x.ctypes.data


@pytest.mark.benchmark(group=GROUP)
def test_convert_against_torch_alone(measure, torch, x):
    convert(x, "torch")
    out = measure(
        lambda: convert(x, "torch"), CONVERT + " (against torch alone)", role="gpu_dlpack", peer=DIRECT,
    )
    assert out.data_ptr() == x.ctypes.data


@pytest.mark.benchmark(group="convert a read-only numpy array to torch (a copy)")
def test_torch_copy_peer(measure, torch, x):
    r = x.copy()
    r.flags.writeable = False
    out = measure(lambda: torch.from_numpy(r.copy()), "torch.from_numpy(r.copy())")
    assert out.tolist() == r.tolist()


@pytest.mark.benchmark(group="convert a read-only numpy array to torch (a copy)")
def test_torch_import_and_clone_peer(measure, torch, x):
    r = x.copy()
    r.flags.writeable = False
    out = measure(lambda: torch.from_dlpack(r).clone(), "torch.from_dlpack(r).clone()")
    assert out.tolist() == r.tolist()


@pytest.mark.benchmark(group="convert a read-only numpy array to torch (a copy)")
def test_convert_read_only(measure, torch, x):
    r = x.copy()
    r.flags.writeable = False
    out = measure(
        lambda: convert(r, "torch"), 'convert(r, "torch")', role="gpu_dlpack",
        peer="torch.from_dlpack(r).clone()", target=1.5,
    )
    assert out.data_ptr() != r.ctypes.data and out.tolist() == r.tolist()


@pytest.mark.benchmark(group="convert a jax array to torch (a copy: JAX's arrays are immutable)")
def test_torch_import_and_clone_of_jax_peer(measure, torch, j):
    out = measure(lambda: torch.from_dlpack(j).clone(), "torch.from_dlpack(j).clone()")
    assert out.tolist() == j.tolist()


@pytest.mark.benchmark(group="convert a jax array to torch (a copy: JAX's arrays are immutable)")
def test_convert_jax_to_torch(measure, torch, j):
    convert(j, "torch")
    out = measure(
        lambda: convert(j, "torch"), 'convert(j, "torch")', role="gpu_dlpack",
        peer="torch.from_dlpack(j).clone()", target=1.5,
    )
    assert out.data_ptr() != j.unsafe_buffer_pointer() and out.tolist() == j.tolist()
