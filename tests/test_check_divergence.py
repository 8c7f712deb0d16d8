"""``convert --check`` when bmlib really computes something wrong.

A wrong template or lowering result is injected (the CLI runs in a subprocess whose
template registry is patched first, or with a ``--lowerings`` file that adds 1), so
the check truly fails.  On every path — the built-in table with packed conv
weights, ``--merge``, a legacy table with a legacy lowering — it must exit 1, name
the first diverging intermediate and its partition, and still write the report.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bmlib_relax.check import difference
from bmlib_relax.convert import check_failed_folder
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.convert import REPORT_SCHEMA_PATH
from bmlib_relax.recipe import recipe_tensor

from conftest import ROOT, cli

EXAMPLE = Path(EXAMPLE_DIR)

# conv2d+relu, max_pool2d, reshape, dense, softmax: five partitions with the built-in
# table (the conv weight is packed to OIHW8i16o / OIHW{ib}i{ob}o), one after --merge.
CHAIN = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 8, 6, 6), float32], %weight: Tensor[(16, 8, 3, 3), float32], %w2: Tensor[(4, 144), float32]) {
  %0 = nn.conv2d(%data, %weight, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
  %3 = nn.batch_flatten(%2);
  %4 = nn.dense(%3, %w2);
  nn.softmax(%4)
}
"""


def cli_with_wrong_template(op: str, expr: str, *args) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess whose bmlib template of ``op`` returns ``expr``
    (a Python expression of ``v``, the correct value) instead of the right answer."""
    script = textwrap.dedent(f"""
        import sys
        import tvm
        from tvm import te
        from bmlib_relax.backend.templates import registry

        right = registry.get_template({op!r})

        def wrong(call, inputs, ctx):
            out = right(call, inputs, ctx)
            return te.compute(out.shape, lambda *i: (lambda v: {expr})(out(*i)),
                              name="injected_error")

        registry.TEMPLATES.register({op!r}, override=True)(wrong)
        from bmlib_relax.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("chain")
    (folder / "model.relay").write_text(CHAIN)
    np.savez(folder / "params.npz", weight=recipe_tensor("weight", (16, 8, 3, 3)),
             w2=recipe_tensor("w2", (4, 144)))
    return folder / "model.relay", folder / "params.npz"


def failed_folder(out: Path) -> Path:
    """Where a conversion whose check failed goes: ``-o`` is left as it was (a failed
    model never takes a good one's place), the failed run beside it for reading."""
    assert not out.exists(), "a failed check published into -o"
    return Path(check_failed_folder(str(out)))


def failed_report(proc, out: Path) -> dict:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[0].startswith("check failed:"), proc.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, json.loads(Path(REPORT_SCHEMA_PATH).read_text()))
    assert report["partitions"], "nothing was offloaded"
    assert report["check"]["ok"] is False
    return report


def test_failed_check_on_packed_weights_exits_1_naming_the_first_diverging_partition(
        chain, tmp_path):
    model, params = chain
    out = tmp_path / "out"
    proc = cli_with_wrong_template("relax.nn.max_pool2d", "v + 1.0", "convert", model,
                                   "--params", params, "--inputs", "data=1,8,6,6:float32",
                                   "--check", "-q", "-o", out)
    out = failed_folder(out)
    report = failed_report(proc, out)
    div = report["check"]["first_divergence"]
    # The conv partition before it is right (packed weights, compared through the
    # un-packed reference); the pool partition is the first that is wrong.
    assert "fused_relax_nn_max_pool2d_bmlib" in div["producer"], div
    assert "bmlib.max_pool2d" in div["producer"]
    assert div["max_abs"] == pytest.approx(1.0, rel=1e-5)
    assert div["binding"] in proc.stderr and "max_pool2d" in proc.stderr
    # This is the packed-weight path: the conv reads its weight in a blocked layout.
    assert re.search(r'kernel_layout="OIHW\d+i\d+o"', (out / "model_relax.py").read_text())
    assert "first diverging intermediate" in (out / "report.md").read_text().lower()


def test_failed_check_after_merge_names_the_merged_partition(chain, tmp_path):
    model, params = chain
    out = tmp_path / "out"
    proc = cli_with_wrong_template("relax.nn.relu", "v + 1.0", "convert", model,
                                   "--params", params, "--inputs", "data=1,8,6,6:float32",
                                   "--merge", "--check", "-q", "-o", out)
    out = failed_folder(out)
    report = failed_report(proc, out)
    (part,) = report["partitions"]
    div = report["check"]["first_divergence"]
    assert div["producer"].startswith(f"bmlib partition {part['name']}"), div
    assert "bmlib.conv2d_relu" in div["producer"]


