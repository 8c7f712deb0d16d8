"""Per-op TIR templates for the bmlib codegen, one module per op family."""
from .registry import get_template, register_template, template_ops

__all__ = ["get_template", "register_template", "template_ops"]
