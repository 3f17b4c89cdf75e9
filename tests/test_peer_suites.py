"""The runner of the peers' own DLPack suites (tests/peer_suites.py), on
small files of their shape: the peers' files are not installable, so the
runner itself is checked here, where no peer file is needed."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import textwrap
import unittest

import pytest

import gpu_dlpack
from tests import peer_suites
from tests.peer_differences import DIFFERENCES, Row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The calls of torch's test/test_dlpack.py that each role rewrites, and those
# it leaves alone (a wrapper's own self.tensor.__dlpack__, TensorFlow's
# consumer, a class statement).
TORCH_SHAPED = textwrap.dedent("""\
    import unittest
    import numpy as np
    import torch
    from torch.utils.dlpack import from_dlpack, to_dlpack


    class TensorDLPackWrapper:
        def __init__(self, tensor):
            self.tensor = tensor

        def __dlpack__(self, *args, **kwargs):
            return self.tensor.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self.tensor.__dlpack_device__()


    class TestShaped(unittest.TestCase):
        def test_capsule(self):
            x = torch.arange(4.0)
            self.assertEqual(from_dlpack(to_dlpack(x)).tolist(), x.tolist())

        def test_protocol(self):
            x = torch.arange(4.0)
            self.assertEqual(torch.from_dlpack(x, copy=None).data_ptr(), x.data_ptr())

        def test_numpy(self):
            x = torch.arange(4.0)
            self.assertEqual(np.from_dlpack(x).ctypes.data, x.data_ptr())

        def test_dunder(self):
            x = torch.arange(4.0)
            self.assertIn("dltensor_versioned", repr(x.__dlpack__(max_version=(1, 0))))

        def test_wrapper(self):
            x = torch.arange(4.0)
            self.assertEqual(torch.tensor(TensorDLPackWrapper(x)).tolist(), x.tolist())


    def tf_only(x):
        return tf.experimental.dlpack.from_dlpack(x.__dlpack__())
""")


def _lines(source: str) -> list[str]:
    """The lines of ``source`` where TORCH_SHAPED speaks DLPack."""
    where = [i for i, line in enumerate(TORCH_SHAPED.splitlines()) if "dlpack" in line.lower() or "Wrapper(" in line]
    lines = source.splitlines()
    return [lines[i].strip() for i in where]


def test_the_consumer_role_puts_the_layer_in_each_consumers_place():
    source, counts = peer_suites.rewrite(TORCH_SHAPED, "torch", "consumer")
    assert _lines(source) == [
        "from torch.utils.dlpack import from_dlpack, to_dlpack",
        "class TensorDLPackWrapper:",
        "def __dlpack__(self, *args, **kwargs):",
        "return self.tensor.__dlpack__(*args, **kwargs)",
        "def __dlpack_device__(self):",
        "return self.tensor.__dlpack_device__()",
        "self.assertEqual(_consume(to_dlpack(x)).tolist(), x.tolist())",
        "self.assertEqual(_consume(x, copy=None).data_ptr(), x.data_ptr())",
        "self.assertEqual(_gpu_dlpack.from_dlpack(x).ctypes.data, x.data_ptr())",
        'self.assertIn("dltensor_versioned", repr(x.__dlpack__(max_version=(1, 0))))',
        "self.assertEqual(torch.tensor(TensorDLPackWrapper(x)).tolist(), x.tolist())",
        "return tf.experimental.dlpack.from_dlpack(x.__dlpack__())",
    ]
    assert sum(counts.values()) == 3


def test_the_producer_role_hands_every_producer_over_through_wrap():
    source, counts = peer_suites.rewrite(TORCH_SHAPED, "torch", "producer")
    assert _lines(source) == [
        "from torch.utils.dlpack import from_dlpack, to_dlpack",
        "class TensorDLPackWrapper:",
        "def __dlpack__(self, *args, **kwargs):",
        "return self.tensor.__dlpack__(*args, **kwargs)",
        "def __dlpack_device__(self):",
        "return self.tensor.__dlpack_device__()",
        "self.assertEqual(_handed(from_dlpack, _gpu_dlpack.export(x)).tolist(), x.tolist())",
        "self.assertEqual(_handed(torch.from_dlpack, x, copy=None).data_ptr(), x.data_ptr())",
        "self.assertEqual(_handed(np.from_dlpack, x).ctypes.data, x.data_ptr())",
        'self.assertIn("dltensor_versioned", repr(_gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0))))',
        "self.assertEqual(torch.tensor(_gpu_dlpack.wrap(x)).tolist(), x.tolist())",
        "return tf.experimental.dlpack.from_dlpack(_gpu_dlpack.wrap(x).__dlpack__())",
    ]
    assert sum(counts.values()) == 7


def test_jax_s_consumers_are_rewritten_and_tensorflow_s_are_not():
    source = textwrap.dedent("""\
        a = jax.dlpack.from_dlpack(y)
        b = jnp.from_dlpack(x_np, device=device, copy=copy)
        c = np.from_dlpack(x_jax)
        d = tf.experimental.dlpack.from_dlpack(x.__dlpack__())
        e = self.arr.__dlpack__(stream=stream)
    """)
    consumer, _ = peer_suites.rewrite(source, "jax", "consumer")
    assert consumer.splitlines() == [
        "a = _consume(y)",
        "b = _consume(x_np, device=device, copy=copy)",
        "c = _gpu_dlpack.from_dlpack(x_jax)",
        "d = tf.experimental.dlpack.from_dlpack(x.__dlpack__())",
        "e = self.arr.__dlpack__(stream=stream)",
    ]
    producer, _ = peer_suites.rewrite(source, "jax", "producer")
    assert producer.splitlines() == [
        "a = _handed(jax.dlpack.from_dlpack, y)",
        "b = _handed(jnp.from_dlpack, x_np, device=device, copy=copy)",
        "c = _handed(np.from_dlpack, x_jax)",
        "d = tf.experimental.dlpack.from_dlpack(_gpu_dlpack.wrap(x).__dlpack__())",
        "e = self.arr.__dlpack__(stream=stream)",
    ]


# The calls of TensorFlow's tensorflow/python/dlpack/dlpack_test.py and of
# PaddlePaddle's test/legacy_test/test_dlpack.py, and what each role makes of
# them (only rewritten here: the two peers never share a process).
TF_SHAPED = textwrap.dedent("""\
    from tensorflow.python.dlpack import dlpack
    dlcapsule = dlpack.to_dlpack(tf_tensor)
    tf_tensor2 = dlpack.from_dlpack(dlcapsule)
    t = tf.experimental.dlpack.from_dlpack(c)
