"""``MergeCompositeFunctions`` for every Relax function of a module, not only ``main``.

TVM's pass merges the composite calls of the function named ``main`` and fails
(``Variable ... could not be found in any group``) as soon as that function
calls another Relax function -- a Relay global imported as a Relax global
function, a lifted loop.  Here each function is merged on its own: its calls of
other Relax functions are hidden behind placeholders (``call_tir`` of an empty
stub PrimFunc: an opaque host op to the pass), the function is merged as
``main`` of a module of its own, and the calls are put back.  A function the
pass cannot take -- one with control flow (``If``), with a run check the importer
compiled in (``assert_op``), or calling a function with non-tensor arguments or
results (nested tuples) that no placeholder can stand for -- gets one partition per
composite call instead, as without merging.  The
partitions each function gets keep the names TVM gives them, made unique across
the module (``global_symbol`` too: the codegen's symbols are those names).
"""
from __future__ import annotations

from typing import Optional

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..errors import CodegenError

_PLACEHOLDER = "__bmlib_merge_call_"


def _is_plain(func) -> bool:
    """A Relax function that is neither a partition nor a composite."""
    return isinstance(func, relax.Function) and (
        func.attrs is None or ("Codegen" not in func.attrs and "Composite" not in func.attrs))


def _is_composite(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and \
        "Composite" in func.attrs


@mutator
class _HideCalls(PyExprMutator):
    """Calls of the module's plain functions -> ``call_tir`` placeholders."""

    def __init__(self, plain: set):
        super().__init__()
        self.plain = plain
        self.hidden: dict[str, relax.GlobalVar] = {}
        # Placeholder callees: empty PrimFuncs (call_tir wants a typed TIR callee).
        self.stubs = relax.BlockBuilder()
        self.stub_vars: dict[str, relax.GlobalVar] = {}

    def _stub(self, symbol: str) -> relax.GlobalVar:
        if symbol not in self.stub_vars:
            # The symbol as an attribute keeps stubs distinct: the BlockBuilder returns
            # the existing GlobalVar for a structurally equal function.
            stub = tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(0)).with_attr("global_symbol",
                                                                          symbol)
            self.stub_vars[symbol] = self.stubs.add_func(stub, symbol)
            if self.stub_vars[symbol].name_hint != symbol:  # would restore the wrong call
                raise CodegenError(f"merge: placeholder {symbol} was renamed to "
                                   f"{self.stub_vars[symbol].name_hint}")
        return self.stub_vars[symbol]

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, relax.GlobalVar) or call.op.name_hint not in self.plain:
            return call
        symbol = f"{_PLACEHOLDER}{call.op.name_hint}"
        self.hidden[symbol] = call.op
        ty = call.ty
        out = list(ty.fields) if isinstance(ty, relax.TupleType) else ty
        return relax.op.call_tir(self._stub(symbol), relax.Tuple(list(call.args)), out)


@mutator
class _RestoreCalls(PyExprMutator):
    """Placeholders back to calls of their functions; merged partitions renamed."""

    def __init__(self, hidden: dict, renamed: dict):
        super().__init__()
        self.hidden = hidden
        self.renamed = renamed

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if isinstance(call.op, relax.GlobalVar) and call.op.name_hint in self.renamed:
            return relax.Call(self.renamed[call.op.name_hint], call.args, call.attrs,
                              call.ty_args, call.span)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" and \
                isinstance(call.args[0], relax.GlobalVar) and \
                call.args[0].name_hint in self.hidden:
            return relax.Call(self.hidden[call.args[0].name_hint], list(call.args[1].fields),
                              span=call.span)
        return call


def _unique(name: str, taken: set) -> str:
    candidate, index = name, 0
    while candidate in taken:
        index += 1
        candidate = f"{name}_{index}"
    taken.add(candidate)
    return candidate


def _is_tensor(ty) -> bool:
    """A tensor of known shape (what ``call_tir`` can allocate)."""
    return isinstance(ty, relax.TensorType) and ty.shape is not None


