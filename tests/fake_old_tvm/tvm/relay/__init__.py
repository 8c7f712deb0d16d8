"""Fake ``tvm.relay``: parse @main's signature, evaluate a few ops with numpy."""
import re
import struct

import numpy as np

import tvm
from . import transform  # noqa: F401

_PARAM = re.compile(r"%([\w.]+): Tensor\[\(([^)]*)\), (\w+)\]")
_LINE = re.compile(r"^\s*(?:%(\w+) = )?([\w.]+)\(([^)]*)\)")


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


OPS = {
    "nn.dense": lambda x, w: x @ w.T,
    "nn.bias_add": lambda x, b: x + b,
    "nn.relu": lambda x: np.maximum(x, 0),
    "nn.batch_flatten": lambda x: x.reshape(x.shape[0], -1),
    "nn.softmax": _softmax,
    "add": lambda a, b: a + b,
}


class TensorType(object):
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class Var(object):
    def __init__(self, name, shape, dtype):
        self.name_hint = name
        self.checked_type = TensorType(shape, dtype)


class Function(object):
    def __init__(self, text):
        self.text = text
        header = text[text.index("def @main("):text.index("{")]
        self.params = [Var(n, [int(d) for d in s.split(",") if d.strip()], t)
                       for n, s, t in _PARAM.findall(header)]


class Module(object):
    def __init__(self, text):
        self.text = text
        self.functions = {"main": Function(text)}
        self.typed = False

    def __getitem__(self, name):
        return self.functions[name]

    def astext(self, show_meta_data=True):
        assert show_meta_data is True, "the recorder must print #[metadata]"
        assert self.typed, "the recorder must run InferType first"
        return self.text


def fromtext(text):
    return Module(text)


class _Program(object):
    def __init__(self, module, params):
        self.module, self.params = module, params

    def evaluate(self, inputs):
        env = dict((k, np.asarray(v)) for k, v in self.params.items())
        env.update(inputs)
        body = self.module.text[self.module.text.index("{") + 1:]
        result = None
        for line in body.splitlines():
            match = _LINE.match(line)
            if not match:
                continue
            name, op, args = match.groups()
            values = [env[a.strip()[1:]] for a in args.split(",") if a.strip().startswith("%")]
            result = OPS[op](*values).astype(values[0].dtype)
            if name is not None:
                env[name] = result
        return [result]


class _Lib(object):
    def __init__(self, program):
        self._program = program

    def __getitem__(self, key):
        assert key == "default"
        return lambda dev: self._program


def build(mod, target=None, params=None):
    context = tvm.transform.PassContext.current
    tvm.CALLS.append({"build": str(target), "opt_level": context and context.opt_level,
                      "byoc": getattr(mod, "partitioned_by", None)})
    params = dict((k, v.numpy() if hasattr(v, "numpy") else np.asarray(v))
                  for k, v in (params or {}).items())
    return _Lib(_Program(mod, params))


_DTYPE_CODES = {"i": 0, "u": 1, "f": 2}


def save_param_dict(params):
    """TVM's real .params layout (what relay.save_param_dict wrote)."""
    out = [struct.pack("<QQ", 0xF7E58D4F05049CB7, 0), struct.pack("<Q", len(params))]
    for name in params:
        raw = name.encode("utf-8")
        out.append(struct.pack("<Q", len(raw)) + raw)
    out.append(struct.pack("<Q", len(params)))
    for value in params.values():
        array = np.ascontiguousarray(value.numpy())
        out.append(struct.pack("<QQiii", 0xDD5E40F096B4A13F, 0, 1, 0, array.ndim))
        out.append(struct.pack("<BBH", _DTYPE_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1))
        out.append(struct.pack("<%dq" % array.ndim, *array.shape))
        out.append(struct.pack("<q", array.nbytes) + array.tobytes())
    return bytearray(b"".join(out))


_DTYPES = {(0, 8): "int8", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
           (2, 16): "float16", (2, 32): "float32", (2, 64): "float64"}


def load_param_dict(blob):
    """Read TVM's .params layout back (what save_param_dict above writes)."""
    blob, offset = bytes(blob), 16
    (count,) = struct.unpack_from("<Q", blob, offset)
    offset += 8
    names = []
    for _ in range(count):
        (length,) = struct.unpack_from("<Q", blob, offset)
        names.append(blob[offset + 8:offset + 8 + length].decode("utf-8"))
        offset += 8 + length
    offset += 8  # the tensor count
    params = {}
    for name in names:
        _, _, _, _, ndim = struct.unpack_from("<QQiii", blob, offset)
        offset += 28
        code, bits, _ = struct.unpack_from("<BBH", blob, offset)
        offset += 4
        shape = struct.unpack_from("<%dq" % ndim, blob, offset)
        offset += 8 * ndim
        (nbytes,) = struct.unpack_from("<q", blob, offset)
        offset += 8
        params[name] = tvm.nd.array(np.frombuffer(blob[offset:offset + nbytes],
                                                  _DTYPES[(code, bits)]).reshape(shape))
        offset += nbytes
    return params
