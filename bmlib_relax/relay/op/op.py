"""``relay.op.op``: the module Relay's ``get(op_name)`` lived in (``relay.op.op.get("add")``)."""
from __future__ import annotations

from ..builder import get

__all__ = ["get"]