def _unmergeable(func: relax.Function, plain: set) -> bool:
    """Control flow, a call of a plain function a ``call_tir`` cannot stand for, or a run
    check (``assert_op``: TVM's pass has no rule for its format string, "Do not have a
    default for ir.StringImm")."""
    found = []

    def visit(expr):
        if isinstance(expr, relax.If) or (
                isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and
                expr.op.name == "relax.assert_op"):
            found.append(expr)
        elif isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and \
                expr.op.name_hint in plain:
            ty = expr.ty
            outs = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
            if not outs or not all(_is_tensor(t) for t in outs) or \
                    not all(_is_tensor(a.ty) for a in expr.args):
                found.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return bool(found)


@mutator
class _OnePartitionPerComposite(PyExprMutator):
    """Calls of composites -> calls of one-composite partitions (what FuseOpsByPattern
    makes with ``annotate_codegen=True``), for a function the merge cannot take."""

    def __init__(self, composites: dict, codegen: str, taken: set, namer: relax.BlockBuilder,
                 out: dict):
        super().__init__()
        self.composites = composites
        self.codegen = codegen
        self.taken = taken
        self.namer = namer
        self.out = out
        self.wrappers: dict = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, relax.GlobalVar):
            return call
        composite = self.composites.get(call.op)
        if composite is None:
            return call
        if call.op not in self.wrappers:
            name = _unique("fused_" + str(composite.attrs["Composite"]).replace(".", "_")
                           + "_" + self.codegen, self.taken)
            params = [relax.Var(p.name, p.ty) for p in composite.params]
            local = composite.without_attr("global_symbol") \
                if "global_symbol" in composite.attrs else composite
            builder = relax.BlockBuilder()
            with builder.function(name, params, attrs={"Codegen": self.codegen,
                                                       "global_symbol": name}):
                inner = builder.emit(local, "local_func")
                result = builder.emit(relax.Call(inner, params), "output")
                builder.emit_func_output(result)
            wrapper = builder.get()[name]
            gv = self.namer.add_func(wrapper, name)
            self.out[gv] = wrapper
            self.wrappers[call.op] = gv
        return relax.Call(self.wrappers[call.op], call.args, span=call.span)


def merge_composites(mod: tvm.IRModule, codegen: str = "bmlib") -> tvm.IRModule:
    """``MergeCompositeFunctions`` applied to every plain Relax function of ``mod``.

    A function the pass cannot take (see the module doc) gets one partition per
    composite call instead (unmerged, as with ``merge=False``).
    """
    plain = {gv.name_hint: gv for gv, f in mod.functions.items() if _is_plain(f)}
    if set(plain) <= {"main"} and not any(_unmergeable(mod[gv], set(plain))
                                          for gv in plain.values()):
        return split_oversized_partitions(relax.transform.MergeCompositeFunctions()(mod),
                                          codegen)
    composites = {gv: f for gv, f in mod.functions.items() if _is_composite(f)}
    others = {gv: f for gv, f in mod.functions.items()
              if gv.name_hint not in plain and gv not in composites}
    taken = {gv.name_hint for gv in mod.functions if gv not in composites}
    out: dict = dict(others)
    namer = relax.BlockBuilder()
    for name, gv in plain.items():
        if _unmergeable(mod[gv], set(plain)):
            unmerged = _OnePartitionPerComposite(composites, codegen, taken, namer, out)
            out[gv] = unmerged.visit_expr(mod[gv])
            continue
        hide = _HideCalls(set(plain))
        func = hide.visit_expr(mod[gv])
        entry = relax.GlobalVar("main")
        merged = relax.transform.MergeCompositeFunctions()(
            tvm.IRModule({entry: func, **composites, **{v: hide.stubs.get()[v]
                                                        for v in hide.stub_vars.values()}}))
        renamed = {}
        for new_gv, new_func in merged.functions.items():
            if new_gv.name_hint == "main" or _is_composite(new_func) or \
                    new_gv.name_hint in hide.hidden:
                continue
            fresh = _unique(new_gv.name_hint, taken)
            if fresh == new_gv.name_hint:
                out[new_gv] = new_func
                continue
            if new_func.attrs is not None and "global_symbol" in new_func.attrs:
                new_func = new_func.with_attr("global_symbol", fresh)
            target = namer.add_func(new_func, fresh)  # a typed GlobalVar
            renamed[new_gv.name_hint] = target
            out[target] = new_func
        body = _RestoreCalls(hide.hidden, renamed).visit_expr(merged["main"])
        out[gv] = body
    # The composites are inside the partitions now (dropped, as TVM's pass does).
    result = tvm.IRModule(out, attrs=mod.attrs)
    return split_oversized_partitions(relax.transform.Normalize()(result), codegen)



