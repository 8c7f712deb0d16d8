"""Element-wise converters: broadcasting, scalar literals, clip, cast, where."""
from __future__ import annotations

import math

import numpy as np
import pytest

from qnn_reference import round_half_away

from .helpers import check, import_text, ops_in, rand, relay_fn, run_relay

XY = "%x: Tensor[(4, 1, 3), float32], %y: Tensor[(1, 5, 3), float32]"

BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "floor_divide": np.floor_divide, "floor_mod": np.mod,
}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
           "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}
UNARY = {
    "negative": np.negative, "abs": np.abs, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "exp": np.exp, "log": np.log, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
    "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil, "tan": np.tan,
    "sin": np.sin, "cos": np.cos, "round": lambda x: round_half_away(x), "trunc": np.trunc,
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcast(op):
    x, y = rand(4, 1, 3, low=0.5, high=2), rand(1, 5, 3, seed=1, low=0.5, high=2)
    check(relay_fn(XY, f"{op}(%x, %y)"), [x, y], BINARY[op](x, y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons(op):
    x, y = rand(4, 1, 3).round(1), rand(1, 5, 3, seed=1).round(1)
    out = check(relay_fn(XY, f"{op}(%x, %y)"), [x, y], COMPARE[op](x, y))
    assert out.dtype == np.bool_


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    x = rand(3, 4, low=0.1, high=1.5)
    check(relay_fn("%x: Tensor[(3, 4), float32]", f"{op}(%x)"), [x], UNARY[op](x), rtol=1e-5,
          atol=1e-5)


def test_scalar_literal_is_a_0d_constant():
    x = rand(2, 3)
    text = relay_fn("%x: Tensor[(2, 3), float32]", "multiply(%x, 0.25f)")
    check(text, [x], x * 0.25)
    script = import_text(text)["main"].script()
    assert "R.multiply(x, R.const(0.25, \"float32\"))" in script


def test_clip_cast_where():
    x = rand(2, 8)
    check(relay_fn("%x: Tensor[(2, 8), float32]", "clip(%x, a_min=-0.5f, a_max=0.25f)"), [x],
          np.clip(x, -0.5, 0.25))
    out = check(relay_fn("%x: Tensor[(2, 8), float32]", 'cast(%x, dtype="float16")'), [x],
                x.astype("float16"))
    assert out.dtype == np.float16
    text = relay_fn("%x: Tensor[(2, 8), float32]", "%0 = greater(%x, 0f);\n  where(%0, %x, 0.5f)")
    check(text, [x], np.where(x > 0, x, 0.5))
    assert ops_in(import_text(text)) == ["relax.greater", "relax.where"]
    out = check(relay_fn("%x: Tensor[(2, 8), float32], %y: Tensor[(2), int32]", "cast_like(%x, %y)"),
                [x, np.zeros(2, "int32")], x.astype("int32"))
    assert out.dtype == np.int32


@pytest.mark.parametrize("op", ["divide", "floor_divide", "floor_mod", "mod", "trunc_mod",
                                "trunc_divide"])
@pytest.mark.parametrize("divisor", ["0", "meta_zero"])
def test_integer_division_by_a_constant_zero_is_named(op, divisor):
    # the compiled code would stop with SIGFPE when it runs; TVM's build refuses a
    # literal 0 divisor with an internal error
    from bmlib_relax import ConversionError
    body = f"{op}(%x, 0)" if divisor == "0" else f"{op}(%x, cast(%z, dtype=\"int32\"))"
    params = "%x: Tensor[(2, 3), int32]" + (", %z: Tensor[(3), int32]" if divisor != "0" else "")
    text = relay_fn(params, body)
    bound = {"z": np.array([1, 0, 2], "int32")} if divisor != "0" else None
    with pytest.raises(ConversionError, match=f"{op}: integer division by zero"):
        import_text(text, params=bound)


@pytest.mark.parametrize("op", ["divide", "floor_mod", "trunc_divide"])
def test_integer_division_by_a_nonzero_constant_imports(op):
    x = np.array([[7, -7, 6], [0, 5, -1]], "int32")
    expected = {"divide": np.trunc(x / 3).astype("int32"), "floor_mod": np.mod(x, 3),
                "trunc_divide": np.trunc(x / 3).astype("int32")}[op]
    check(relay_fn("%x: Tensor[(2, 3), int32]", f"{op}(%x, 3)"), [x], expected)


_INTEGER_QUOTIENTS = {
    "divide": lambda a, b: np.trunc(a / b), "trunc_divide": lambda a, b: np.trunc(a / b),
    "floor_divide": np.floor_divide, "floor_mod": np.mod, "mod": np.fmod, "trunc_mod": np.fmod,
}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", sorted(_INTEGER_QUOTIENTS))
def test_integer_division_by_a_run_time_zero_is_a_run_check_error(op, dtype):
    """x86's integer division traps on a 0 divisor and on MIN / -1: the process died of
    SIGFPE (as with Relay).  Now the call raises RunCheckError and the model lives on."""
    import bmlib_relax
    from bmlib_relax import RunCheckError

    model = bmlib_relax.compile(relay_fn(f"%a: Tensor[(3), {dtype}], %b: Tensor[(3), {dtype}]",
                                         f"{op}(%a, %b)"))
    a = np.array([7, -8, 9], dtype)
    with pytest.raises(RunCheckError, match=f"{op}: integer division by zero: the {dtype} "
                                            "divisor holds a 0 in this run"):
        model(a, np.array([2, 0, 3], dtype))
    lowest = np.iinfo(dtype).min
    with pytest.raises(RunCheckError, match=f"{op}: integer overflow: {lowest} divided by -1"):
        model(np.array([7, lowest, 9], dtype), np.array([2, -1, 3], dtype))
    b = np.array([2, -3, -1], dtype)
    np.testing.assert_array_equal(model(a, b), _INTEGER_QUOTIENTS[op](a, b).astype(dtype))


@pytest.mark.parametrize("op", sorted(_INTEGER_QUOTIENTS))
def test_a_weight_holding_the_minimum_over_a_run_time_minus_one_is_checked(op):
    """The dividend a bound weight: its MIN over a run-time -1 still traps (the check
    was skipped for every constant dividend, and the process died of SIGFPE)."""
    import bmlib_relax
    from bmlib_relax import RunCheckError

    lowest = np.iinfo("int32").min
    text = relay_fn("%w: Tensor[(3), int32], %b: Tensor[(3), int32]", f"{op}(%w, %b)")
    model = bmlib_relax.compile(text, {"w": np.array([7, lowest, 9], "int32")})
    with pytest.raises(RunCheckError, match=f"{op}: integer overflow: {lowest} divided by -1"):
        model(b=np.array([2, -1, 3], "int32"))
    b = np.array([2, 3, -1], "int32")
    want = _INTEGER_QUOTIENTS[op](np.array([7, lowest, 9], "int64"), b.astype("int64"))
    np.testing.assert_array_equal(model(b=b), want.astype("int32"))


def test_unsigned_division_by_a_run_time_zero_is_a_run_check_error():
    import bmlib_relax
    from bmlib_relax import RunCheckError

    model = bmlib_relax.compile(relay_fn("%a: Tensor[(2), uint8], %b: Tensor[(2), uint8]",
                                         "floor_divide(%a, %b)"))
    np.testing.assert_array_equal(model(np.array([255, 7], "uint8"), np.array([2, 7], "uint8")),
                                  [127, 1])
    with pytest.raises(RunCheckError, match="integer division by zero"):
        model(np.array([255, 7], "uint8"), np.array([0, 7], "uint8"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["mod", "trunc_mod"])
def test_float_mod_is_fmod_exactly(op, dtype):
    # Relay's mod was TVM's truncmod (LLVM frem): exact.  x - trunc(x / y) * y rounds
    # x / y first (5.3 mod 0.1 is 0.09999.. with fmod, 0 or -1e-7 through the quotient).
    x = np.array([5.3, -5.3, 1e10, 7.0, -7.5, np.inf, 2.0, -0.0], dtype)
    y = np.array([0.1, 0.1, 3.0, -2.0, 2.0, 3.0, np.inf, 1.0], dtype)
    params = f"%x: Tensor[(8), {dtype}], %y: Tensor[(8), {dtype}]"
    with np.errstate(invalid="ignore"):  # fmod(inf, 3) is NaN
        expected = np.fmod(x, y)
    check(relay_fn(params, f"{op}(%x, %y)"), [x, y], expected, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["add", "less", "logical_and", "power"])
def test_operands_of_two_dtypes_are_refused_as_relay_did(op):
    # Relay's BroadcastRel refused them; Relax would promote or take one dtype silently
    from bmlib_relax import ConversionError
    text = relay_fn("%x: Tensor[(2, 3), bool], %y: Tensor[(2, 3), float32]", f"{op}(%x, %y)")
    with pytest.raises(ConversionError, match=f"{op}: data types bool and float32 do not "
                                              "match"):
        import_text(text)


# Halves, the float just below a half, odd integers past 2**23 (where x + 0.5 itself
# rounds), signed zeros, inf and NaN.
ROUND_EDGES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 1.4999999,
               8388609.0, -8388611.0, 16777215.0, 3.4e38, 0.0, -0.0, 0.3, -0.3, np.inf,
               -np.inf, np.nan]


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_round_takes_halves_away_from_zero_as_relay(dtype):
    # v0.19 lowered Relay's round to llvm.round (C's round); TVM 0.27's round and NumPy's
    # round halves to even, so round(2.5) was 2 here and 3 in Relay.
    import bmlib_relax
    from conftest import offloaded_partitions

    with np.errstate(over="ignore"):
        x = np.array(ROUND_EDGES, dtype)
    want = round_half_away(x)
    assert want[2] == 3 and want[5] == -3  # the reference itself
    text = relay_fn(f"%x: Tensor[({x.size}), {dtype}]", "round(%x)")
    np.testing.assert_array_equal(run_relay(text, x), want)
    model = bmlib_relax.compile(text)
    if dtype != "float64":  # bmlib's templates take float16/32; float64 stays on the host
        assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    got = model(x=x)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want), equal_nan=True)


def test_round_of_a_constant_is_folded_as_relay_rounds():
    import bmlib_relax
    from bmlib_relax import relay

    x = relay.var("x", shape=(4,))
    const = relay.const(np.array([2.5, -0.5, 0.5, -3.5], "float32"))
    model = bmlib_relax.compile(relay.IRModule.from_expr(
        relay.Function([x], relay.add(x, relay.round(const)))))
    np.testing.assert_array_equal(model(x=np.zeros(4, "float32")), [3, -1, 1, -4])


def test_round_of_integers_is_the_identity():
    x = np.array([-3, 0, 7], "int32")
    out = run_relay(relay_fn("%x: Tensor[(3), int32]", "round(%x)"), x)
    np.testing.assert_array_equal(out, x)
    assert out.dtype == np.int32


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_unsigned_negative_and_mod_wrap_as_relay(dtype):
    # v0.19: negative is 0 - x (wrapping), mod is truncmod; TVM 0.27 could not build either
    # for unsigned types (a -1 constant), and simplified 0 - x of a uint32 to 0.
    import bmlib_relax

    a = np.array([1, 0, 5, 200, 7, 3], dtype)
    b = np.array([2, 1, 4, 100, 7, 9], dtype)
    params = f"%a: Tensor[(6), {dtype}], %b: Tensor[(6), {dtype}]"
    model = bmlib_relax.compile(relay_fn(params, "(negative(%a), mod(%a, %b))"))
    neg, mod = model(a=a, b=b)
    np.testing.assert_array_equal(neg, (2 ** (8 * a.itemsize) - a.astype(object)) % 2 ** (8 * a.itemsize))
    np.testing.assert_array_equal(mod, a % b)
    assert neg.dtype == mod.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype, bounds, name", [("int8", "-200f, 6f", "a_min=-200"),
                                                 ("uint8", "-1f, 200f", "a_min=-1"),
                                                 ("uint8", "0f, 300f", "a_max=300")])
