"""Converters, one module per Relay op family.

Each module registers its converters on import; the list below is the single
place that decides which families exist (tests check the registry against the
ops the goldens and the corpus use, so a family missing here fails loudly).
"""
from . import (  # noqa: F401
    activation, annotation, conv, create, dynamic, elemwise, image, indexing, layout, linear,
    loss, normalization, pooling, reduce, spatial, te_ops, tensor, vision,
)
from . import qnn  # noqa: F401  (Relay's QNN dialect, issue #18)

FAMILIES = ("activation", "annotation", "conv", "create", "dynamic", "elemwise", "image",
            "indexing", "layout", "linear", "loss", "normalization", "pooling", "qnn", "reduce",
            "spatial", "te_ops", "tensor", "vision")
