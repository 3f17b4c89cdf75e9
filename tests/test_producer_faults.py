"""What producers get wrong, corrected in every direction an array takes
through the layer: ``from_dlpack``, ``convert``, ``wrap`` to any consumer and
``export`` (the ``export_faults`` of the rows in ``gpu_dlpack/_peers.py``).

- torch exports a tensor with the negative bit set without its sign, and
  refuses one with the conjugate bit: the layer resolves the view (a copy,
  flagged IS_COPIED) or, for ``copy=False``, refuses it. So it does for a
  view inside a subclass with a ``__torch_function__`` of its own (torch's
  ReadOnlyTensorWrapper), whose code it never runs to read or resolve it.
- JAX's arrays are immutable but its capsules are legacy ones, which cannot
  say so: a legacy export of one is refused unless copied (rule 5), as for
  every read-only array.

With real torch and JAX.
"""

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _peers

from .helpers import base_tensor, counting_subclass, dlpack_only_subclass


def negatives(torch):
    """(label, tensor with an unresolved view, the values it holds)."""
    real = torch.tensor([1.0, -2.0, 3.0])
    cplx = torch.tensor([1 + 2j, 3 - 4j])
    return [
        ("neg view", torch._neg_view(real), [-1.0, 2.0, -3.0]),
        ("conj().imag", cplx.conj().imag, [-2.0, 4.0]),
        ("conj()", cplx.conj(), [1 - 2j, 3 + 4j]),
        ("neg of conj()", torch._neg_view(cplx.conj()), [-1 + 2j, -3 - 4j]),
    ]


#: What holds the view: the tensor itself, or a subclass with a
#: __torch_function__ of its own, either running torch's operations or
#: refusing all but DLPack's (torch 2.14's ReadOnlyTensorWrapper).
HOLDERS = ("tensor", "own __torch_function__", "DLPack alone")
_VIEWS = ("neg view", "conj().imag", "conj()", "neg of conj()")


def held(torch, t, holder):
    """``t`` inside the subclass ``holder`` names (``HOLDERS``)."""
    if holder == "tensor":
        return t
    if holder == "own __torch_function__":
        return counting_subclass(torch)(t)
    return dlpack_only_subclass(torch)[0](t)


@pytest.fixture(params=[(v, h) for h in range(3) for v in range(4)],
                ids=[f"{v} in {h}" if h != "tensor" else v for h in HOLDERS for v in _VIEWS])
def unresolved(request, torch):
    index, holder = request.param
    label, t, values = negatives(torch)[index]
    assert t.is_neg() or t.is_conj(), label
    return held(torch, t, HOLDERS[holder]), values


def test_the_negative_bit_is_the_fault_the_row_says(torch):
    # What the row corrects: torch's own export hands the memory without
    # the sign, and NumPy's import shows it.
    t = torch._neg_view(torch.tensor([1.0, 2.0]))
    assert np.from_dlpack(t).tolist() == [1.0, 2.0]
    assert t.tolist() == [-1.0, -2.0]
    found = _peers.export_faults_of(_peers.by_name("torch"), torch.__version__)
    assert {"negative-bit-unresolved", "conjugate-bit-refused"} <= found


def test_from_dlpack_of_an_unresolved_view_holds_its_values(unresolved):
    t, values = unresolved
    a = gpu_dlpack.from_dlpack(t)
    assert a.tolist() == values
    assert a.flags.writeable  # a copy of its own


def test_wrap_of_an_unresolved_view_gives_every_consumer_its_values(unresolved, torch):
    t, values = unresolved
    assert torch.from_dlpack(gpu_dlpack.wrap(t)).tolist() == values
    assert np.from_dlpack(gpu_dlpack.wrap(t)).tolist() == values
    w = gpu_dlpack.wrap(t)
    legacy = torch.utils.dlpack.from_dlpack(w.__dlpack__())  # a legacy consumer
    assert legacy.tolist() == values


def test_wrap_of_an_unresolved_view_to_jax(unresolved, jax):
    t, values = unresolved
    assert jax.dlpack.from_dlpack(gpu_dlpack.wrap(t)).tolist() == values


