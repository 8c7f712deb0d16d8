"""report.html (issue #16 part 5): the offload as an inline SVG, readable at 500+ nodes."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

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
  %2 = cos(%1);
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
    assert boxes["node host"] == ["host: cos | no bmlib template for relax.cos"]
    assert len(boxes["node input"]) == 2 and boxes["node output"] == ["output"]
    fills = {r.get("fill") for g in svg.iter(f"{SVG}g") if g.get("class") == "node partition"
             for r in g.iter(f"{SVG}rect")}
    assert len(fills) == 2, "one colour per partition"
    assert edges_point_down(svg)
    assert "<td>cos</td><td>1</td><td>no bmlib template for relax.cos</td>" in page


def long_relay(blocks: int = 30, chain: int = 20) -> str:
    """30 residual blocks of 20 alternating host (cos) / bmlib (relu) ops: 630 ops."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(1, 16), float32]) {"]
    prev, n = "%x", 0
    for _ in range(blocks):
        start = prev
        for i in range(chain):
            lines.append(f"  %{n} = {'cos' if i % 2 == 0 else 'nn.relu'}({prev});")
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
    assert "host: cos" in chains[0].find(f"{SVG}title").text  # the content, on hover
    assert f"{len(full.nodes)} nodes; chains of 4 or more" in page
    assert edges_point_down(svg)
    # top to bottom: the drawing is tall and narrow
    assert float(svg.get("height")) > 5 * float(svg.get("width"))