""")
PADDLE_SHAPED = textwrap.dedent("""\
    from utils import dygraph_guard
    dlpack_v1 = paddle.utils.dlpack.to_dlpack(x)
    o_v1 = paddle.utils.dlpack.from_dlpack(dlpack_v1)
    dlpack_v2 = paddle.to_dlpack(x)
    o_v2 = paddle.from_dlpack(dlpack_v2)
    y = paddle.from_dlpack(np_array)
    device_type, device_id = tensor_cpu.__dlpack_device__()
    c = tensor.__dlpack__()
    self.assertRaises(TypeError, paddle.utils.dlpack.to_dlpack, np.zeros(5))
""")


def test_tensorflow_s_and_paddle_s_calls_are_rewritten_for_each_role():
    assert peer_suites.rewrite(TF_SHAPED, "tensorflow", "consumer")[0].splitlines() == [
        "from tensorflow.python.dlpack import dlpack",
        "dlcapsule = dlpack.to_dlpack(tf_tensor)",
        "tf_tensor2 = _consume(dlcapsule)",
        "t = tf.experimental.dlpack.from_dlpack(c)",
    ]
    assert peer_suites.rewrite(TF_SHAPED, "tensorflow", "producer")[0].splitlines() == [
        "from tensorflow.python.dlpack import dlpack",
        "dlcapsule = _gpu_dlpack.export(tf_tensor)",
        "tf_tensor2 = _handed(dlpack.from_dlpack, dlcapsule)",
        "t = tf.experimental.dlpack.from_dlpack(c)",
    ]
    assert peer_suites.rewrite(PADDLE_SHAPED, "paddle", "consumer")[0].splitlines() == [
        "from utils import dygraph_guard",
        "dlpack_v1 = paddle.utils.dlpack.to_dlpack(x)",
        "o_v1 = _consume(dlpack_v1)",
        "dlpack_v2 = paddle.to_dlpack(x)",
        "o_v2 = _consume(dlpack_v2)",
        "y = _consume(np_array)",
        "device_type, device_id = tensor_cpu.__dlpack_device__()",
        "c = tensor.__dlpack__()",
        "self.assertRaises(TypeError, paddle.utils.dlpack.to_dlpack, np.zeros(5))",
    ]
    assert peer_suites.rewrite(PADDLE_SHAPED, "paddle", "producer")[0].splitlines() == [
        "from utils import dygraph_guard",
        "dlpack_v1 = _gpu_dlpack.export(x)",
        "o_v1 = _handed(paddle.utils.dlpack.from_dlpack, dlpack_v1)",
        "dlpack_v2 = _gpu_dlpack.export(x)",
        "o_v2 = _handed(paddle.from_dlpack, dlpack_v2)",
        "y = _handed(paddle.from_dlpack, np_array)",
        "device_type, device_id = _gpu_dlpack.wrap(tensor_cpu).__dlpack_device__()",
        "c = _gpu_dlpack.wrap(tensor).__dlpack__()",
        "self.assertRaises(TypeError, paddle.utils.dlpack.to_dlpack, np.zeros(5))",
    ]


def test_paddle_s_file_finds_its_helpers_beside_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / "test" / "legacy_test" / "test_dlpack.py"
    peer_suites.SUITES["paddle"].prepare(str(path))
    assert sys.path[0] == str(path.parent)


def _shaped_checkout(root, suites):
    for suite in suites:
        path = root / peer_suites.SUITES[suite].path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("raise AssertionError('not to be imported')\n")


def test_tensorflow_s_and_paddle_s_files_never_share_a_process(tmp_path):
    _shaped_checkout(tmp_path, ["tensorflow", "paddle"])
    assert sorted(peer_suites.find([str(tmp_path)])) == ["paddle", "tensorflow"]
    out = _pytest({"GPU_DLPACK_PEER_TESTS": str(tmp_path), "GPU_DLPACK_PEER_SUITES": "tensorflow,paddle"},
                  tmp_path)
    assert out.returncode != 0 and "runs alone, in a process of its own" in out.stdout + out.stderr, out.stdout
    # Unnamed, they are left out: a run of every suite found is one of those that share a process.
    out = _pytest({"GPU_DLPACK_PEER_TESTS": str(tmp_path)}, tmp_path)
    assert "each run alone: GPU_DLPACK_PEER_SUITES=NAME" in out.stdout, out.stdout + out.stderr
    assert "not to be imported" not in out.stdout + out.stderr


def test_the_file_itself_is_run_as_it_is():
    assert peer_suites.rewrite(TORCH_SHAPED, "torch", "itself") == (TORCH_SHAPED, {})
    with pytest.raises(ValueError, match="role 'both' is not one of"):
        peer_suites.rewrite(TORCH_SHAPED, "torch", "both")


class _Calls:
    """The layer's entry points, each call recorded and passed on."""

    def __init__(self, monkeypatch):
        self.names = []
        for name in ("convert", "from_dlpack", "wrap", "export"):
            real = getattr(gpu_dlpack, name)
            monkeypatch.setattr(gpu_dlpack, name, self._recording(name, real))

    def _recording(self, name, real):
        def call(*args, **kwargs):
            self.names.append(name if name != "convert" else f"convert to {args[1]}")
            return real(*args, **kwargs)

        return call


