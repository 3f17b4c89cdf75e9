#!/usr/bin/env bash
# The TPU check, for a machine with a TPU (and JAX for it): a JAX array on
# the chip through every entry of the layer, and the doctor.
#   bash scripts/tpu-check.sh
# Runs with the interpreter it finds (python3, or $PYTHON) on the compiled
# core built in place for it (python setup.py build_ext --inplace, on a
# machine with the build tools; the core is carried where there are none).
# Prints one line per entry: what it gave, or the error it raised. Its last
# result is in docs/internals/testing.md ("The TPU check"); the suite runs
# the same entries on the host with a stand-in producer that behaves as
# measured here (tests/test_accelerators.py).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PYTHON:-python3}
"$py" - <<'PY'
import numpy as np
import jax
import jax.numpy as jnp

import gpu_dlpack

tpu = [d for d in jax.devices() if d.platform == "tpu"]
print(f"jax {jax.__version__}, numpy {np.__version__}, gpu_dlpack {gpu_dlpack.__version__}; TPU devices: {tpu}")
if not tpu:
    raise SystemExit("tpu-check: no TPU here")
x = jax.device_put(jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), tpu[0])
want = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def entry(name, fn):
    try:
        got = fn()
    except Exception as exc:
        print(f"  {name:<46} raises {type(exc).__name__}: {str(exc)[:120]}")
        return
    values = np.asarray(got).tolist() if not hasattr(got, "devices") else np.asarray(jax.device_get(got)).tolist()
    where = f" on {sorted(str(d) for d in got.devices())}" if hasattr(got, "devices") else ""
    ok = "values equal" if values == want else f"values {values}"
    print(f"  {name:<46} {type(got).__module__}.{type(got).__name__}{where}, {ok}")


entry("from_dlpack(x, device='cpu')", lambda: gpu_dlpack.from_dlpack(x, device="cpu"))
entry("from_dlpack(x, copy=True)", lambda: gpu_dlpack.from_dlpack(x, copy=True))
entry("from_dlpack(x)  (JAX's refusal expected)", lambda: gpu_dlpack.from_dlpack(x))
entry("convert(x, 'numpy')", lambda: gpu_dlpack.convert(x, "numpy"))
entry("convert(x, 'numpy', copy=True)", lambda: gpu_dlpack.convert(x, "numpy", copy=True))
try:
    import torch  # noqa: F401
    entry("convert(x, 'torch')", lambda: gpu_dlpack.convert(x, "torch"))
except ImportError:
    print("  convert(x, 'torch')                            not run: torch is not installed here")
print(f"  {'Device(jax.devices()[0])':<46} {gpu_dlpack.Device(tpu[0])!r}")
entry("convert(a, 'jax', device=tpu)", lambda: gpu_dlpack.convert(np.array(want, np.float32), "jax", device=tpu[0]))
entry("convert(x, 'jax')  (x itself)", lambda: gpu_dlpack.convert(x, "jax"))
entry("jnp.from_dlpack(wrap(a), device=tpu)", lambda: jnp.from_dlpack(gpu_dlpack.wrap(np.array(want, np.float32)),
                                                                      device=tpu[0]))
PY
[ $? -eq 0 ] || exit 1
echo "== gpu-dlpack doctor"
"$py" -m gpu_dlpack doctor
