"""The socket `jobcenter serve` and `jobcenter dashboard` listen on: each connection it accepts
under asyncio (as uvicorn serves it) has TCP_NODELAY, so a kept-alive client does not wait
for a delayed ACK on each response."""

from __future__ import annotations

import asyncio
import socket

from jobcenter.web.serve import _bind


def test_accepted_connections_have_nodelay() -> None:
    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listener = _bind("127.0.0.1", 0)
        server = await asyncio.start_server(handle, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname())
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(main()) != 0
