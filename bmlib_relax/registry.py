"""One small registry type behind every "one function per op" table.

Converters (Relay op → Relax), TIR templates, FLOP counters, legacy lowerings
and legacy pattern translators are all name → function tables filled by a
decorator at import time.  A name registered twice is a programming error
(``ValueError``) unless ``override=True`` is asked for explicitly; ``loader``
imports the modules that fill the table, so a lookup never sees it half empty.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T", bound=Callable)


class Registry(Generic[T]):
    def __init__(self, what: str, loader: Optional[Callable[[], None]] = None):
        self.what = what  # e.g. "converter for Relay op", used in error messages
        self._entries: dict[str, T] = {}
        self._loader = loader
        self._loaded = loader is None

    def register(self, *names: str, override: bool = False) -> Callable[[T], T]:
        """Decorator registering the function under each of ``names``."""

        def decorator(fn: T) -> T:
            if not callable(fn):
                raise TypeError(f"{self.what} {names[0]!r} is not callable")
            for name in names:
                if name in self._entries and not override:
                    raise ValueError(f"{self.what} {name!r} is already registered")
                self._entries[name] = fn
            return fn

        return decorator

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            self._loader()  # type: ignore[misc]

    def get(self, name: str) -> Optional[T]:
        self._load()
        return self._entries.get(name)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def names(self) -> list[str]:
        """Sorted registered names (the source of every supported-op listing)."""
        self._load()
        return sorted(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