def test_export_of_an_unresolved_view_is_a_copy_flagged_is_copied(unresolved, torch):
    t, values = unresolved
    cap = gpu_dlpack.export(t, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.is_copied and not info.readonly
    assert info.data + info.byte_offset != base_tensor(torch, t).data_ptr()
    assert gpu_dlpack.from_dlpack(cap).tolist() == values


@pytest.mark.parametrize("to", ["numpy", "torch", "jax", "array_api_strict"])
def test_convert_of_an_unresolved_view_holds_its_values(unresolved, to, jax, xp_strict):
    t, values = unresolved
    got = gpu_dlpack.convert(t, to)
    assert np.asarray(gpu_dlpack.from_dlpack(got, copy=True)).tolist() == values


def test_copy_false_of_an_unresolved_view_is_refused_with_the_remedy(unresolved):
    t, _ = unresolved
    for call in (
        lambda: gpu_dlpack.from_dlpack(t, copy=False),
        lambda: gpu_dlpack.export(t, max_version=(1, 0), copy=False),
        lambda: gpu_dlpack.wrap(t).__dlpack__(max_version=(1, 0), copy=False),
        lambda: gpu_dlpack.convert(t, "numpy", copy=False),
    ):
        with pytest.raises(gpu_dlpack.CopyRequiredError, match=r"resolve_(neg|conj)\(\)"):
            call()


def test_from_dlpack_of_a_view_in_a_subclass_is_a_copy_of_its_own(torch):
    # The resolved values are a new tensor's: written, they leave the source
    # as it was, whether or not its subclass exports it read-only.
    for holder in HOLDERS[1:]:
        source = torch._neg_view(torch.tensor([1.0, 2.0]))
        a = gpu_dlpack.from_dlpack(held(torch, source, holder))
        assert a.tolist() == [-1.0, -2.0] and a.flags.writeable
        a[0] = 5.0
        assert source.tolist() == [-1.0, -2.0]


def test_the_views_of_a_subclass_are_read_without_running_its_code(torch):
    # Its __torch_function__ is entered for DLPack's methods at most: the
    # bits are read, and the view resolved, by torch's own methods with
    # subclasses' hooks off.
    counting = counting_subclass(torch)
    for _, t, values in negatives(torch):
        x = counting(t)
        for call in (lambda: gpu_dlpack.from_dlpack(x), lambda: gpu_dlpack.convert(x, "numpy"),
                     lambda: gpu_dlpack.convert(x, "torch"), lambda: np.from_dlpack(gpu_dlpack.wrap(x)),
                     lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(x, max_version=(1, 0)))):
            counting.calls.clear()
            assert call().tolist() == values
            assert set(counting.calls) <= {"__dlpack__", "__dlpack_device__"}, counting.calls


def test_a_subclass_keeps_the_views_of_its_row_and_not_its_cheap_reads(torch):
    # The row's views hold for its subclasses' memory; the attributes the
    # row reads cheaply (is_cpu) are not read of a subclass with a hook of
    # its own, which is read through DLPack otherwise.
    for wrapper in (counting_subclass(torch), dlpack_only_subclass(torch)[0]):
        assert _peers.of_array_type(wrapper) is None
        assert _peers.export_facts(wrapper).views == _peers.export_facts(torch.Tensor).views != ()
        assert _peers.profile(wrapper).host_test is None
    assert _peers.of_array_type(torch.nn.Parameter).name == "torch"  # its hook is torch's, disabled


def test_a_resolved_tensor_is_still_zero_copy(torch):
    t = torch._neg_view(torch.tensor([1.0, 2.0])).resolve_neg()
    assert gpu_dlpack.from_dlpack(t).ctypes.data == t.data_ptr()
    info = gpu_dlpack.inspect(gpu_dlpack.export(t, max_version=(1, 0)))
    assert info.data == t.data_ptr() and not info.is_copied


# -- immutable producers: JAX ---------------------------------------------------


def test_a_jax_array_never_reaches_a_legacy_consumer_writeable(jax, torch):
    j = jax.numpy.arange(3.0)
    for call in (
        lambda: gpu_dlpack.export(j),
        lambda: gpu_dlpack.export(j, max_version=(0, 8)),
        lambda: gpu_dlpack.wrap(j).__dlpack__(),
        lambda: torch.utils.dlpack.from_dlpack(gpu_dlpack.export(j)),
    ):
        with pytest.raises(gpu_dlpack.ReadOnlyError, match="legacy"):
            call()
    assert j.tolist() == [0.0, 1.0, 2.0]


def test_a_jax_array_reaches_a_legacy_consumer_as_a_copy_when_asked(jax, torch):
    j = jax.numpy.arange(3.0)
    t = torch.utils.dlpack.from_dlpack(gpu_dlpack.export(j, copy=True))
    t[0] = 7
    assert j.tolist() == [0.0, 1.0, 2.0] and t.tolist() == [7.0, 1.0, 2.0]


def test_a_jax_array_reaches_a_versioned_consumer_zero_copy_and_read_only(jax):
    j = jax.numpy.arange(3.0)
    info = gpu_dlpack.inspect(gpu_dlpack.export(j, max_version=(1, 0)))
    assert info.readonly and info.data + info.byte_offset == j.unsafe_buffer_pointer()
    a = gpu_dlpack.from_dlpack(j)
    assert not a.flags.writeable and a.ctypes.data == j.unsafe_buffer_pointer()


def test_the_remedy_explain_gives_an_old_consumer_of_jax_is_safe(jax):
    # The seed error's remedy: an old consumer (max_version=(0, 4)) of a JAX
    # array, served by gpu_dlpack with a floor of its own.
    j = jax.numpy.arange(3.0)
    w = gpu_dlpack.wrap(j, min_version=(0, 4))
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        w.__dlpack__(max_version=(0, 4))
    found = gpu_dlpack.explain(
        "BufferError: JAX does not support any version below (0, 5) but version ((0, 4)) was requested."
    )
    remedy = next(r for r in found.remedies if "min_version=(0, 4)" in r)
    assert "copy=True" in remedy
    copied = gpu_dlpack.wrap(gpu_dlpack.from_dlpack(j, copy=True), min_version=(0, 4))
    cap = copied.__dlpack__(max_version=(0, 4))
    assert gpu_dlpack.inspect(cap).data != j.unsafe_buffer_pointer()