def test_clip_bounds_outside_an_integer_type_are_named(dtype, bounds, name):
    from bmlib_relax import ConversionError

    low, high = bounds.split(", ")
    text = relay_fn(f"%x: Tensor[(3), {dtype}]", f"clip(%x, a_min={low}, a_max={high})")
    with pytest.raises(ConversionError, match=rf"snippet.relay:3:3: clip: {name} does not fit "
                                              rf"the input's type {dtype}"):
        import_text(text)


def test_clip_of_integers_with_fractional_bounds_inside_the_type_runs():
    x = np.array([-128, -3, 0, 5, 127], "int8")
    text = relay_fn("%x: Tensor[(5), int8]", "clip(%x, a_min=-3.5f, a_max=4.5f)")
    np.testing.assert_array_equal(run_relay(text, x), np.clip(x, -3, 4))


def test_power_of_integers_is_refused_as_relay_did():
    from bmlib_relax import ConversionError

    text = relay_fn("%a: Tensor[(3), int32], %b: Tensor[(3), int32]", "power(%a, %b)")
    with pytest.raises(ConversionError, match=r"power: power of int32 tensors: Relay's power "
                                              r"takes floats only"):
        import_text(text)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons_of_bool_tensors_as_relay(op):
    # Relay's bool is uint1: its comparisons are unsigned integer ones (True > False)
    import bmlib_relax

    a = np.array([1, 0, 1, 1, 0, 0], bool)
    b = np.array([1, 1, 0, 1, 0, 1], bool)
    text = relay_fn("%a: Tensor[(6), bool], %b: Tensor[(6), bool]", f"{op}(%a, %b)")
    out = bmlib_relax.compile(text)(a=a, b=b)
    np.testing.assert_array_equal(out, COMPARE[op](a.astype(int), b.astype(int)))
    assert out.dtype == np.bool_


