"""Run inside a container whose network_policy allows domains (egress.py), before its command: serve the host's
proxy, a unix socket bound at /run/hotloop-egress/proxy.sock, at 127.0.0.1:3128 on the container's own loopback
(where HTTP_PROXY points), then become the command.

Standard library only; run with `python -I -S -c <this> command...`. The port is bound before the command starts,
so its first connection finds it. The server runs in a grandchild the sandbox's init adopts, so the command has no
child it did not start; it ends with the sandbox, when the command does.
"""

import os
import socket
import sys

PROXY = "/run/hotloop-egress/proxy.sock"
PORT = 3128
CHUNK = 1 << 16


def serve(listener: socket.socket) -> None:
    import asyncio

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(PROXY)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        up_writer.close()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(one, sock=listener)
        await server.serve_forever()

    asyncio.run(main())


def run() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PORT))
    listener.listen(64)
    child = os.fork()
    if child == 0:
        if os.fork() == 0:  # the server: adopted by the sandbox's init once its parent exits
            quiet = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(quiet, fd)
            try:
                serve(listener)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    run()
