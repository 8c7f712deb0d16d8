#!/usr/bin/env python
"""Grouped / transposed convolutions and the 1-pixel classifier conv: bmlib vs the plain Relax build.

Not a test.  For each layer (a one-op Relax module with a constant weight, followed
by ReLU) it builds the bmlib-offloaded module and TVM's plain legalized build for
the same host target, checks they agree, then times both in alternation:
``--repeats`` rounds of ``time_it`` (median of >= ``--seconds`` of runs) each, and
reports the median over rounds of each and ``bmlib / plain`` (time ratio: below 1
is bmlib faster) computed within the same run.  The machine may be shared: compare
ratios, not absolute times, and only between rows of one run.

    TVM_NUM_THREADS=1 python scripts/bench_conv_variants.py [--only NAME] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# name -> (op, data shape, weight shape, attrs); weights OIHW for conv2d, IOHW/IOW for transposes.
LAYERS = {
    # ResNeXt-50 32x4d 3x3 grouped convolutions (stage widths 128..1024, 32 groups)
    "resnext_g32_128c_28": ("conv2d", (1, 128, 28, 28), (128, 4, 3, 3), dict(padding=1, groups=32)),
    "resnext_g32_256c_28": ("conv2d", (1, 256, 28, 28), (256, 8, 3, 3), dict(padding=1, groups=32)),
    "resnext_g32_512c_14": ("conv2d", (1, 512, 14, 14), (512, 16, 3, 3), dict(padding=1, groups=32)),
    "resnext_g32_1024c_7": ("conv2d", (1, 1024, 7, 7), (1024, 32, 3, 3), dict(padding=1, groups=32)),
    "resnext_g32_s2": ("conv2d", (1, 256, 56, 56), (256, 8, 3, 3),
                       dict(strides=2, padding=1, groups=32)),
    # ShuffleNet v1 (g=3) grouped 1x1 and a RegNet-style group width 16
    "shufflenet_g3_1x1": ("conv2d", (1, 240, 28, 28), (240, 80, 1, 1), dict(groups=3)),
    "regnet_g4_dil2": ("conv2d", (1, 64, 28, 28), (64, 16, 3, 3),
                       dict(padding=2, dilation=2, groups=4)),
    # Depthwise with a channel multiplier of 2 (groups == channels, 2 outputs each)
    "depthwise_mult2": ("conv2d", (1, 32, 56, 56), (64, 1, 3, 3), dict(padding=1, groups=32)),
    # Transposed convolutions: DCGAN 4x4/2, U-Net 2x2/2, decoder 3x3/2 (+output_padding), 3x3/1
    "dcgan_t4x4_s2": ("conv2d_transpose", (1, 256, 8, 8), (256, 128, 4, 4),
                      dict(strides=2, padding=1)),
    "unet_t2x2_s2": ("conv2d_transpose", (1, 128, 28, 28), (128, 64, 2, 2), dict(strides=2)),
    "decoder_t3x3_s2_op1": ("conv2d_transpose", (1, 64, 32, 32), (64, 32, 3, 3),
                            dict(strides=2, padding=1, output_padding=1)),
    "t3x3_s1": ("conv2d_transpose", (1, 32, 32, 32), (32, 32, 3, 3), dict(padding=1)),
    "t3x3_s2_g4_dil2": ("conv2d_transpose", (1, 64, 16, 16), (64, 16, 3, 3),
                        dict(strides=2, padding=1, dilation=2, groups=4)),
    "audio_t1d_k8_s4": ("conv1d_transpose", (1, 64, 256), (64, 32, 8), dict(strides=4, padding=2)),
    "unet3d_t2x2x2_s2": ("conv3d_transpose", (1, 64, 8, 8, 8), (64, 32, 2, 2, 2), dict(strides=2)),
    "t3x3x3_s2_op1": ("conv3d_transpose", (1, 32, 6, 6, 6), (32, 16, 3, 3, 3),
                      dict(strides=2, padding=1, output_padding=1)),
    # EfficientNet-B0's classifier: 1x1 conv, 1280 -> 1000 channels on the 1x1 pooled map
    "effnet_classifier_1x1": ("conv2d", (1, 1280, 1, 1), (1000, 1280, 1, 1), {}),
}


def layer_module(op: str, data_shape, weight_shape, attrs):
    from tvm import relax

    sys.path.insert(0, str(ROOT / "tests" / "backend"))
    from helpers import make_module  # the tests' one-op module builder (recipe weights)

    fn = getattr(relax.op.nn, op)
    return make_module(lambda x, w: relax.op.nn.relu(fn(x, w, **attrs)), [data_shape],
                       [weight_shape])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="layer name (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("TVM_NUM_THREADS") or 1))
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import tvm
    from tvm import relax

    from bmlib_relax import partition_for_bmlib
    from bmlib_relax.backend.schedule import UnscheduledBlockWarning
    from bmlib_relax.bench.harness import host_target, time_it
    from bmlib_relax.compiler import build_offloaded, compile_plain
    from bmlib_relax.flops import count_flops
    from bmlib_relax.threads import configure_current_thread

    configure_current_thread(args.threads)
    target = host_target()
    print(f"target {target}, {args.threads} thread(s), {args.repeats} rounds of "
          f">= {args.seconds} s each")
    print("| layer | op | GFLOP | bmlib ms | bmlib GFLOP/s | plain ms | bmlib / plain "
          "| unscheduled |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, (op, data_shape, weight_shape, attrs) in LAYERS.items():
        if args.only and name not in args.only:
            continue
        mod, arrays = layer_module(op, data_shape, weight_shape, attrs)
        partitioned = partition_for_bmlib(mod, target=target)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnscheduledBlockWarning)
            offloaded, _ = build_offloaded(partitioned, target)
        unscheduled = sum(w.category is UnscheduledBlockWarning for w in caught)
        plain = compile_plain(mod, target)
        inputs = [tvm.runtime.tensor(a) for a in arrays]
        runs = {key: relax.VirtualMachine(ex, tvm.cpu())["main"]
                for key, ex in (("bmlib", offloaded), ("plain", plain))}
        got, want = (runs[k](*inputs).numpy() for k in ("bmlib", "plain"))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
        medians: dict[str, list[float]] = {"bmlib": [], "plain": []}
        for _ in range(args.repeats):
            for key, fn in runs.items():
                medians[key].append(time_it(lambda: fn(*inputs),
                                            min_seconds=args.seconds).median_ms)
        bmlib_ms, plain_ms = (statistics.median(medians[k]) for k in ("bmlib", "plain"))
        flops = sum(count_flops(b.value) for b in mod["main"].body.blocks[0].bindings
                    if isinstance(b.value, relax.Call) and b.value.op.name == f"relax.nn.{op}")
        print(f"| {name} | {op} | {flops / 1e9:.4f} | {bmlib_ms:.3f} | "
              f"{flops / bmlib_ms / 1e6:.1f} | {plain_ms:.3f} | {bmlib_ms / plain_ms:.3f} "
              f"| {unscheduled or ''} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
