"""Figures shared by everyone who looks at the same runs: built once per change of the files they are drawn from.

Under 20 users each page's Runs tab redrew the same curves on every poll while a run trained: the figures' plotly
construction was most of the app's CPU, taken from the trainer's cores. A figure depends only on its arguments and its
files, so it is kept, keyed by both, until a file changes size or modification time (a run logs by appending).
The figures handed out are shared: nothing may change them after they are built."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class FileKeyed:
    """A small LRU of values keyed by (``key``, the size and mtime of each of ``paths``)."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # how many values were built (the rest came from the cache)

    def get(self, key: Hashable, paths: Iterable[Path], build: Callable[[], T]) -> T:
        sig = (key, tuple((str(p), _stat(Path(p))) for p in paths))
        with self._lock:
            if sig in self._items:
                self._items.move_to_end(sig)
                return self._items[sig]  # type: ignore[return-value]
        value = build()  # outside the lock: two users asking at once may both build; neither waits on the other
        with self._lock:
            self.builds += 1
            self._items[sig] = value
            self._items.move_to_end(sig)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value
