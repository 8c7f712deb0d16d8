#!/usr/bin/env python
"""int8 (QNN) vs fp32 on bmlib: qnn_mobilenet_tiny, an int8 ResNet-18 and single conv layers.

Not a test: prints median latencies (bmlib_relax.bench.harness.time_it; int8 and fp32
timed in alternating rounds, medians of the rounds) of

* ``qnn_mobilenet_tiny`` (Relay QNN, int8 convs with fused requantize) against the
  same network in fp32 (conv + bias + ReLU, the float weights the golden quantizes);
* ``resnet18_int8`` against ``resnet18_fp32`` (:func:`bmlib_relax.bench.models.resnet18_text`:
  ResNet-18-shaped, 224x224, quantized in the graph as the goldens are);
* one int8 ``qnn.conv2d + requantize`` layer against the fp32 conv of that shape,
  with GFLOP/s (a multiply-add is 2 FLOPs).

    TVM_NUM_THREADS=1 python scripts/bench_qnn.py [--golden DIR] [--seconds S] [--skip-layers]
                                                  [--mobilenet-only]

At ``TVM_NUM_THREADS=1`` the clock is process CPU time (see :func:`_time`).  The
MobileNet is timed twice: through the model's Python call and as the VM's
``main`` on prepared device tensors (the network without the wrapper).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

FP32_MOBILENET = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 32, 32), float32], %c1_weight: Tensor[(16, 3, 3, 3), float32],
          %c1_bias: Tensor[(16), float32], %dw1_weight: Tensor[(16, 1, 3, 3), float32],
          %dw1_bias: Tensor[(16), float32], %pw1_weight: Tensor[(32, 16, 1, 1), float32],
          %pw1_bias: Tensor[(32), float32], %dw2_weight: Tensor[(32, 1, 3, 3), float32],
          %dw2_bias: Tensor[(32), float32], %pw2_weight: Tensor[(64, 32, 1, 1), float32],
          %pw2_bias: Tensor[(64), float32], %fc_weight: Tensor[(10, 64), float32],
          %fc_bias: Tensor[(10), float32]) {
  %0 = nn.conv2d(%data, %c1_weight, strides=[2, 2], padding=[1, 1, 1, 1], channels=16,
                 kernel_size=[3, 3]);
  %1 = nn.relu(nn.bias_add(%0, %c1_bias));
  %2 = nn.conv2d(%1, %dw1_weight, padding=[1, 1, 1, 1], groups=16, channels=16,
                 kernel_size=[3, 3]);
  %3 = nn.relu(nn.bias_add(%2, %dw1_bias));
  %4 = nn.conv2d(%3, %pw1_weight, padding=[0, 0, 0, 0], channels=32, kernel_size=[1, 1]);
  %5 = nn.relu(nn.bias_add(%4, %pw1_bias));
  %6 = nn.conv2d(%5, %dw2_weight, strides=[2, 2], padding=[1, 1, 1, 1], groups=32,
                 channels=32, kernel_size=[3, 3]);
  %7 = nn.relu(nn.bias_add(%6, %dw2_bias));
  %8 = nn.conv2d(%7, %pw2_weight, padding=[0, 0, 0, 0], channels=64, kernel_size=[1, 1]);
  %9 = nn.relu(nn.bias_add(%8, %pw2_bias));
  %10 = nn.batch_flatten(nn.global_avg_pool2d(%9));
  nn.softmax(nn.bias_add(nn.dense(%10, %fc_weight, units=None), %fc_bias))
}
"""

LAYER_INT8 = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, {h}, {h}), int8], %w: Tensor[({o}, {c}, 3, 3), int8]) {{
  %0 = qnn.conv2d(%x, %w, -128, 0, 0.05f, 0.02f, padding=[1, 1, 1, 1], channels={o},
                  kernel_size=[3, 3], out_dtype="int32");
  %1 = qnn.requantize(%0, 0.001f, 0, 0.06f, -128, rounding="UPWARD", out_dtype="int8");
  clip(%1, a_min=-128f, a_max=127f)
}}
"""

LAYER_FP32 = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, {h}, {h}), float32], %w: Tensor[({o}, {c}, 3, 3), float32]) {{
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels={o}, kernel_size=[3, 3]))
}}
"""


