#!/usr/bin/env python3
"""Open N keep-alive client connections, send one request on each, then keep them idle.

Usage: idle_clients.py HOST PORT N [PARALLEL]

Each connection sends `GET / HTTP/1.1` and reads the whole response (the status line
must be 200, the body is read by Content-Length), so the proxy has served one request on
every connection and holds it as an idle keep-alive connection. When every connection is
open and answered, prints `ready OPEN FAILED` on stdout and then sleeps, holding all of
them, until it gets SIGTERM or SIGINT. Used by bench/run.sh
(scenario idle_memory) to measure the proxy's resident memory with N idle clients.
"""

import asyncio
import signal
import sys


async def one(host, port, sem, conns, failures):
    async with sem:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: idle-clients\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            if not lines[0].startswith("HTTP/1.1 200"):
                raise RuntimeError(lines[0])
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length:
                await reader.readexactly(length)
            conns.append(writer)
        except Exception as e:  # noqa: BLE001 - counted and reported
            failures.append(repr(e))


async def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    parallel = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    sem = asyncio.Semaphore(parallel)
    conns, failures = [], []
    await asyncio.gather(*(one(host, port, sem, conns, failures) for _ in range(n)))
    if failures:
        print(f"first failure: {failures[0]}", file=sys.stderr, flush=True)
    print(f"ready {len(conns)} {len(failures)}", flush=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    await done.wait()
    for w in conns:
        w.close()


if __name__ == "__main__":
    asyncio.run(main())
