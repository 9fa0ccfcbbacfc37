"""A TCP proxy in front of one endpoint that can go dark: "S3 is unavailable for a few seconds".

Why a proxy and not stopping SeaweedFS: SeaweedFS needs seconds to stop (more than 8 s on
SIGTERM) and to start, and a stopped S3 would also fail everything else that uses it at that
moment (the DQ proof's uploads, other savepoints); the proxy cuts exactly what a savepoint sees.
`arm` makes the cut happen in the middle of an upload (after N bytes from the client), which is
the interesting moment: some objects of the savepoint are written, its manifest is not.

During an outage every open connection is reset and new ones are reset as they arrive, so
clients fail at once (as with a dead endpoint) instead of hanging on timeouts.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Cut:
    at: float  # time.time() of the cut
    after_bytes: int
    outage_s: float
    connections_reset: int = 0


def _reset(sock: socket.socket) -> None:
    """Close with RST (linger 0), waking any thread blocked on the socket."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    host: str = "127.0.0.1"
    port: int = 0
    cuts: list[Cut] = field(default_factory=list)
    _down_until: float = 0.0
    _armed: tuple[int, float] | None = None  # (cut after bytes, outage seconds)
    _sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _conns: set[socket.socket] = field(default_factory=set)
    _listener: socket.socket | None = None
    _stopped: bool = False

    # ----------------------------------------------------------------- control
    def start(self) -> "FaultProxy":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, self.port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept_loop, name="fault-proxy-accept", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def seconds_down_left(self) -> float:
        return max(0.0, self._down_until - time.monotonic())

    def arm(self, cut_after_bytes: int, outage_s: float) -> None:
        """Go dark for `outage_s` once clients have sent `cut_after_bytes` more bytes."""
        with self._lock:
            self._sent = 0
            self._armed = (max(1, int(cut_after_bytes)), float(outage_s))

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def cut(self, outage_s: float, after_bytes: int = 0) -> Cut:
        """Go dark now: reset every connection; new ones are reset until the outage ends."""
        with self._lock:
            self._armed = None
            self._down_until = time.monotonic() + outage_s
            conns, self._conns = list(self._conns), set()
            cut = Cut(time.time(), after_bytes, outage_s, len(conns))
            self.cuts.append(cut)
        for c in conns:
            _reset(c)
        log.info("fault proxy: down for %.1fs after %d bytes (%d connections reset)", outage_s, after_bytes,
                 len(conns))
        return cut

    def stop(self) -> None:
        self._stopped = True
        if self._listener is not None:
            _reset(self._listener)
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            _reset(c)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ----------------------------------------------------------------- plumbing
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection((self.upstream_host, self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client and self._count(len(data)):
                    return  # the cut reset both sockets
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def _count(self, n: int) -> bool:
        """Count client bytes; True when this chunk triggered the armed cut (not forwarded)."""
        with self._lock:
            if self._armed is None:
                return False
            self._sent += n
            after, outage = self._armed
            if self._sent < after:
                return False
            sent = self._sent
        self.cut(outage, sent)
        return True
