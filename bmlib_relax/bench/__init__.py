"""Benchmarks: bmlib-relax against the plain Relax build and PyTorch eager."""
