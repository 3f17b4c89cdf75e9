"""Stream order on a GPU where a buffer's lifetime or a producer's stream is
easy to get wrong: a queued copy keeps its source from CuPy's memory pool
until it has run, and an import through a producer's DLPack C exchange API
waits for the producer's ``current_work_stream``.

Marked ``gpu``: on a GPU the values are checked; on the simulated CUDA
(scripts/gpu-sim.sh), whose streams run only when the host waits for them,
its checker fails the test on a read never ordered after the write it needs
or on device memory handed back to CuPy's pool while queued work of another
stream still uses it.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpu_dlpack

from .helpers import gpu_arange, simulated_cuda

pytestmark = pytest.mark.gpu


def test_the_source_of_a_queued_copy_to_another_gpu_stays_out_of_the_pool_until_it_ran(cp):
    # A copy to the second GPU queued on its consumer's stream; the source's
    # only owner lets it go at once. Its memory must not return to CuPy's
    # pool (where the next allocation on its stream takes it) before the
    # copy has read it.
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    n = 1 << 16
    with cp.cuda.Device(1):
        consumer = cp.cuda.Stream(non_blocking=True)
    x = gpu_arange(cp, n, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    out = gpu_dlpack.from_dlpack(gpu_dlpack.export(x, max_version=(1, 0), dl_device=(2, 1), stream=consumer.ptr))
    del x
    gc.collect()
    if not simulated_cuda():  # the simulator reports the block going back to the pool itself
        reuse = cp.full(n, -1.0, cp.float32)  # takes the block the source had, if it went back
    consumer.synchronize()
    with cp.cuda.Device(1):
        assert np.array_equal(out.get(), np.arange(n, dtype=np.float32))


class ExchangeProducer(gpu_dlpack.Exportable):
    """A producer whose type the layer reads through its DLPack C exchange
    API, as it reads torch's: ``wrap``'s API, told to the core as a peer's."""


@pytest.fixture
def exchange_producer(monkeypatch):
    from gpu_dlpack import _compiled, _peers

    ExchangeProducer.__dlpack_c_exchange_api__ = gpu_dlpack.Exportable.__dlpack_c_exchange_api__
    peer = _peers.Peer("exchange-test-producer", __name__, array=ExchangeProducer.__qualname__,
                       exchange=())
    monkeypatch.setattr(_peers, "PEERS", _peers.PEERS + (peer,))
    from gpu_dlpack._backends.cupy import imports

    exchanged = []
    real = imports._exchange

    def spy(*args):
        got = real(*args)
        exchanged.append(got is not None)
        return got

    monkeypatch.setattr(imports, "_exchange", spy)
    _compiled.core.forget()
    ExchangeProducer.exchanged = exchanged
    yield ExchangeProducer
    monkeypatch.undo()
    _compiled.core.forget()


def test_an_import_through_a_producers_exchange_api_waits_for_its_current_work_stream(cp, exchange_producer):
    # The producer's current_work_stream (wrap's: the enclosing use_stream
    # block's stream) has work pending on the array; an import through the
    # API onto another stream must make that stream wait for it.
    n = 1 << 12
    producer, consumer = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.empty(n, cp.float32)
    cp.cuda.Device().synchronize()
    x.set(np.arange(n, dtype=np.float32), stream=producer)  # pending on the producer's stream
    w = exchange_producer(x)
    with gpu_dlpack.use_stream(producer):
        g = gpu_dlpack.from_dlpack(w, stream=consumer.ptr)
    assert g.data.ptr == x.data.ptr and exchange_producer.exchanged == [True]  # in place, through the API
    y = cp.empty_like(g)
    y.data.copy_from_device_async(g.data, g.nbytes, consumer)
    consumer.synchronize()
    assert np.array_equal(y.get(stream=consumer), np.arange(n, dtype=np.float32))


def test_the_runtime_calls_are_the_ones_this_pass_means(cp):
    # scripts/gpu-sim.sh runs these tests twice: on the core's own CUDA
    # calls, and (GPU_DLPACK_SIMCUDA_UNBOUND=1) on CuPy's Python calls.
    from gpu_dlpack import _handoff

    from conftest import UNBOUND

    assert _handoff.core_bound(_handoff._runtime()) is not UNBOUND
    assert _handoff.binding().startswith("none:" if UNBOUND else "CuPy's own runtime")