#: Most composite calls one merged partition keeps.  A partition is one PrimFunc, and
#: scheduling it and LLVM's code generation take time that grows faster than linearly
#: with its size: 160 merged dense+relu layers spent 12 s in LLVM alone (80 layers 2.7 s),
#: and a 35-step unrolled LSTM did not build in 11 minutes.  Chunks of this many
#: composites keep nearly all of merging's saving in partition calls.
MAX_COMPOSITES_PER_PARTITION = 32


def _local_calls(value, local_funcs) -> int:
    return int(isinstance(value, relax.Call) and isinstance(value.op, relax.Var) and
               value.op in local_funcs)


def _free_vars(expr) -> list:
    """The variables ``expr`` reads, in order of first use (functions included)."""
    seen: list = []

    def visit(node):
        if isinstance(node, relax.Var) and node not in seen:
            seen.append(node)

    relax.analysis.post_order_visit(expr, visit)
    return seen


class _Chunk:
    """A run of a partition's bindings that becomes a partition of its own."""

    def __init__(self):
        self.bindings: list = []
        self.defined: set = set()
        self.inputs: list = []  # variables read from the partition's params or earlier chunks
        self.outputs: list = []  # variables later chunks or the result read
        self.func_defs: list = []  # the local composite functions it calls


def _chunk_partition(func: relax.Function, limit: int) -> Optional[list]:
    """Split ``func``'s bindings into chunks of at most ``limit`` composite calls, or None
    when it has no more than that (or a form this does not take apart)."""
    body = func.body
    if not isinstance(body, relax.SeqExpr) or not all(
            isinstance(v, relax.Var) for v in _result_vars(body.body)):
        return None
    bindings = [b for block in body.blocks for b in block.bindings]
    if not all(isinstance(b, relax.VarBinding) for b in bindings):
        return None
    defs = {b.var: b for b in bindings if isinstance(b.value, relax.Function)}
    work = [b for b in bindings if b.var not in defs]
    calls_of = [_local_calls(b.value, defs) for b in work]
    if sum(calls_of) <= limit:
        return None
    chunks = [_Chunk()]
    chunk_of: dict = {}
    count = 0
    for binding, calls in zip(work, calls_of):
        if calls and count + calls > limit:
            chunks.append(_Chunk())
            count = 0
        count += calls
        value = binding.value
        # A projection goes with its tuple (split's results): chunks pass tensors only.
        home = chunk_of.get(value.tuple_value, -1) \
            if isinstance(value, relax.TupleGetItem) else -1
        chunks[home].bindings.append(binding)
        chunks[home].defined.add(binding.var)
        chunk_of[binding.var] = home % len(chunks)
    later_reads: list = _free_vars(body.body)
    for chunk in reversed(chunks):
        chunk.outputs = [v for v in later_reads if v in chunk.defined]
        reads = []
        for binding in chunk.bindings:
            reads += [v for v in _free_vars(binding.value) if v not in reads]
        chunk.func_defs = [defs[v] for v in reads if v in defs]
        chunk.inputs = [v for v in reads if v not in chunk.defined and v not in defs]
        later_reads += [v for v in chunk.inputs if v not in later_reads]
    if not all(chunk.outputs for chunk in chunks):  # dead bindings: leave it whole
        return None
    if not all(_is_tensor(v.ty) for chunk in chunks for v in chunk.outputs):
        return None  # a tuple read whole across chunks: no partition output can carry it
    return chunks