@pytest.mark.parametrize("dtype", ["int32", "float32", "uint8"])
def test_where_takes_a_condition_of_any_dtype_as_relay(dtype):
    # Relay's WhereRel accepted any condition dtype; topi's where selects where c != 0
    c = np.array([0, 2, 1, 0, 3], dtype)
    x, y = rand(5), rand(5, seed=1)
    text = relay_fn(f"%c: Tensor[(5), {dtype}], %x: Tensor[(5), float32], "
                    "%y: Tensor[(5), float32]", "where(%c, %x, %y)")
    check(text, [c, x, y], np.where(c != 0, x, y), rtol=0, atol=0)


@pytest.mark.parametrize("zero_shape", [(), (2, 4)])
def test_unsigned_zero_minus_x_wraps(zero_shape):
    # TVM 0.27's simplifier took 0 - x of a uint32 for 0: every result was 0
    import bmlib_relax
    from bmlib_relax import relay

    x = relay.var("x", shape=(4,), dtype="uint32")
    zero = np.zeros(zero_shape, "uint32")
    model = bmlib_relax.compile(relay.IRModule.from_expr(
        relay.Function([x], relay.subtract(relay.const(zero), x))))
    a = np.array([0, 1, 5, 7], "uint32")
    np.testing.assert_array_equal(model(x=a), zero - a)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("on_bmlib", [True, False])