def test_nan_against_a_number_fails_the_check(chain, tmp_path):
    model, params = chain
    out = tmp_path / "out"
    proc = cli_with_wrong_template("relax.nn.softmax", "v + tvm.tirx.const(float('nan'), "
                                   "'float32')",
                                   "convert", model, "--params", params,
                                   "--inputs", "data=1,8,6,6:float32", "--check", "-q",
                                   "-o", out)
    out = failed_folder(out)
    report = failed_report(proc, out)
    (output,) = report["check"]["outputs"]
    assert output["nan_mismatches"] == 4 and output["ok"] is False
    div = report["check"]["first_divergence"]
    assert "fused_relax_nn_softmax_bmlib" in div["producer"]
    assert div["nan_mismatches"] == 4


def test_failed_check_with_a_legacy_lowering_exits_1(tmp_path):
    lowerings = tmp_path / "wrong_lowerings.py"
    lowerings.write_text(textwrap.dedent(f"""
        import importlib.util
        from tvm import topi

        spec = importlib.util.spec_from_file_location(
            "right", {str(EXAMPLE / "bmlib_lowerings.py")!r})
        right = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(right)

        def wrong(call, inputs):
            return topi.add(right._lower_reshape_conv2d_add_bn_relu(call, inputs), 1.0)

        _LOWER_MAP = {{"bmlib.reshape_conv2d_add_bn_relu": wrong}}
    """))
    out = tmp_path / "out"
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--patterns", EXAMPLE / "bmlib_patterns.py", "--lowerings", lowerings,
               "--check", "-q", "-o", out)
    out = failed_folder(out)
    report = failed_report(proc, out)
    div = report["check"]["first_divergence"]
    assert "bmlib.reshape_conv2d_add_bn_relu" in div["producer"], div
    assert div["max_abs"] == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize("got, want, ok", [
    ([1.0, np.nan], [1.0, np.nan], True),        # NaN where the reference has NaN: equal
    ([1.0, np.nan], [1.0, 2.0], False),          # NaN against a number diverges
    ([1.0, 2.0], [1.0, np.nan], False),          # ... either way round
    ([np.inf, -np.inf], [np.inf, -np.inf], True),
    ([np.inf, 1.0], [-np.inf, 1.0], False),
    ([1.0, 2.0], [1.0, 2.00001], True),
])
def test_comparison_is_nan_aware(got, want, ok):
    diff = difference("out0", np.array(got, "float32"), np.array(want, "float32"), 1e-4, 1e-4)
    assert diff.ok is ok
    if not ok:
        assert diff.max_abs == np.inf


def test_nan_mismatches_are_counted():
    diff = difference("out0", np.array([np.nan, np.nan, 1.0]), np.array([np.nan, 0.0, np.nan]),
                      1e-4, 1e-4)
    assert diff.nan_mismatches == 2 and not diff.ok


def test_check_still_fails_with_a_report_when_localisation_breaks(tmp_path, monkeypatch):
    import bmlib_relax.convert as convert_module
    from bmlib_relax.check import Difference

    def always_differs(got, want, rtol, atol):
        return [Difference("out0", 1.0, 1.0, False)]

    def broken(*args, **kwargs):
        raise RuntimeError("probe build failed\nmore detail")

    monkeypatch.setattr(convert_module, "compare", always_differs)
    monkeypatch.setattr(convert_module, "first_divergence", broken)
    result = convert_module.convert(EXAMPLE / "model.relay", tmp_path / "out",
                                    params=EXAMPLE / "params.npz", check=True)
    failed = failed_folder(tmp_path / "out")
    check = json.loads((failed / "report.json").read_text())["check"]
    assert check["ok"] is False and result.check_passed is False
    assert check["first_divergence"] is None
    assert check["localisation_error"] == "RuntimeError: probe build failed"
    assert "could not be located: RuntimeError: probe build failed" in \
        (failed / "report.md").read_text()


DEPTHWISE = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 16, 6, 6), float32], %weight: Tensor[(16, 1, 3, 3), float32], %w2: Tensor[(32, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%data, %weight, padding=[1, 1, 1, 1], groups=16);
  %1 = nn.relu(%0);
  nn.conv2d(%1, %w2, padding=[0, 0, 0, 0])
}
"""


def test_reference_build_reads_packed_weights_through_an_unpacking_view():
    """The plain version of a partitioned module with packed (depthwise and dense)
    conv weights builds with TVM's own legalization and computes the model."""
    import tvm
    from tvm import relax

    import bmlib_relax
    from bmlib_relax.check import plain_version
    from conftest import offloaded_partitions, run_plain

    params = {"weight": recipe_tensor("weight", (16, 1, 3, 3)),
              "w2": recipe_tensor("w2", (32, 16, 1, 1))}
    model = bmlib_relax.compile(DEPTHWISE, params)
    assert offloaded_partitions(model.relax_module)
    script = model.relax_module.script()
    assert 'kernel_layout="OIHW1i' in script and re.search(r'kernel_layout="OIHW\d+i\d+o"',
                                                          script)
    data = recipe_tensor("data", (1, 16, 6, 6), role="input")
    ex = tvm.compile(plain_version(model.relax_module), target="llvm")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    want = run_plain(bmlib_relax.import_relay(DEPTHWISE, params), [data])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model(data), want, rtol=1e-4, atol=1e-4)
