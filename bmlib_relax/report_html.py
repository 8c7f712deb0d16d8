"""``report.html``: a picture of the offload, one self-contained file.

The graph is ``main`` of the partitioned module: one box per bmlib partition call
(coloured per partition, labelled with its composites, ``params -> PrimFunc
args`` and FLOPs), one grey box per op left on the host with the reason it
stayed, the inputs and the output.  It is drawn as an inline SVG with a simple
layered layout written here (no Graphviz, no script, no network): layers by
longest path from the inputs, top to bottom, nodes ordered in each layer by the
mean position of their predecessors (barycentre sweeps).  Graphs with more than
:data:`COLLAPSE_ABOVE` nodes have every long chain (one input, one output per
node) folded into a single box that says what it holds, so 500+-op models stay
readable.
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import tvm
from tvm import relax

from .dims import dim_or_text

COLLAPSE_ABOVE = 80   # nodes; smaller graphs are drawn in full
MIN_CHAIN = 4         # a chain this long (or longer) keeps its ends, the middle folds
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7",
            "#9c755f", "#e15759", "#86bcb6", "#8cd17d", "#d4a6c8")
_HOST, _IO = "#d9d9d9", "#ffffff"
_CHAR_W, _LINE_H, _PAD, _GAP_X, _GAP_Y, _BULGE = 6.6, 14, 8, 24, 46, 60


@dataclass
class Node:
    id: int
    kind: str  # "partition" | "host" | "input" | "output" | "other" | "chain"
    lines: list[str]
    color: str
    tooltip: str = ""
    members: list[int] = field(default_factory=list)  # folded nodes (kind "chain")
    binding: str = ""  # the var of main this node computes
    binding_index: int = -1  # its place among main's tensor bindings (check.py's "index")
    diverged: bool = False  # the first intermediate where bmlib and plain builds part

    @property
    def width(self) -> float:
        return max(len(s) for s in self.lines) * _CHAR_W + 2 * _PAD

    @property
    def height(self) -> float:
        return len(self.lines) * _LINE_H + _PAD


@dataclass
class Graph:
    nodes: dict[int, Node] = field(default_factory=dict)
    edges: list[tuple[int, int]] = field(default_factory=list)

    def add(self, kind: str, lines: list[str], color: str, tooltip: str = "") -> int:
        node_id = len(self.nodes)
        self.nodes[node_id] = Node(node_id, kind, lines, color, tooltip)
        return node_id


# --------------------------------------------------------------------------- graph
def _short(name: str) -> str:
    return name[len("relax."):] if name.startswith("relax.") else name


def _si(value: int) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return str(value)


def build_graph(partitioned: tvm.IRModule, partitions: list[Mapping[str, Any]],
                table: Optional[Sequence[Any]] = None) -> Graph:
    """The call graph of ``main``: partitions, host ops (with the reason each stayed on
    the host, :mod:`.backend.host_reasons`, against the pattern ``table`` used:
    default the built-in one), inputs and the output."""
    from .backend.codegen import is_bmlib_partition
    from .backend.host_reasons import host_reason
    from .backend.partition import resolve_patterns

    table = resolve_patterns(None) if table is None else table
    var2val = relax.analysis.get_var2val(partitioned["main"])
    info = {p["name"]: p for p in partitions}
    colors = {p["name"]: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(partitions)}
    graph = Graph()
    main = partitioned["main"]
    source: dict[relax.Var, list[int]] = {}  # var -> the node(s) producing it
    for param in main.params:
        ty = param.ty
        dims = getattr(getattr(ty, "shape", None), "values", None) or []
        shape = "x".join(str(dim_or_text(d)) for d in dims)
        source[param] = [graph.add("input", [f"input {param.name}", f"{shape} {ty.dtype}"], _IO)]

    def producers(expr) -> list[int]:
        found: list[int] = []
        for var in relax.analysis.free_vars(expr):
            for node in source.get(var, []):
                if node not in found:
                    found.append(node)
        return found

    tensor_index = -1
    for block in main.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.var.ty, relax.TensorType):
                tensor_index += 1
            value, preds = binding.value, producers(binding.value)
            node = None
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                name = value.op.name_hint
                func = partitioned[value.op]
                if is_bmlib_partition(func) and name in info:
                    p = info[name]
                    node = graph.add("partition", [
                        ", ".join(p["composites"]),
                        f"{p['num_params']} params -> {p['num_args']} args, "
                        f"{_si(p.get('flops', 0))} FLOPs"], colors[name],
                        f"{name}\nops: {' '.join(_short(o) for o in p['ops'])}")
                else:
                    node = graph.add("other", [f"call {name}"], _HOST, name)
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                reason = host_reason(value, table, var2val).detail
                node = graph.add("host", [f"host: {_short(value.op.name)}", reason], _HOST,
                                 f"{binding.var.name} = {value.op.name}\nstayed on the host: "
                                 f"{reason}")
            if node is None:  # tuples, tuple items, aliases: pass their producers through
                source[binding.var] = preds
                continue
            graph.edges += [(p, node) for p in preds]
            graph.nodes[node].binding = binding.var.name
            graph.nodes[node].binding_index = tensor_index
            source[binding.var] = [node]
    out = graph.add("output", ["output"], _IO)
    graph.edges += [(p, out) for p in producers(main.body.body)]
    return graph


def collapse_chains(graph: Graph, min_chain: int = MIN_CHAIN) -> Graph:
    """Fold the middle of every chain of ``min_chain`` or more single-in/single-out
    nodes into one box that counts what it holds."""
    succ: dict[int, list[int]] = {n: [] for n in graph.nodes}
    pred: dict[int, list[int]] = {n: [] for n in graph.nodes}
    for a, b in graph.edges:
        succ[a].append(b)
        pred[b].append(a)

    def linear(n: int) -> bool:
        return graph.nodes[n].kind in ("partition", "host", "other") and \
            len(pred[n]) == 1 and len(succ[n]) == 1

    folded: dict[int, int] = {}
    result = Graph()
    keep: dict[int, int] = {}
    visited: set[int] = set()
    chains: list[list[int]] = []
    for n in graph.nodes:  # nodes are numbered in binding order
        if n in visited or not linear(n) or graph.nodes[n].diverged or (linear(pred[n][0]) and
                                             succ[pred[n][0]] == [n]):
            continue
        chain = [n]
        while succ[chain[-1]] and linear(succ[chain[-1]][0]) and \
                pred[succ[chain[-1]][0]] == [chain[-1]] and \
                not graph.nodes[succ[chain[-1]][0]].diverged:
            chain.append(succ[chain[-1]][0])
        visited.update(chain)
        if len(chain) >= min_chain:
            chains.append(chain)
    middles = {}
    for chain in chains:
        for m in chain[1:-1]:
            middles[m] = chain
    for n, node in graph.nodes.items():
        if n in middles:
            chain = middles[n]
            if n != chain[1]:
                folded[n] = folded[chain[1]]
                continue
            inner = [graph.nodes[m] for m in chain[1:-1]]
            kinds = Counter("bmlib" if x.kind == "partition" else "host" for x in inner)
            lines = [f"{len(inner)} nodes folded (a chain)",
                     ", ".join(f"{v} on {k}" for k, v in sorted(kinds.items()))]
            color = inner[0].color if len({x.color for x in inner}) == 1 else "#c7c7e8"
            tooltip = "\n".join(" | ".join(x.lines) for x in inner[:40]) + (
                f"\n... and {len(inner) - 40} more" if len(inner) > 40 else "")
            new = result.add("chain", lines, color, tooltip)
            result.nodes[new].members = list(chain[1:-1])
            folded[n] = new
            continue
        keep[n] = result.add(node.kind, node.lines, node.color, node.tooltip)
        result.nodes[keep[n]].binding = node.binding
        result.nodes[keep[n]].binding_index = node.binding_index
        result.nodes[keep[n]].diverged = node.diverged
    mapping = {**keep, **folded}
    seen = set()
    for a, b in graph.edges:
        edge = (mapping[a], mapping[b])
        if edge[0] != edge[1] and edge not in seen:
            seen.add(edge)
            result.edges.append(edge)
    return result


# --------------------------------------------------------------------------- layout
def layout(graph: Graph) -> tuple[dict[int, tuple[float, float]], float, float, dict[int, int]]:
    """Top-left corner of every node, the drawing's width and height, and each
    node's layer."""
    preds: dict[int, list[int]] = {n: [] for n in graph.nodes}
    for a, b in graph.edges:
        preds[b].append(a)
    succs: dict[int, list[int]] = {n: [] for n in graph.nodes}
    for a, b in graph.edges:
        succs[a].append(b)
    level: dict[int, int] = {}
    for n in sorted(graph.nodes):  # ids follow a topological (binding) order
        level[n] = 1 + max((level[p] for p in preds[n]), default=-1)
    for n in graph.nodes:  # a source (input, weight) sits just above its first consumer
        if not preds[n] and succs[n]:
            level[n] = max(0, min(level[s] for s in succs[n]) - 1)
    layers: dict[int, list[int]] = {}
    for n in sorted(graph.nodes):
        layers.setdefault(level[n], []).append(n)
    order = {n: i for layer in layers.values() for i, n in enumerate(layer)}
    for _ in range(2):  # barycentre sweeps, top to bottom
        for depth in sorted(layers)[1:]:
            layer = layers[depth]
            layer.sort(key=lambda n: (sum(order[p] for p in preds[n]) / len(preds[n])
                                      if preds[n] else order[n]))
            order.update({n: i for i, n in enumerate(layer)})
    widths = {d: sum(graph.nodes[n].width for n in layer) + _GAP_X * (len(layer) - 1)
              for d, layer in layers.items()}
    total_w = max(widths.values(), default=0) + 2 * _GAP_X + _BULGE
    pos: dict[int, tuple[float, float]] = {}
    y = _GAP_X
    for depth in sorted(layers):
        x = (total_w - _BULGE - widths[depth]) / 2
        row_h = max(graph.nodes[n].height for n in layers[depth])
        for n in layers[depth]:
            pos[n] = (x, y + (row_h - graph.nodes[n].height) / 2)
            x += graph.nodes[n].width + _GAP_X
        y += row_h + _GAP_Y
    return pos, total_w, y, level


