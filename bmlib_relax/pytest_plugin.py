"""pytest plugin: ``pytest --bmlib-golden DIR`` verifies every golden bundle under DIR.

Registered through the ``pytest11`` entry point, so installing bmlib-relax is
enough; it adds one test item per bundle (``bmlib-golden::<path>``) and does
nothing without the option.  Each item is :func:`bmlib_relax.verify_bundle.verify_bundle`:
SHA-256s checked, compiled with bmlib, something offloaded, outputs equal to
``outputs.npz`` within the bundle's tolerance (or ``--bmlib-rtol/--bmlib-atol``);
a failure names the first diverging intermediate.

This module imports only pytest and the standard library at load time: TVM and
the compiler are imported when a bundle test runs.
"""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup("bmlib-relax", "bmlib-relax golden bundles")
    group.addoption("--bmlib-golden", action="append", default=[], metavar="DIR",
                    help="verify every golden bundle under DIR with bmlib-relax "
                         "(one test per bundle; may be repeated)")
    group.addoption("--bmlib-rtol", type=float, default=None,
                    help="override the bundles' rtol")
    group.addoption("--bmlib-atol", type=float, default=None,
                    help="override the bundles' atol")
    group.addoption("--bmlib-merge", action="store_true",
                    help="merge neighbouring composites (MergeCompositeFunctions)")


class GoldenMismatch(AssertionError):
    """A bundle whose bmlib outputs differ from its Relay outputs (or nothing offloaded)."""


class GoldenBundleItem(pytest.Item):
    """One golden bundle, verified with bmlib-relax."""

    def __init__(self, *, bundle: Path, **kwargs):
        super().__init__(**kwargs)
        self.bundle = bundle

    def runtest(self) -> None:
        from .verify_bundle import verify_bundle

        opt = self.config.getoption
        result = verify_bundle(self.bundle, rtol=opt("bmlib_rtol"), atol=opt("bmlib_atol"),
                               merge=opt("bmlib_merge"))
        self.user_properties.append(("bmlib_golden", result.to_dict()))
        if not result.ok:
            raise GoldenMismatch(result.summary())

    def repr_failure(self, excinfo, style=None):
        from .errors import BmlibError

        if isinstance(excinfo.value, (GoldenMismatch, BmlibError)):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"bmlib golden bundle {self.bundle}"


def _roots(config) -> list[Path]:
    return [Path(r).resolve() for r in config.getoption("bmlib_golden", default=None) or []]


def pytest_configure(config) -> None:
    """Collect the ``--bmlib-golden`` folders too (beside the usual test paths)."""
    for root in _roots(config):
        if not root.is_dir():
            raise pytest.UsageError(f"--bmlib-golden: bundle folder not found: {root}")
        if str(root) not in config.args:
            config.args.append(str(root))


def pytest_collect_file(file_path: Path, parent):
    """A bundle's ``manifest.json`` below a ``--bmlib-golden`` folder is one test."""
    if file_path.name != "manifest.json":
        return None
    roots = _roots(parent.config)
    if not any(file_path.is_relative_to(root) for root in roots):
        return None
    from .verify_bundle import is_bundle  # standard library + numpy only

    if not is_bundle(file_path.parent):
        return None
    return GoldenBundleFile.from_parent(parent, path=file_path)


class GoldenBundleFile(pytest.File):
    """The manifest of one bundle; collects the bundle's single test."""

    def collect(self):
        yield GoldenBundleItem.from_parent(self, name=self.path.parent.name,
                                           bundle=self.path.parent)