def test_cast_of_nan_to_bool_is_false_as_v019(dtype, on_bmlib):
    """v0.19's LLVM codegen cast a float to bool with the ordered ``x != 0``
    (``CreateFCmpONE``): NaN is False.  TVM 0.27's cast gives True."""
    import bmlib_relax
    from conftest import offloaded_partitions

    text = relay_fn(f"%w: Tensor[(5), {dtype}]", 'cast(%w, dtype="bool")')
    w = np.array([np.nan, 0.0, -0.0, 2.0, -np.inf], dtype)
    model = bmlib_relax.compile(text, **({} if on_bmlib else {"patterns": []}))
    # bmlib's comparisons take float32 and float16: float64 stays on the host either way
    assert bool(offloaded_partitions(model.relax_module)) == (on_bmlib and dtype != "float64")
    np.testing.assert_array_equal(model(w=w), [False, False, False, True, True])


def test_folded_cast_of_a_nan_weight_to_bool_is_false():
    """The weight folder's ``astype`` (a cast another converter emitted over a weight)
    computes the same as the run-time cast."""
    import tvm
    from tvm.script import relax as R

    from bmlib_relax.backend.fold import fold_constants
    from bmlib_relax.backend.rewrite import const_array

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((3,), "bool")) -> R.Tensor((3,), "bool"):
            w = R.const(np.array([np.nan, 0.0, 3.0], "float32"))
            return R.logical_or(x, R.astype(w, "bool"))

    folded = fold_constants(Mod)["main"]
    consts = []
    tvm.relax.analysis.post_order_visit(
        folded, lambda e: consts.append(const_array(e)) if const_array(e) is not None else None)
    assert [c.tolist() for c in consts] == [[False, False, True]]