@pytest.mark.parametrize("role, calls", [
    ("consumer", {"test_capsule": ["convert to torch"], "test_protocol": ["convert to torch"],
                  "test_numpy": ["from_dlpack"], "test_dunder": [], "test_wrapper": []}),
    ("producer", {"test_capsule": ["export"], "test_protocol": ["wrap"], "test_numpy": ["wrap"],
                  "test_dunder": ["wrap"], "test_wrapper": ["wrap"]}),
    ("itself", {"test_capsule": [], "test_protocol": [], "test_numpy": [], "test_dunder": [],
                "test_wrapper": []}),
])
def test_each_role_runs_through_the_layer_where_it_says(tmp_path, monkeypatch, role, calls):
    pytest.importorskip("torch")
    path = tmp_path / "test" / "test_dlpack.py"
    path.parent.mkdir()
    path.write_text(TORCH_SHAPED)
    assert peer_suites.find([str(tmp_path)]) == {"torch": str(path)}
    module = peer_suites.load(str(path), "torch", role)
    assert sorted(peer_suites.cases(module)) == [f"TestShaped::{name}" for name in sorted(calls)]
    recorded = _Calls(monkeypatch)
    for name, expected in calls.items():
        result = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(module.TestShaped(name))
        assert result.wasSuccessful(), (result.failures, result.errors)
        assert recorded.names == expected, name
        recorded.names.clear()


def test_a_file_given_twice_is_an_error(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "tests").mkdir(parents=True)
        (tmp_path / d / "tests" / "array_interoperability_test.py").write_text("")
    with pytest.raises(ValueError, match="more than one of the directories"):
        peer_suites.find([str(tmp_path / "a"), str(tmp_path / "b")])
    assert peer_suites.find([str(tmp_path / "a")]) == {
        "jax": str(tmp_path / "a" / "tests" / "array_interoperability_test.py")}


