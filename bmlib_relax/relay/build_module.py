"""``relay.build_module``: where legacy scripts imported ``bind_params_by_name`` from."""
from .params import bind_params_by_name

__all__ = ["bind_params_by_name"]
