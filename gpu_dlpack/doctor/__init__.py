"""``gpu-dlpack doctor``: what in this environment interoperates through
DLPack, and what gpu_dlpack fixes.

Everything is measured live, with small exchanges (a 2x3 float32 array) of
arrays made as ``PEERS`` says, never read from a table of versions. A
library that is missing, fails to import or raises while probed gets its
row with the reason; it never stops the report.

The JSON report (``gpu-dlpack doctor --json``, schema ``gpu_dlpack.doctor/1``)::

    {
      "schema": "gpu_dlpack.doctor/1",
      "gpu_dlpack": {"version": str, "dlpack_version": [int, int],
                     "min_dlpack_version": [int, int],
                     "core": str,     # the file of the compiled core
                     "runtime": str},  # the CUDA runtime the core calls, or why none
      "platform": {
        "python": str, "implementation": str, "executable": str,
        "os": str, "machine": str,
        "gpu": {
          "usable": bool,                 # gpu_dlpack's GPU backend (CuPy) has a device
          "backend": "cuda" | "rocm" | null,
          "reason": str | null,           # why not usable
          "nvidia_driver": str | null,    # /proc/driver/nvidia/version, first line
          "cupy": {"distributions": [str], "version": str | null,
                   "runtime_version": str | null, "driver_version": str | null,
                   "device_count": int | null,
                   "capture": str | null,   # whether CuPy exposes graph capture
                   "error": str | null} | null,
          "devices": [{"index": int, "name": str, "memory_bytes": int,
                       "compute_capability": str}],
          "torch": {"cuda_available": bool, "cuda_version": str | null,
                    "hip_version": str | null, "device_count": int} | null,
          "jax": {"backend": str, "devices": [str]} | null
        },
        "accelerators": [{                # devices DLPack does not reach (a JAX TPU)
          "library": str, "device": str,
          "dlpack": [int, int] | null,    # its DLPack device, where one names it
          "exchanges": [{"call": str, "ok": bool, "detail": str}]
        }]
      },
      "libraries": [{
        "name": str, "module": str, "installed": bool,
        "version": str | null, "error": str | null,   # "not installed", import error
        "unopened": {                                  # null: it opened what it is set up for
          "platform": str,             # the accelerator it could not open ("tpu")
          "set_up_for": str | null,    # the platforms it is set up for (JAX's jax_platforms)
          "busy": bool,                # another process holds it
          "reason": str,               # why, as the terminal report says it
          "error": str,                # what the library raised
          "explain": str | null,       # id of the gpu-dlpack explain entry
          "probed_on": "cpu"           # set up for its CPU, where it was probed
        } | null,
        "producer": {                                  # null when not imported
          "probed": bool, "reason": str | null,        # why not probed
          "device": str,                               # "cpu", "cuda:0"
          "device_answer": [int, int | null] | null,   # its __dlpack_device__(), as it came
          "capsules": {"none": CAPSULE, "1.0": CAPSULE},   # max_version=None / (1, 0)
          "keywords": {"stream": bool, "max_version": bool, "dl_device": bool, "copy": bool},
          "keyword_errors": {keyword: str},
          "floor": [int, int] | null,        # lowest max_version accepted, when above (0, 0)
          "floor_error": str | null,
          "read_only": {"flag": bool | null, "legacy": "refused" | "exported" | "versioned" | null,
                        "detail": str | null} | null,   # null: it makes no read-only data
          "copy": {"copies": bool | null, "flag": bool | null, "detail": str | null},
          # gpu_dlpack.testing's rules of a producer on its host arrays
          # (float32), which judge its faults of the table: null on a GPU
          "rules": {RULE: [OUTCOME_OF_RULE, str]} | null
        },
        "consumer": {                                   # null when not imported
          "probed": bool, "reason": str | null,
          "call": str,                                  # "torch.from_dlpack"
          "sends": {keyword: value} | null,             # non-None keywords it passed wrap()
          "asks": {keyword: value} | null,              # ... and a producer with __dlpack__ alone
          "error": str | null,                          # importing host data failed
          "lands_on": str | null,                       # device of the result
          "zero_copy": bool | null,
          "unaligned": bool | str,      # zero-copy for data not 64-byte aligned; str: the error
          "copy": {"forwarded": bool | null, "copied": bool | null, "error": str | null},
          "read_only": {"honoured": bool | null, "detail": str},
          "raw_capsules": {"legacy": true | str, "versioned": true | str},  # str: the error
          "takes": "producers" | "capsules",  # what the exchanges feed it
          # host consumers only: layouts probed in a child process, and its faults
          "strides": {"negative": OUTCOME, "stepped": OUTCOME, "transposed": OUTCOME} | null,
          "faults": {"measured": [FAULT], "table": [FAULT],   # table: gpu_dlpack._peers, this version
                     "unknown": [FAULT],    # measured, not in the table
                     "gone": [FAULT]}       # in the table, judged by a probe, not measured
        }
      }],
      # and per library: every row of gpu_dlpack's table of peer faults
      # for its version, in both roles, as it stands here ([]: none for
      # this version; null: not installed, or not in the table):
      #   "table": [{"role": "consumer" | "producer", "fault": FAULT,
      #              "state": "holds" | "no longer holds" | "not measured", "why": str}] | null
      "matrices": [{
        "device": "cpu" | "cuda" | "rocm",
        "producers": [str], "consumers": [str],
        "skipped": [{"producer": str, "reason": str}],   # no array, or no __dlpack__
        "cells": [{"producer": str, "consumer": str, "direct": RESULT, "via": RESULT}],
        "error": str                                     # only when the matrix could not run
      }],
      "findings": [{"severity": "failure" | "refused" | "hazard" | "fixed" | "note",
                    "subject": str, "problem": str, "remedy": str,
                    "hazard": str, "strict": bool}],   # the last two: hazards and notes
      "summary": {"exchanges": int, "through_gpu_dlpack_ok": int,
                  "through_gpu_dlpack_failed": int, "refused": int, "hazards": int,
                  "uncorrected": int},  # findings with "strict": gpu_dlpack does not correct them
      "strict": bool,                   # uncorrected findings fail the run too (doctor --strict)
      "exit_status": 0 | 1
    }

    CAPSULE = {"name": "dltensor" | "dltensor_versioned", "version": [int, int] | null,
               "flags": int}   # the DLPack flags (0 for a legacy capsule)
              or {"error": str}
    FAULT   = an id of gpu_dlpack._peers.FAULTS ("read-only-ignored", "negative-strides", ...)
    RULE    = an id of gpu_dlpack.testing.RULES ("versioned-when-asked", ...)
    OUTCOME_OF_RULE = "passed" | "failed" | "not applicable"  # and the evidence
    OUTCOME = "zero-copy" | "copies" | "wrong values" | "raises: <error>"
              | "aborts the process (SIGABRT)" | "kills the process (...)" | "hangs: ..."
              | "not probed: ..."
    RESULT  = {"call": str,
               "outcome": "zero-copy" | "copied" | "refused" | "error" | "wrong-values",
               "ok": bool, "error": str | null,
               "explain": str | null,        # id of the gpu-dlpack explain entry
               "request": {keyword: value} | null,   # what the consumer sent to wrap()
               "hazards": [str]}             # hazard ids, e.g. "consumer-ignores-read-only"

``direct`` is the consumer's own ``from_dlpack`` on the producer's array.
``via`` is the same exchange through gpu_dlpack: ``gpu_dlpack.from_dlpack(x)``
for the consumer gpu_dlpack lands in on that device (NumPy on the host, CuPy
on a GPU), ``consumer(gpu_dlpack.wrap(x))`` for every other consumer.
``refused`` is gpu_dlpack declining what a rule exists to refuse
(``_verdicts``): not a failure. What the exit status, ``--strict`` and the
findings mean is in docs/guide/doctor.md.

Floor: the faces; it stands on the two directions and reads the rest as any
user would.
"""

from ._findings import SEVERITIES
from ._peers import PEERS, Peer, generic_peer
from ._render import render
from ._report import run, to_json

__all__ = ["PEERS", "SEVERITIES", "Peer", "generic_peer", "render", "run", "to_json"]
