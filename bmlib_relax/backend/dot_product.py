"""Which int8 dot-product instruction a target has, and the weight layouts it reads.

An int8 convolution or matmul reduces ``group`` consecutive input channels (or
``K`` values) into each int32 accumulator lane with one instruction:

* AVX-512 VNNI: ``vpdpbusd`` — 16 int32 lanes += 4 (uint8 x int8) products.
  It multiplies *unsigned* data by *signed* weights, so int8 data is shifted
  to uint8 (``x + 128``) and ``128 * sum(w)`` subtracted per output channel:
  integer-exact, the results stay bit-exact.
* AVX-512BW / AVX2: ``vpmaddwd`` — 16 / 8 int32 lanes += 2 (int16 x int16)
  products, on operands sign- (zero-) extended to int16: exact for every
  int8/uint8 value.  ``vpmaddubsw`` (uint8 x int8 pairs into *saturating*
  int16) is not used: ``255 * 127 * 2`` overflows int16, and a saturated
  pair is a wrong answer, not a rounding difference.

Each kind is a registry entry keyed by the LLVM feature that provides it,
best first; the first feature the target has wins (as :mod:`.target` picks
the vector width).  The weight of a convolution is packed, once, at compile
time (:mod:`.rewrite`: weights are constants) to ``OIHW{ob}o{group}i``:
``[O/ob, I/group, KH, KW, ob, group]``, so an instruction's ``lanes x group``
weights are one contiguous vector load.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import tvm

from .target import resolve_target


@dataclass(frozen=True)
class DotProduct:
    """One int8 dot-product instruction family on one vector width."""

    name: str              # "vnni", "avx512_madd", "avx2_madd"
    feature: str           # the LLVM feature that provides it
    instruction: str       # what the assembly shows
    lanes: int             # int32 accumulators per instruction
    group: int             # values reduced into each lane per instruction
    # Data dtypes read as they are; "int8" data on a uint8-only instruction is
    # shifted by +128 with a per-channel compensation.
    unsigned_data: bool
    weight_dtypes: tuple[str, ...]

    def shifts(self, data_dtype: str) -> bool:
        """Whether ``data_dtype`` data is shifted to uint8 (and compensated)."""
        return self.unsigned_data and data_dtype == "int8"

    def kernel_layout(self, ob: int) -> str:
        return f"OIHW{ob}o{self.group}i"


VNNI = DotProduct("vnni", "avx512vnni", "vpdpbusd", 16, 4, True, ("int8",))
AVX512_MADD = DotProduct("avx512_madd", "avx512bw", "vpmaddwd", 16, 2, False,
                         ("int8", "uint8"))
AVX2_MADD = DotProduct("avx2_madd", "avx2", "vpmaddwd", 8, 2, False, ("int8", "uint8"))

# Best first: the first one whose feature the target has is used.
DOT_PRODUCTS: tuple[DotProduct, ...] = (VNNI, AVX512_MADD, AVX2_MADD)
DATA_DTYPES = ("int8", "uint8")

_DOT_LAYOUT = re.compile(r"OIHW(\d+)o(\d+)i")


def _has_feature(target: tvm.target.Target, feature: str) -> bool:
    try:
        return bool(tvm.target.codegen.target_has_features(feature, target))
    except Exception:  # noqa: BLE001 - a feature unknown to this LLVM backend
        return False


def target_dot_product(target: Any) -> Optional[DotProduct]:
    """The best int8 dot-product instruction of ``target`` (None: no x86 one)."""
    resolved = resolve_target(target)
    if str(resolved.kind.name) != "llvm":
        return None
    for dot in DOT_PRODUCTS:
        if _has_feature(resolved, dot.feature):
            return dot
    return None


def dot_product_for(target: Any, data_dtype: str, weight_dtype: str) -> Optional[DotProduct]:
    """The instruction for these operand dtypes on ``target``, or None (generic path)."""
    dot = target_dot_product(target)
    if dot is None or data_dtype not in DATA_DTYPES or weight_dtype not in dot.weight_dtypes:
        return None
    return dot


def output_block(dot: DotProduct, out_channels: int) -> Optional[int]:
    """Output channels per block (two instructions' lanes when they divide, else one);
    None when the channels are not whole instructions (the generic path then)."""
    if out_channels % (2 * dot.lanes) == 0:
        return 2 * dot.lanes
    if out_channels % dot.lanes == 0:
        return dot.lanes
    return None


def dot_kernel_layout(layout: str) -> Optional[tuple[int, int]]:
    """``(ob, group)`` of an ``OIHW{ob}o{group}i`` layout, else None."""
    match = _DOT_LAYOUT.fullmatch(layout)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def pack_dot_weight(weight: np.ndarray, ob: int, group: int) -> np.ndarray:
    """OIHW → ``[O/ob, I/group, KH, KW, ob, group]`` (kernel layout ``OIHW{ob}o{group}i``)."""
    o, i, kh, kw = weight.shape
    blocked = weight.reshape(o // ob, ob, i // group, group, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 1, 3))


def conv2d_dot_layout(target: Any, data_dtype: str, weight: np.ndarray, groups: int
                      ) -> Optional[tuple[int, int]]:
    """``(ob, group)`` to pack a constant OIHW conv2d weight in at compile time, or None.

    Only ``groups == 1`` convolutions whose channels are whole instruction groups
    (the layout cannot express padding: Relax checks ``I`` against the data);
    others keep OIHW and the template packs (and pads) inside the PrimFunc.
    """
    dot = dot_product_for(target, data_dtype, str(weight.dtype))
    if dot is None or groups != 1 or weight.shape[1] % dot.group:
        return None
    ob = output_block(dot, weight.shape[0])
    return None if ob is None else (ob, dot.group)


def conv2d_packs_own_weight(target: Any, data_dtype: str, weight: np.ndarray, groups: int
                            ) -> bool:
    """Whether the dot-product template takes this conv but must pack (and pad) its
    OIHW weight itself: input channels that are not whole groups (an RGB input)."""
    dot = dot_product_for(target, data_dtype, str(weight.dtype))
    return dot is not None and groups == 1 and weight.shape[1] % dot.group != 0 and \
        output_block(dot, weight.shape[0]) is not None