def _vm_call(model, feed):
    """``main`` of the model's VM on device tensors made once: the network alone,
    without the Python wrapper's per-call conversions (~30 us here, the same for
    both builds, which would dilute a ratio of 15 us networks)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(model.executable, model.device)
    main = vm["main"]
    args = [tvm.runtime.tensor(x) for x in feed.values()]
    return lambda: main(*args)


def _time(model, feed, seconds, vm=False):
    """Median ms per call.  At one thread (``TVM_NUM_THREADS=1``) the clock is the
    process CPU time, which other jobs on a shared machine do not stretch: calls are
    batched (the clock's resolution), the median over batches is taken."""
    from bmlib_relax.bench.harness import time_it

    fn = _vm_call(model, feed) if vm else (lambda: model(**feed))
    if os.environ.get("TVM_NUM_THREADS") != "1":
        return time_it(fn, min_seconds=seconds).median_ms
    import time

    fn()
    start, batches = time.process_time(), []
    while time.process_time() - start < seconds or len(batches) < 5:
        t0, calls = time.process_time(), 0
        while time.process_time() - t0 < 0.01:
            fn()
            calls += 1
        batches.append((time.process_time() - t0) * 1e3 / calls)
    return float(np.median(batches))


LAYERS = ((64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7))  # ResNet-18's 3x3s
ROUNDS = 5  # int8 and fp32 timed in alternation, so load drift hits both alike


def _pair(int8, int8_feed, fp32, fp32_feed, seconds, vm=False):
    """Median latencies (ms) of the two builds over ``ROUNDS`` alternating rounds."""
    q, f = [], []
    for _ in range(ROUNDS):
        q.append(_time(int8, int8_feed, seconds / ROUNDS, vm))
        f.append(_time(fp32, fp32_feed, seconds / ROUNDS, vm))
    return float(np.median(q)), float(np.median(f))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", default=os.environ.get("BMLIB_RELAY_GOLDEN",
                                                           "../shared/relay_golden"))
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--skip-layers", action="store_true", help="networks only")
    parser.add_argument("--mobilenet-only", action="store_true",
                        help="qnn_mobilenet_tiny only (no ResNet-18, no layers)")
    args = parser.parse_args()

    import bmlib_relax
    from bmlib_relax.bench.harness import _golden, host_target
    from bmlib_relax.relay import parse

    target = host_target()
    print(f"target {target}, TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', '(default)')}")
    text, params, inputs = _golden(Path(args.golden) / "qnn_mobilenet_tiny")
    int8 = bmlib_relax.compile(parse(text), params, target=target)
    fp32 = bmlib_relax.compile(parse(FP32_MOBILENET), params, target=target)
    t_int8, t_fp32 = _pair(int8, inputs, fp32, inputs, args.seconds)
    print(f"qnn_mobilenet_tiny  int8 {t_int8:.4f} ms  fp32 {t_fp32:.4f} ms  "
          f"fp32/int8 {t_fp32 / t_int8:.3f}x  (Python call)")
    t_int8, t_fp32 = _pair(int8, inputs, fp32, inputs, args.seconds, vm=True)
    print(f"qnn_mobilenet_tiny  int8 {t_int8:.4f} ms  fp32 {t_fp32:.4f} ms  "
          f"fp32/int8 {t_fp32 / t_int8:.3f}x  (VM main)")
    if args.mobilenet_only:
        return 0

    from bmlib_relax.bench.models import load_model

    built = {}
    for name in ("resnet18_int8", "resnet18_fp32"):
        bench = load_model(name, Path(args.golden), None)
        built[name] = (bmlib_relax.compile(parse(bench.text), bench.params, target=target),
                       bench.inputs)
    t_int8, t_fp32 = _pair(*built["resnet18_int8"], *built["resnet18_fp32"], args.seconds)
    print(f"resnet18 224x224    int8 {t_int8:.3f} ms  fp32 {t_fp32:.3f} ms  "
          f"fp32/int8 {t_fp32 / t_int8:.2f}x")

    rng = np.random.default_rng(0)
    layers = () if args.skip_layers else LAYERS
    for c, o, h in layers:
        flops = 2 * o * c * 9 * h * h
        x8 = rng.integers(-128, 128, size=(1, c, h, h)).astype("int8")
        w8 = rng.integers(-127, 128, size=(o, c, 3, 3)).astype("int8")
        q = bmlib_relax.compile(parse(LAYER_INT8.format(c=c, o=o, h=h)), {"w": w8},
                                target=target)
        f = bmlib_relax.compile(parse(LAYER_FP32.format(c=c, o=o, h=h)),
                                {"w": w8.astype("float32") * 0.01}, target=target)
        tq, tf = _pair(q, {"x": x8}, f, {"x": x8.astype("float32")}, args.seconds)
        print(f"conv3x3 {c}x{h}x{h}->{o}  int8 {tq:.3f} ms ({flops / tq / 1e6:.1f} GOP/s)  "
              f"fp32 {tf:.3f} ms ({flops / tf / 1e6:.1f} GFLOP/s)  fp32/int8 {tf / tq:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
