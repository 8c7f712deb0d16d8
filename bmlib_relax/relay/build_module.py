"""``relay.build_module``: where legacy scripts imported ``bind_params_by_name`` from."""
from .params import bind_params_by_name

__all__ = ["bind_params_by_name"]


def __getattr__(name: str):
    """``build_module.build`` / ``create_executor``, as v0.19 defined them here (loaded on
    first use from :mod:`bmlib_relax.graph_executor`)."""
    if name in ("build", "create_executor"):
        from .. import graph_executor

        return getattr(graph_executor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
