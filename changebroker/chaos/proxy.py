"""A TCP fault proxy: one listening port in front of a service, which passes, cuts, slows or
black-holes what goes through it, as the fault campaign tells it.

- ``cut``: open connections are closed and new ones refused (accepted, closed at once);
- ``slow``: every chunk waits ``delay`` seconds before it is forwarded, both ways;
- ``blackhole``: nothing is forwarded and nothing answered (a dead network path); when the
  link heals, connections that were black-holed are closed, as their peers would have timed
  them out.

Each link runs on one asyncio loop in a thread of its own (``Proxies``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

PASS, CUT, SLOW, BLACKHOLE = "pass", "cut", "slow", "blackhole"


@dataclass
class Link:
    name: str
    listen_port: int
    target_port: int
    mode: str = PASS
    delay: float = 0.0
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _holed: set[asyncio.StreamWriter] = field(default_factory=set)
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._close_all()

    def set_mode(self, mode: str, delay: float = 0.0) -> None:
        """Called on the loop's thread."""
        healed = self.mode == BLACKHOLE and mode != BLACKHOLE
        self.mode, self.delay = mode, delay
        if mode == CUT:
            self._close_all()
        if healed:
            for writer in list(self._holed):
                writer.close()
            self._holed.clear()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == CUT:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pair = {writer, up_writer}
        self._writers |= pair
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for each in pair:
                each.close()
            self._writers -= pair
            self._holed -= pair

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                data = await source.read(65536)
                if not data:
                    break
                while self.mode == BLACKHOLE:
                    self._holed.add(sink)
                    await asyncio.sleep(0.1)
                if sink.is_closing():
                    break
                if self.mode == SLOW and self.delay:
                    await asyncio.sleep(self.delay)
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError):
            sink.close()


class Proxies:
    """The links, served by one event loop in a daemon thread."""

    def __init__(self, links: list[Link]) -> None:
        self.links = {link.name: link for link in links}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxies", daemon=True)

    def start(self) -> None:
        self._thread.start()
        for link in self.links.values():
            asyncio.run_coroutine_threadsafe(link.start(), self._loop).result(timeout=10)

    def set(self, name: str, mode: str, delay: float = 0.0) -> None:
        link = self.links[name]
        self._loop.call_soon_threadsafe(link.set_mode, mode, delay)

    def stop(self) -> None:
        for link in self.links.values():
            asyncio.run_coroutine_threadsafe(link.stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
