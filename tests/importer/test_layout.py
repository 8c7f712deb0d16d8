"""layout_transform: permutations and blocked layouts (split and merge)."""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import ConversionError

from .helpers import check, import_text, ops_in, rand, relay_fn


@pytest.mark.parametrize("src,dst,ref,ops", [
    ("NCHW", "NHWC", lambda x: x.transpose(0, 2, 3, 1), ["relax.permute_dims"]),
    ("NCHW", "NCHW3c", lambda x: x.reshape(2, 2, 3, 4, 5).transpose(0, 1, 3, 4, 2),
     ["relax.reshape", "relax.permute_dims"]),
    ("NCHW", "NHWC2h", lambda x: x.reshape(2, 6, 2, 2, 5).transpose(0, 2, 4, 1, 3),
     ["relax.reshape", "relax.permute_dims"]),
])
def test_layout_transform(src, dst, ref, ops):
    x = rand(2, 6, 4, 5)
    text = relay_fn("%x: Tensor[(2, 6, 4, 5), float32]",
                    f'layout_transform(%x, src_layout="{src}", dst_layout="{dst}")')
    check(text, [x], ref(x))
    assert ops_in(import_text(text)) == ops


def test_layout_transform_merges_blocks_back():
    x = rand(2, 2, 4, 5, 3)  # NCHW3c
    text = relay_fn("%x: Tensor[(2, 2, 4, 5, 3), float32]",
                    'layout_transform(%x, src_layout="NCHW3c", dst_layout="NCHW")')
    check(text, [x], x.transpose(0, 1, 4, 2, 3).reshape(2, 6, 4, 5))


def test_layout_transform_pads_an_axis_its_factor_does_not_divide_with_zeros():
    """v0.19's BijectiveLayout rounded the blocked shape up (``shapediv``) and
    ``topi::layout_transform`` read zeros past the axis (``if_then_else(in_range, x, 0)``):
    C=5 in blocks of 4 is two blocks, the last with three zero channels."""
    x = rand(2, 5, 4, 4)
    text = relay_fn("%x: Tensor[(2, 5, 4, 4), float32]",
                    'layout_transform(%x, src_layout="NCHW", dst_layout="NCHW4c")')
    padded = np.pad(x, [(0, 0), (0, 3), (0, 0), (0, 0)])
    check(text, [x], padded.reshape(2, 2, 4, 4, 4).transpose(0, 1, 3, 4, 2))
    n = np.arange(20, dtype="int8").reshape(5, 4)
    check(relay_fn("%x: Tensor[(5, 4), int8]",
                   'layout_transform(%x, src_layout="NC", dst_layout="NC4n")'), [n],
          np.pad(n, [(0, 3), (0, 0)]).reshape(2, 4, 4).transpose(0, 2, 1))
    with pytest.raises(ConversionError, match="axis C is known only when the model runs"):
        import_text(relay_fn("%x: Tensor[(2, ?, 4, 4), float32]",
                             'layout_transform(%x, src_layout="NCHW", dst_layout="NCHW4c")'))


def test_layout_transform_of_a_run_time_sized_block_axis_takes_its_factor():
    # Relay computed the result shape from the layout's factor (6n): a `?` block axis is
    # checked to be 6 when the model runs, a static one must be 6 already.
    import numpy as np

    import bmlib_relax
    from bmlib_relax import RunCheckError
    from bmlib_relax.relay import parse

    text = relay_fn("%x: Tensor[(?, ?, ?, ?, ?), float32]",
                    'layout_transform(%x, src_layout="NCHW6n", dst_layout="NHWC")')
    model = bmlib_relax.compile(parse(text, "lt.relay"))
    x = rand(3, 4, 5, 2, 6)
    np.testing.assert_array_equal(
        model(x), x.transpose(0, 4, 1, 2, 3).reshape(18, 4, 5, 2).transpose(0, 2, 3, 1))
    with pytest.raises(RunCheckError, match=r"^lt.relay:3:3: layout_transform: axis 4 "
                                            r"\(6n of layout 'NCHW6n'\) has 4 entries, not 6"):
        model(rand(3, 4, 5, 2, 4))
    with pytest.raises(ConversionError, match=r"axis 4 \(6n of layout 'NCHW6n'\) has 4 "
                                              r"entries, not 6"):
        import_text(relay_fn("%x: Tensor[(1, 2, 3, 3, 4), float32]",
                             'layout_transform(%x, src_layout="NCHW6n", dst_layout="NCHW")'))
