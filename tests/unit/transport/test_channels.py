"""transport/channels.drain: the exit status never ends the read while the command's output is still coming."""

from __future__ import annotations

import threading

from remediate.transport.channels import drain


class LateDataChannel:
    """A channel whose exit status is already in when part of the output still arrives, then EOF (as real sshd
    did with a backups listing: exit 0 and the listing cut mid-line)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)
        self._ready: list[bytes] = [self._chunks.pop(0)]
        self.eof_received = False
        self.closed = False
        self.status_event = threading.Event()

    def exit_status_ready(self) -> bool:
        return True

    def recv_ready(self) -> bool:
        return bool(self._ready)

    def recv(self, n: int) -> bytes:
        return self._ready.pop(0)

    def recv_stderr_ready(self) -> bool:
        return False

    def recv_stderr(self, n: int) -> bytes:
        return b""

    def _arrive(self) -> None:  # the next packet lands while the reader waits
        if self._chunks:
            self._ready.append(self._chunks.pop(0))
        else:
            self.eof_received = True


class _Waiting(LateDataChannel):
    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__(chunks)
        outer = self

        class _Event:
            def wait(self, timeout: float) -> bool:
                outer._arrive()
                return True

        self.status_event = _Event()  # type: ignore[assignment]


def test_output_after_the_exit_status_is_still_read() -> None:
    chan = _Waiting([b"@@file a\n", b"QUJD\n", b"@@end\n"])
    out, err = drain(chan, "gpu-0", timeout=5)
    assert out == b"@@file a\nQUJD\n@@end\n" and err == b""