def test_the_cases_of_a_product_are_named_with_their_parameters():
    class Product(unittest.TestCase):
        def test_plain(self):
            pass

        def testMany0(self):
            raise AssertionError("copy=False")

    # absl's parameterized names a case of a product testMany0, testMany1...
    # and keeps its parameters in this attribute.
    Product.testMany0.__x_params_repr__ = "(shape=(4,), copy=False, aligned=False)"
    module = type(sys)("tests._peer_shaped")
    Product.__module__ = module.__name__
    module.Product = Product
    assert peer_suites.cases(module) == {
        "Product::test_plain": (Product, "test_plain"),
        "Product::testMany0(shape=(4,), copy=False, aligned=False)": (Product, "testMany0"),
    }
    peer_suites.mark(Product, "testMany0", "why")
    (xfail,) = Product.testMany0.pytestmark
    assert (xfail.name, xfail.kwargs) == ("xfail", {"reason": "why", "strict": True})
    with pytest.raises(AssertionError, match="copy=False"):
        Product("testMany0").testMany0()


def test_a_row_s_only_wildcard_is_the_star():
    name = "DLPackTest::testNumpyToJax12(shape=(3, 0), dtype=<class 'numpy.float32'>, copy=False, aligned=False)"
    unaligned = Row("jax", "consumer", "DLPackTest::testNumpyToJax*(*copy=False, aligned=False)")
    assert peer_suites.decided("jax", "consumer", name) == [unaligned]
    assert peer_suites.decided("jax", "consumer", name.replace("copy=False", "copy=None")) == []
    assert peer_suites.decided("jax", "producer", name) == []
    assert not peer_suites.names_a_case("Test::test_x[1]", ["Test::test_x1"])  # no character classes


def test_a_row_for_one_run_decides_in_that_run_only():
    name = "DLPackTest::testNumpyToJax12(shape=(3, 0), dtype=<class 'numpy.int64'>, copy=None, aligned=True)"
    narrowed = Row("jax", "consumer", "DLPackTest::testNumpyToJax*(*dtype=<class 'numpy.int64'>, *", "x32")
    assert peer_suites.decided("jax", "consumer", name, "x32") == [narrowed]
    assert peer_suites.decided("jax", "consumer", name, "x64") == []
    assert peer_suites.decided("jax", "consumer", name.replace("int64", "int32"), "x32") == []
    # A row for every run decides in each, beside a row for one run.
    unaligned = name.replace("copy=None, aligned=True", "copy=False, aligned=False")
    assert len(peer_suites.decided("jax", "consumer", unaligned, "x32")) == 2
    assert len(peer_suites.decided("jax", "consumer", unaligned, "x64")) == 1


@pytest.mark.parametrize("row", sorted(DIFFERENCES), ids=str)
def test_each_row_of_the_table_is_a_decision_with_its_reason(row):
    assert row.suite in peer_suites.SUITES and row.role in ("consumer", "producer", "itself")
    assert "::" in row.case and not row.case.startswith("*")
    assert isinstance(DIFFERENCES[row], str) and len(DIFFERENCES[row]) > 40
    # A row for one run names one of its suite's runs, which scripts/peer-suites.sh makes.
    assert row.run == "" or row.run in peer_suites.SUITES[row.suite].runs


def test_a_suite_s_run_is_one_of_its_runs(monkeypatch):
    assert peer_suites.run_of("torch") == ""
    monkeypatch.setitem(peer_suites.SUITES, "jax", dataclasses.replace(peer_suites.SUITES["jax"], run=lambda: "x16"))
    with pytest.raises(ValueError, match="run 'x16' is not one of its runs"):
        peer_suites.run_of("jax")


def test_scripts_peer_suites_makes_each_of_jax_s_runs():
    script_path = os.path.join(ROOT, "scripts", "peer-suites.sh")
    if not os.path.exists(script_path):  # the release check tests an installed wheel, with no scripts
        pytest.skip("reads scripts/peer-suites.sh, in a source tree only")
    with open(script_path, encoding="utf-8") as f:
        script = f.read()
    assert peer_suites.SUITES["jax"].runs == ("x64", "x32")
    assert "JAX_ENABLE_X64=1" in script and "JAX_ENABLE_X64=0" in script