def _result_vars(result) -> list:
    return list(result.fields) if isinstance(result, relax.Tuple) else [result]


def _chunk_function(chunk: _Chunk, attrs: dict) -> relax.Function:
    outputs = chunk.outputs
    if len(outputs) == 1:
        result, ret_ty = outputs[0], outputs[0].ty
    else:
        result, ret_ty = relax.Tuple(outputs), relax.TupleType([v.ty for v in outputs])
    block = relax.BindingBlock(chunk.func_defs + chunk.bindings)
    func = relax.Function(chunk.inputs, relax.SeqExpr([block], result), ret_ty)
    func = func.with_attrs(attrs)
    # Fresh variables: the chunks' params are variables another chunk binds.
    return relax.utils.copy_with_new_vars(func)


@mutator
class _CallChunks(PyExprMutator):
    """Calls of a split partition -> calls of its chunks, one after another."""

    def __init__(self, split: dict):
        super().__init__()
        self.split = split  # GlobalVar of the partition -> (params, chunks, result expr)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        entry = self.split.get(call.op) if isinstance(call.op, relax.GlobalVar) else None
        if entry is None:
            return call
        params, chunks, result = entry
        env = dict(zip(params, call.args))
        for chunk, chunk_gv in chunks:
            value = self.builder_.emit(relax.Call(chunk_gv, [env[v] for v in chunk.inputs],
                                                  span=call.span))
            if len(chunk.outputs) == 1:
                env[chunk.outputs[0]] = value
            else:
                for i, var in enumerate(chunk.outputs):
                    env[var] = self.builder_.emit(relax.TupleGetItem(value, i))
        if isinstance(result, relax.Tuple):
            return relax.Tuple([env[v] for v in result.fields])
        return env[result]


def split_oversized_partitions(mod: tvm.IRModule, codegen: str = "bmlib",
                               limit: Optional[int] = None) -> tvm.IRModule:
    """Split every ``codegen`` partition of more than ``limit`` composite calls into
    consecutive partitions of at most ``limit`` (see :data:`MAX_COMPOSITES_PER_PARTITION`);
    the values one chunk hands the next are its outputs."""
    limit = MAX_COMPOSITES_PER_PARTITION if limit is None else limit
    taken = {gv.name_hint for gv in mod.functions}
    namer = relax.BlockBuilder()
    split: dict = {}
    out: dict = {}
    for gv, func in mod.functions.items():
        is_partition = isinstance(func, relax.Function) and func.attrs is not None and \
            str(func.attrs.get("Codegen", "")) == codegen
        if is_partition:
            # Var-to-var bindings (``gv = lv``) would make one value two chunk outputs.
            func = relax.transform.CanonicalizeBindings()(tvm.IRModule({gv: func}))[gv]
        chunks = _chunk_partition(func, limit) if is_partition else None
        if chunks is None:
            out[gv] = func
            continue
        called = []
        # TVM names a merged partition by all its ops: keep a readable prefix.
        base = gv.name_hint if len(gv.name_hint) <= 96 else gv.name_hint[:96].rstrip("_")
        for i, chunk in enumerate(chunks):
            name = _unique(f"{base}_part{i}", taken)
            attrs = {str(k): v for k, v in func.attrs.items()}
            attrs["global_symbol"] = name
            chunk_func = _chunk_function(chunk, attrs)
            chunk_gv = namer.add_func(chunk_func, name)
            out[chunk_gv] = chunk_func
            called.append((chunk, chunk_gv))
        split[gv] = (list(func.params), called, func.body.body)
    if not split:
        return mod
    caller = _CallChunks(split)
    for gv, func in list(out.items()):
        if isinstance(func, relax.Function):
            out[gv] = caller.visit_expr(func) if _calls_any(func, split) else func
    return relax.transform.Normalize()(tvm.IRModule(out, attrs=mod.attrs))


def _calls_any(func: relax.Function, split: dict) -> bool:
    found = []
    relax.analysis.post_order_visit(
        func, lambda e: found.append(e) if isinstance(e, relax.GlobalVar) and e in split
        else None)
    return bool(found)
