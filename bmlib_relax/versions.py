"""Versions of the stack a model was built with (bmlib-relax, apache-tvm, LLVM).

Recorded in reports and printed by ``bmlib-relax --version``: a number that
changes between two runs is the first thing to compare.
"""
from __future__ import annotations

from . import __version__


def llvm_version() -> str:
    """LLVM's major version as TVM was built with it ("" without LLVM)."""
    import tvm

    try:
        return str(int(tvm.target.codegen.llvm_version_major()))
    except Exception:  # noqa: BLE001 - a TVM built without LLVM
        return ""


def versions() -> dict[str, str]:
    import tvm

    return {"bmlib_relax": __version__, "apache_tvm": str(tvm.__version__),
            "llvm": llvm_version()}


def version_text() -> str:
    v = versions()
    return (f"bmlib-relax {v['bmlib_relax']}\napache-tvm {v['apache_tvm']}\n"
            f"LLVM {v['llvm'] or 'none'}")
