"""Stream and lifetime bugs put into gpu_dlpack one at a time, each of which
the gpu tests on the simulated CUDA must catch (scripts/inject-bugs.sh runs
them: tests/simcuda/inject.py).

Each bug replaces one exact piece of a source file (the table stops applying,
loudly, when the code it names changes), and names the tests that should
catch it and what should: the
simulator's ``checker`` (a report), or a ``test``'s own assertion (values,
an error). A bug no gpu test on the simulator can reach says why instead.
"""

from __future__ import annotations

from typing import NamedTuple


class Bug(NamedTuple):
    name: str
    what: str
    file: str
    old: str
    new: str
    tests: tuple
    catcher: str = "checker"
    unreachable: str = ""
    python_calls: bool = False  # in CuPy's Python calls: its tests run with GPU_DLPACK_SIMCUDA_UNBOUND=1


GPU = "tests/test_gpu.py::"
ORDER = "tests/test_gpu_stream_order.py::"
# CuPy's Python calls make the hand-off and the copies only where the core
# is not bound to CuPy's runtime module (an entry whose C signature
# differs): their bugs' tests run so (GPU_DLPACK_SIMCUDA_UNBOUND=1, as
# scripts/gpu-sim.sh's second pass).

BUGS = (
    Bug("no-handoff-before-a-device-copy",
        "a copy of a CuPy array queued on the consumer's stream without waiting for the producer's",
        "gpu_dlpack/_backends/cupy/copies.py",
        "    _handoff.handoff(producer, copy_stream, src_gpu, copy_gpu)\n",
        "",
        (GPU + "test_a_use_stream_block_runs_imports_on_its_stream",)),
    Bug("no-handoff-on-a-zero-copy-export",
        "a CuPy array exported in place without making the consumer's stream wait",
        "gpu_dlpack/_backends/cupy/exports.py",
        "        _handoff.handoff(producer, consumer, gpu, _stream_gpu(plan.target, gpu))\n",
        "        pass\n",
        (GPU + "test_an_export_makes_the_consumer_stream_wait_without_blocking_the_host",)),
    Bug("no-handoff-on-a-zero-copy-import",
        "a CuPy array imported in place without making the consumer's stream wait",
        "gpu_dlpack/_backends/cupy/imports.py",
        "            _handoff.handoff(producer, consumer, src_gpu, gpu)\n",
        "",
        (GPU + "test_an_import_is_ready_on_the_consumer_stream_without_blocking_the_host",)),
    Bug("host-wait-in-the-handoff-under-capture",
        "the hand-off waits on the host for the producer's stream, which a capture forbids",
        "gpu_dlpack/_handoff.py",
        "    if _capture_stands_in(producer, consumer, device, consumer_device):\n        return False\n",
        "    with on_device(device):\n        runtime.streamSynchronize(producer)\n",
        ("tests/test_capture.py::test_the_hand_off_between_two_streams_of_a_capture_is_recorded_into_the_graph",)),
    Bug("legacy-stream-used-under-capture",
        "stream=None read as the legacy default stream inside a capture (the hand-off waits on it)",
        "gpu_dlpack/_handoff.py",
        "    if produced == CAPTURING and consumer in _LEGACY:\n        return True\n",
        "    if produced == CAPTURING and consumer in _LEGACY:\n        return False\n",
        ("tests/test_capture.py::test_export_with_stream_none_under_capture_waits_on_the_capturing_stream",)),
    Bug("event-query-during-capture",
        "a copy on the device made under capture, its buffers kept by an event recorded into the capture, "
        "which the next exchange queries",
        "gpu_dlpack/_backends/cupy/copies.py",
        "    _refuse_copy_under_capture(target, (producer, src_gpu), (copy_stream, copy_gpu))\n",
        "",
        ("tests/test_capture.py::test_a_copy_on_the_device_under_capture_is_refused",)),
    Bug("pageable-copy-under-capture",
        "a copy from pageable host memory queued on a capturing stream",
        "gpu_dlpack/_backends/cupy/copies.py",
        "    _refuse_copy_under_capture(target, (copy_stream, gpu))\n",
        "",
        ("tests/test_capture.py::test_a_copy_from_host_memory_under_capture_is_refused",)),
    Bug("handoff-recorded-on-the-consumer-stream",
        "the hand-off's event recorded on the consumer's stream instead of the producer's (Python calls)",
        "gpu_dlpack/_handoff.py",
        "                runtime.eventRecord(event, producer)\n",
        "                runtime.eventRecord(event, consumer)\n",
        (GPU + "test_an_export_makes_the_consumer_stream_wait_without_blocking_the_host",),
        python_calls=True),
    Bug("core-handoff-recorded-on-the-consumer-stream",
        "the same in the compiled core's hand-off",
        "gpu_dlpack/core/runtime.pxi",
        "answered(rt.event_record(<intptr_t>event_ptr, <intptr_t>producer_ptr, 0))",
        "answered(rt.event_record(<intptr_t>event_ptr, <intptr_t>consumer_ptr, 0))",
        (GPU + "test_an_export_makes_the_consumer_stream_wait_without_blocking_the_host",)),
    Bug("pinned-result-not-kept-alive",
        "a pinned result dropped before its copy is done goes back to the pool (its copy keeps only the source)",
        "gpu_dlpack/_backends/cupy/copies.py",
        "        _copies.copy_kept(block.ptr, src, nbytes, stream, gpu, sources + (out,))\n",
        "        _copies.copy_kept(block.ptr, src, nbytes, stream, gpu, sources)\n",
        ("tests/test_gpu_reliability.py::test_a_pinned_destination_dropped_mid_copy_is_not_handed_to_another_owner",)),
    Bug("keep-alive-event-on-the-wrong-stream",
        "the event that keeps a copy's buffers alive recorded on the legacy default stream, not the copy's",
        "gpu_dlpack/_copies.py",
        "            runtime.eventRecord(event, stream)\n",
        "            runtime.eventRecord(event, 1)\n",
        ("tests/test_gpu_reliability.py::test_a_pinned_destination_dropped_mid_copy_is_not_handed_to_another_owner",),
        python_calls=True),
    Bug("core-copy-without-its-keep-alive-event",
        "the compiled core's copy records no event after it: what it reads and writes is released at once",
        "gpu_dlpack/core/runtime.pxi",
        "        or (event_ptr != NULL and answered(rt.event_record(<intptr_t>event_ptr, <intptr_t>stream_ptr, 0)) < 0)\n",
        "",
        ("tests/test_gpu_reliability.py::test_a_pinned_destination_dropped_mid_copy_is_not_handed_to_another_owner",)),
    Bug("event-of-the-current-device",
        "a pooled event made on the current GPU, not on the GPU whose stream records it",
        "gpu_dlpack/_handoff.py",
        "    with on_device(device):\n        return runtime.eventCreateWithFlags(runtime.eventDisableTiming)\n",
        "    return runtime.eventCreateWithFlags(runtime.eventDisableTiming)\n",
        ("tests/test_simulated_cuda.py::test_an_array_of_the_second_gpu_hands_off_on_that_gpus_streams",)),
    Bug("freed-pinned-block-reused",
        "a pinned block freed when it comes back to the pool, and handed out again (use after free)",
        "gpu_dlpack/_copies.py",
        "                self._idle.setdefault(size, []).append(ptr)\n",
        "                self._idle.setdefault(size, []).append(ptr)\n                self.runtime.free_host(ptr)\n",
        (GPU + "test_cupy_export_to_cuda_host_is_pinned_memory_labelled_cuda_host",)),
    Bug("copy-to-the-host-not-waited-for",
        "a copy to the CPU returned before it is done (no stream synchronize)",
        "gpu_dlpack/_copies.py",
        "        copy(block.ptr, src, nbytes, stream, gpu, synchronize=True)\n",
        "        copy(block.ptr, src, nbytes, stream, gpu, synchronize=False)\n",
        (GPU + "test_a_copy_to_the_cpu_is_complete_when_the_call_returns",)),
    Bug("managed-memory-read-before-the-producer",
        "managed memory handed to the host in place without waiting for the producer's stream",
        "gpu_dlpack/_backends/cupy/gpus.py",
        "        _handoff.wait_host(producer, gpu)\n",
        "        pass\n",
        (GPU + "test_managed_memory_reaches_the_cpu_in_place_once_the_producer_stream_is_done",)),
    Bug("ring-chunk-refilled-before-its-copy",
        "a staging chunk of the copy engine's ring refilled before the copy that reads it is done",
        "gpu_dlpack/_copies.py",
        "    slot.wait(runtime)  # its last copy must be done before it is written\n",
        "",
        ("tests/test_copies.py::test_a_large_copy_through_the_ring_refills_a_chunk_only_once_its_copy_is_done",)),
    Bug("interface-stream-not-waited-for",
        "an object of the CUDA Array Interface read without making the consumer wait for the interface's stream",
        "gpu_dlpack/_protocols.py",
        "            _handoff.handoff(waits_on, consumer, self.device.index)\n",
        "            pass\n",
        ("tests/test_protocols.py::test_a_cuda_array_interface_is_read_on_the_consumer_stream_after_its_own",)),
    Bug("core-not-bound",
        "the compiled core loaded, but the hand-off and copies made by CuPy's Python calls",
        "gpu_dlpack/_handoff.py",
        "        differs = _compiled.bind_runtime(capi)\n",
        "        differs = ('unbound', None, 'x')\n",
        ("tests/test_simulated_cuda.py::test_the_hand_off_and_the_copy_go_through_cupys_runtime_entries_on_the_compiled_path",),
        catcher="test"),
    Bug("exchange-import-without-a-wait",
        "a tensor taken through its producer's C exchange API (torch's, a test producer's) without making the "
        "consumer wait for the producer's current work stream",
        "gpu_dlpack/_backends/cupy/imports.py",
        "            _handoff.handoff(work_stream or 1, ask, source.index)\n",
        "            pass\n",
        (ORDER + "test_an_import_through_a_producers_exchange_api_waits_for_its_current_work_stream",
         "tests/test_core.py::test_torch_to_cupy_through_the_exchange_waits_for_torch_current_stream")),
    Bug("source-of-a-queued-copy-back-to-the-pool",
        "the source of a copy queued on the consumer's stream not kept until the copy ran: its memory goes back "
        "to CuPy's pool, for the next allocation on the producer's stream",
        "gpu_dlpack/_backends/cupy/copies.py",
        "    _queue_copy(_address(out), x.data.ptr, x.nbytes, copy_stream, copy_gpu, host_done, source, x, out)\n",
        "    _queue_copy(_address(out), x.data.ptr, x.nbytes, copy_stream, copy_gpu, host_done, out)\n",
        (ORDER + "test_the_source_of_a_queued_copy_to_another_gpu_stays_out_of_the_pool_until_it_ran",)),
)