JAX_SHAPED = textwrap.dedent("""\
    import unittest
    import jax.numpy as jnp


    class DLPackTest(unittest.TestCase):
        def testEveryRun(self):
            raise AssertionError("decided in every run")

        def testNarrowed(self):
            raise AssertionError("decided without x64 only")

        def testPasses(self):
            pass

        def never_called(self, x):
            return jnp.from_dlpack(x)
""")
SHAPED_ROWS = {
    Row("jax", "consumer", "DLPackTest::testEveryRun"): "a decision of every run, for the test",
    Row("jax", "consumer", "DLPackTest::testNarrowed", "x32"): "a decision of the run x32, for the test",
    Row("jax", "consumer", "DLPackTest::testGone", "x64"): "a row of the run x64 that names no case",
}


@pytest.mark.parametrize("run", ["x64", "x32"])
def test_a_file_is_marked_and_checked_by_the_rows_of_its_run(tmp_path, monkeypatch, run):
    pytest.importorskip("jax")  # the JAX-shaped file imports it, as JAX's own does
    path = tmp_path / "tests" / "array_interoperability_test.py"
    path.parent.mkdir()
    path.write_text(JAX_SHAPED)
    monkeypatch.setattr(peer_suites, "DIFFERENCES", SHAPED_ROWS)
    monkeypatch.setitem(peer_suites.SUITES, "jax", dataclasses.replace(
        peer_suites.SUITES["jax"], prepare=None, run=lambda: run))
    monkeypatch.delitem(sys.modules, "tests._peer_jax_as_consumer", raising=False)
    (one,) = peer_suites.load_all({"jax": str(path)}, ["consumer"])
    assert one.run == run == peer_suites.run_of("jax")
    marked = {name for name, (cls, method) in one.cases.items() if hasattr(getattr(cls, method), "pytestmark")}
    assert marked == {"DLPackTest::testEveryRun", "DLPackTest::testNarrowed"} if run == "x32" else {
        "DLPackTest::testEveryRun"}
    # The rows the run checks: those of every run and of its own; a row of
    # the run that names no case is among them, so the check fails on it.
    rows = peer_suites.rows_for([one])
    assert rows == sorted(row for row in SHAPED_ROWS if row.run in ("", run))
    assert [row.case for row in rows if not peer_suites.names_a_case(row.case, one.cases)] == (
        ["DLPackTest::testGone"] if run == "x64" else [])


def test_the_figures_of_a_run_are_counted_per_suite_and_role(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text("""<testsuites><testsuite>
        <testcase classname="tests.run_peer_suites.torch_consumer__TestTorchDlPackCPU" name="test_a"/>
        <testcase classname="tests.run_peer_suites.torch_consumer__TestTorchDlPackCPU" name="test_b">
          <skipped type="pytest.xfail" message="why"/></testcase>
        <testcase classname="tests.run_peer_suites.jax_producer__DLPackTest" name="testX0">
          <skipped type="pytest.skip" message="gpu"/></testcase>
        <testcase classname="tests.run_peer_suites" name="test_jax_producer__test_ensure_alignment">
          <failure message="no"/></testcase>
        <testcase classname="tests.run_peer_suites" name="test_the_path_is_the_one_asked_for"/>
        </testsuite></testsuites>""")
    assert peer_suites.tally(str(report)) == {
        ("torch", "consumer"): {"passed": 1, "xfailed": 1, "skipped": 0, "failed": 0},
        ("jax", "producer"): {"passed": 0, "xfailed": 0, "skipped": 1, "failed": 1},
        ("runner", ""): {"passed": 1, "xfailed": 0, "skipped": 0, "failed": 0},
    }


def _pytest(env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_DLPACK_PEER")}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/run_peer_suites.py", "-q", "-p", "no:cacheprovider",
         f"--junitxml={tmp_path / 'run.xml'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_runner_runs_nothing_without_a_directory(monkeypatch):
    monkeypatch.delenv("GPU_DLPACK_PEER_TESTS", raising=False)
    monkeypatch.delitem(sys.modules, "tests.run_peer_suites", raising=False)
    with pytest.raises(pytest.skip.Exception, match="GPU_DLPACK_PEER_TESTS names no directory"):
        importlib.import_module("tests.run_peer_suites")


def test_the_runner_collects_a_file_s_tests_under_its_suite_and_role(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_dlpack.py").write_text(TORCH_SHAPED + textwrap.dedent("""\


        def test_a_function():
            pass
    """))
    # (The table's rows are for the consumer and producer roles: in those the
    # shaped file would leave them naming no case.)
    out = _pytest({"GPU_DLPACK_PEER_TESTS": str(tmp_path), "GPU_DLPACK_PEER_ROLES": "itself"}, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert peer_suites.tally(str(tmp_path / "run.xml"))[("torch", "itself")] == {
        "passed": 6, "xfailed": 0, "skipped": 0, "failed": 0}
