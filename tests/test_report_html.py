"""report.html (issue #16 part 5): the offload as an inline SVG, readable at 500+ nodes."""
from __future__ import annotations

import re
from pathlib import Path
import xml.etree.ElementTree as ET

import pytest

from bmlib_relax.backend.codegen import is_bmlib_partition
from bmlib_relax.backend.partition import partition_for_bmlib
from bmlib_relax.check import _composites
from bmlib_relax.importer import import_relay
from bmlib_relax.report_html import build_graph, render_html

from conftest import cli

SVG = "{http://www.w3.org/2000/svg}"
MIXED = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%data, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = floor_mod(%1, 2f);
  nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2])
}
"""


def svg_of(page: str) -> ET.Element:
    return ET.fromstring(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])


def edges_point_down(svg: ET.Element) -> bool:
    for path in svg.iter(f"{SVG}path"):
        if path.get("class") != "edge":
            continue
        numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
        if not numbers[-1] > numbers[1]:  # end y below start y
            return False
    return True


def self_contained(page: str) -> bool:
    return not re.search(r"<script|<link|<img|src=|https?://(?!www\.w3\.org/2000/svg)", page)


@pytest.fixture(scope="module")
def mixed_conversion(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    (tmp / "mixed.relay").write_text(MIXED)
    proc = cli("convert", tmp / "mixed.relay", "-q", "-o", tmp / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "out"


def test_convert_writes_report_html(mixed_conversion):
    page = (mixed_conversion / "report.html").read_text()
    assert self_contained(page)
    svg = svg_of(page)
    boxes = {g.get("class"): [] for g in svg.iter(f"{SVG}g")}
    for g in svg.iter(f"{SVG}g"):
        boxes[g.get("class")].append(" | ".join(t.text for t in g.iter(f"{SVG}text")))
    partitions = boxes["node partition"]
    assert any(label.startswith("bmlib.conv2d_relu | 2 params -> 3 args, ") and "FLOPs" in label
               for label in partitions), partitions
    assert any(label.startswith("bmlib.max_pool2d") for label in partitions), partitions
    assert boxes["node host"] == ["host: floor_mod | no bmlib template for this op"]
    assert len(boxes["node input"]) == 2 and boxes["node output"] == ["output"]
    fills = {r.get("fill") for g in svg.iter(f"{SVG}g") if g.get("class") == "node partition"
             for r in g.iter(f"{SVG}rect")}
    assert len(fills) == 2, "one colour per partition"
    assert edges_point_down(svg)
    assert "<td>floor_mod</td><td>1</td><td>no bmlib template for this op</td>" in page


def long_relay(blocks: int = 30, chain: int = 20) -> str:
    """30 residual blocks of 20 alternating host (floor_mod) / bmlib (relu) ops: 630 ops."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(1, 16), float32]) {"]
    prev, n = "%x", 0
    for _ in range(blocks):
        start = prev
        for i in range(chain):
            lines.append(f"  %{n} = {'floor_mod' if i % 2 == 0 else 'nn.relu'}({prev}{', 2f' if i % 2 == 0 else ''});")
            prev, n = f"%{n}", n + 1
        lines.append(f"  %{n} = add({prev}, {start});")
        prev, n = f"%{n}", n + 1
    return "\n".join(lines + [f"  {prev}", "}"])


def test_large_graph_folds_chains():
    mod = partition_for_bmlib(import_relay(long_relay()))
    parts = [{"name": gv.name_hint, "composites": sorted(_composites(f)), "ops": [],
              "num_params": len(f.params), "num_args": len(f.params) + 1, "flops": 0}
             for gv, f in mod.functions.items() if is_bmlib_partition(f)]
    full = build_graph(mod, parts)
    assert len(full.nodes) > 600
    page = render_html(mod, {"partitions": parts, "ops_offloaded": {}, "ops_host": {}})
    assert self_contained(page)
    svg = svg_of(page)
    nodes = [g for g in svg.iter(f"{SVG}g") if (g.get("class") or "").startswith("node")]
    assert len(nodes) < 150, len(nodes)
    chains = [g for g in nodes if g.get("class") == "node chain"]
    assert len(chains) == 30
    label = " | ".join(t.text for t in chains[0].iter(f"{SVG}text"))
    assert label == "17 nodes folded (a chain) | 9 on bmlib, 8 on host"
    assert "host: floor_mod" in chains[0].find(f"{SVG}title").text  # the content, on hover
    assert f"{len(full.nodes)} nodes; chains of 4 or more" in page
    assert edges_point_down(svg)
    # top to bottom: the drawing is tall and narrow
    assert float(svg.get("height")) > 5 * float(svg.get("width"))


def test_first_divergence_is_marked():
    mod = partition_for_bmlib(import_relay(MIXED))
    parts = [{"name": gv.name_hint, "composites": sorted(_composites(f)), "ops": [],
              "num_params": len(f.params), "num_args": len(f.params) + 1, "flops": 0}
             for gv, f in mod.functions.items() if is_bmlib_partition(f)]
    graph = build_graph(mod, parts)
    conv = next(n for n in graph.nodes.values() if n.lines[0] == "bmlib.conv2d_relu")
    assert conv.binding_index == 0
    check = {"ok": False, "first_divergence": {"binding": conv.binding, "index": 0,
                                               "max_abs": 0.5, "producer": "bmlib partition x"}}
    page = render_html(mod, {"partitions": parts, "ops_offloaded": {}, "ops_host": {},
                             "check": check})
    marked = [g for g in svg_of(page).iter(f"{SVG}g") if "diverged" in (g.get("class") or "")]
    assert len(marked) == 1
    texts = [t.text for t in marked[0].iter(f"{SVG}text")]
    assert texts[0] == "bmlib.conv2d_relu"
    assert texts[-1] == f"first divergence: {conv.binding} (max abs 0.5)"
    assert marked[0].find(f"{SVG}rect").get("stroke") == "#d62728"
    assert "<b>FAIL</b>. First diverging intermediate: <code>" in page


def test_failed_check_marks_the_diverging_partition(tmp_path):
    """convert --check with a broken relu template: report.html outlines that partition."""
    from tvm import te

    from bmlib_relax.backend.templates.registry import TEMPLATES
    from bmlib_relax.convert import convert

    def broken_relu(call, inputs, ctx):
        x = inputs[0]
        return te.compute(x.shape, lambda *i: te.max(x(*i), 0.0) + 0.5, name="relu")

    original = TEMPLATES.get("relax.nn.relu")
    TEMPLATES.register("relax.nn.relu", override=True)(broken_relu)
    try:
        (tmp_path / "mixed.relay").write_text(MIXED)
        result = convert(str(tmp_path / "mixed.relay"), str(tmp_path / "out"), check=True)
    finally:
        TEMPLATES.register("relax.nn.relu", override=True)(original)
    assert result.check_passed is False
    assert not (tmp_path / "out").exists()  # a failed check never takes -o's place
    page = (Path(result.outdir) / "report.html").read_text()
    (marked,) = [g for g in svg_of(page).iter(f"{SVG}g") if "diverged" in (g.get("class") or "")]
    texts = [t.text for t in marked.iter(f"{SVG}text")]
    assert texts[0] == "bmlib.conv2d_relu" and texts[-1].startswith("first divergence: ")
    assert "<b>FAIL</b>" in page
