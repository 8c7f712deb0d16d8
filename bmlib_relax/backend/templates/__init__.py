"""Per-op TIR templates for the bmlib codegen, one module per op family."""
from .registry import (SCHEDULE_ATTR, get_schedule_rule, get_template, register_schedule,
                       register_template, supports_symbolic_dims, symbolic_batch_only,
                       template_ops)

__all__ = ["SCHEDULE_ATTR", "get_schedule_rule", "get_template", "register_schedule",
           "register_template", "supports_symbolic_dims", "symbolic_batch_only",
           "template_ops"]