def render_svg(graph: Graph) -> str:
    pos, width, height, level = layout(graph)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
           '</defs>']
    for a, b in graph.edges:
        na, nb = graph.nodes[a], graph.nodes[b]
        x1, y1 = pos[a][0] + na.width / 2, pos[a][1] + na.height
        x2, y2 = pos[b][0] + nb.width / 2, pos[b][1]
        if level[b] - level[a] > 1:  # a long edge bows out right, clear of the nodes between
            side = max(na.width, nb.width) / 2 + _BULGE / 2
            path = (f"M{x1:.1f},{y1:.1f} C{x1 + side:.1f},{y1 + _GAP_Y:.1f} "
                    f"{x2 + side:.1f},{y2 - _GAP_Y:.1f} {x2:.1f},{y2:.1f}")
        else:
            mid = (y1 + y2) / 2
            path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}"
        out.append(f'<path class="edge" d="{path}" fill="none" stroke="#555" '
                   'marker-end="url(#arrow)"/>')
    for n, node in graph.nodes.items():
        x, y = pos[n]
        dash = ' stroke-dasharray="4,2"' if node.kind in ("host", "other") else ""
        if node.diverged:
            dash += ' stroke-width="4" stroke="#d62728"'
        stroke = "" if node.diverged else ' stroke="#333"'
        rx = 12 if node.kind in ("input", "output") else 3
        text_color = "#fff" if node.kind == "partition" else "#000"
        kind = f"{node.kind} diverged" if node.diverged else node.kind
        out.append(f'<g class="node {kind}"><title>{html.escape(node.tooltip or " ".join(node.lines))}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{node.width:.1f}" '
                   f'height="{node.height:.1f}" rx="{rx}" fill="{node.color}"{stroke}{dash}/>')
        for i, line in enumerate(node.lines):
            out.append(f'<text x="{x + _PAD:.1f}" y="{y + _PAD / 2 + (i + 0.8) * _LINE_H:.1f}" '
                       f'fill="{text_color}">{html.escape(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


# --------------------------------------------------------------------------- page
def render_html(partitioned: tvm.IRModule, data: Mapping[str, Any],
                collapse_above: int = COLLAPSE_ABOVE,
                table: Optional[Sequence[Any]] = None) -> str:
    """The whole page: summary, legend, graph, partition and host-op tables."""
    graph = build_graph(partitioned, list(data.get("partitions", [])), table)
    divergence = (data.get("check") or {}).get("first_divergence")
    if divergence:
        index = divergence.get("index")
        for node in graph.nodes.values():  # binding names repeat; check.py's index does not
            if (node.binding_index == index) if index is not None else \
                    (node.binding == divergence.get("binding")):
                node.diverged = True
                node.lines = node.lines + [f"first divergence: {node.binding} "
                                           f"(max abs {divergence.get('max_abs', 0):.3g})"]
    full_size = len(graph.nodes)
    reasons = Counter((n.lines[0][len("host: "):], n.lines[1]) for n in graph.nodes.values()
                      if n.kind == "host")
    if full_size > collapse_above:
        graph = collapse_chains(graph)
    esc = html.escape
    parts = data.get("partitions", [])
    offloaded, host = sum(data.get("ops_offloaded", {}).values()), sum(
        data.get("ops_host", {}).values())
    rows = "".join(
        f'<tr><td><span class="sw" style="background:{_PALETTE[i % len(_PALETTE)]}"></span>'
        f'<code>{esc(p["name"])}</code></td><td>{esc(", ".join(p["composites"]))}</td>'
        f'<td>{p["num_params"]} &rarr; {p["num_args"]}</td><td>{_si(p.get("flops", 0))}</td>'
        f'<td>{p.get("calls", 1)}</td></tr>' for i, p in enumerate(parts))
    host_rows = "".join(f"<tr><td>{esc(op)}</td><td>{count}</td><td>{esc(reason)}</td></tr>"
                        for (op, reason), count in sorted(reasons.items())) or \
        '<tr><td colspan="3">none: every op runs on bmlib</td></tr>'
    folded = "" if len(graph.nodes) == full_size else (
        f"<p>{full_size} nodes; chains of {MIN_CHAIN} or more single-input, single-output "
        f"nodes are folded ({len(graph.nodes)} boxes drawn; hover a folded box for its "
        "content).</p>")
    versions = ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>bmlib-relax offload report</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #bbb; padding: 2px 8px; text-align: left; font-size: 13px; }}
.sw {{ display: inline-block; width: 12px; height: 12px; margin-right: 6px; }}
.graph {{ overflow: auto; border: 1px solid #ddd; max-height: 90vh; }}
</style></head><body>
<h1>bmlib-relax offload report</h1>
<p>model <code>{esc(str(data.get("model", "")))}</code><br>
target <code>{esc(str(data.get("target", "")))}</code><br>{esc(versions)}</p>
<p><b>{len(parts)}</b> bmlib partition(s), <b>{offloaded}</b> op(s) offloaded,
<b>{host}</b> on host; FLOPs {_si(int(data.get("flops_offloaded", 0)))} of
{_si(int(data.get("flops_total", 0)))} on bmlib.</p>
<p><span class="sw" style="background:{_PALETTE[0]}"></span>bmlib partition (one colour each)
<span class="sw" style="background:{_HOST}; margin-left:1em"></span>host op (dashed)</p>
{_check_line(data)}{folded}<div class="graph">
{render_svg(graph)}
</div>
<h2>Partitions</h2>
<table><tr><th>partition</th><th>composites</th><th>params &rarr; PrimFunc args</th>
<th>FLOPs</th><th>calls</th></tr>{rows}</table>
<h2>Host ops</h2>
<table><tr><th>op</th><th>count</th><th>why it stayed on the host</th></tr>{host_rows}</table>
</body></html>
"""


def _check_line(data: Mapping[str, Any]) -> str:
    check = data.get("check")
    if not check:
        return ""
    if check.get("ok"):
        return "<p>Equivalence check against the plain Relax build: <b>PASS</b>.</p>\n"
    div = check.get("first_divergence") or {}
    where = (f" First diverging intermediate: <code>{html.escape(str(div.get('binding')))}"
             f"</code> from {html.escape(str(div.get('producer')))} (red box)." if div else "")
    return f"<p>Equivalence check against the plain Relax build: <b>FAIL</b>.{where}</p>\n"


def write_report_html(path: str, partitioned: tvm.IRModule, data: Mapping[str, Any],
                      collapse_above: Optional[int] = None,
                      table: Optional[Sequence[Any]] = None) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(partitioned, data, collapse_above or COLLAPSE_ABOVE, table))
    return path
