"""A connection made in the background: the handshake overlaps what the caller does meanwhile (importing and
planning), and whoever needs the connection waits for it and gets its error, as if it had connected itself."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ahead:
    """``connect`` running on its own thread; :meth:`join` waits for it and raises what it raised."""

    def __init__(self, connect: Callable[[], None], name: str) -> None:
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(connect,), name=name, daemon=True)
        self._thread.start()

    def _run(self, connect: Callable[[], None]) -> None:
        try:
            connect()
        except BaseException as exc:  # handed to the thread that joins, raised there
            self._failed.append(exc)

    def join(self) -> None:
        self._thread.join()
        if self._failed:
            raise self._failed[0]
