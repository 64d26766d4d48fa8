"""How the kernel spreads loopback connections over N listeners sharing a port with SO_REUSEPORT.

What ``server.balance = "kernel"`` leaves to chance (transports/conn_dispatch.py): N processes listen on one port,
C connections are opened from this process, each listener counts what it accepted.

    python bench/reuseport_spread.py --listeners 8 --connections 64,64,256,256
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket


def _listen(port: int, ready: mp.Queue, counts: mp.Queue) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    sock.settimeout(3.0)
    ready.put(True)
    n = 0
    try:
        while True:
            conn, _ = sock.accept()
            conn.close()
            n += 1
    except TimeoutError:
        counts.put(n)


def spread(listeners: int, connections: int) -> list[int]:
    """Connections accepted per listener, ascending."""
    hold = socket.socket()
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    hold.bind(("127.0.0.1", 0))
    port = hold.getsockname()[1]
    ready, counts = mp.Queue(), mp.Queue()
    procs = [mp.Process(target=_listen, args=(port, ready, counts)) for _ in range(listeners)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get()
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    got = sorted(counts.get() for _ in procs)
    for p in procs:
        p.join()
    for c in clients:
        c.close()
    hold.close()
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=8)
    parser.add_argument("--connections", default="64,64,256,256")
    args = parser.parse_args()
    for c in (int(x) for x in args.connections.split(",")):
        got = spread(args.listeners, c)
        print(f"{args.listeners} listeners, {c} connections: {got}, max / mean {max(got) * args.listeners / c:.2f}")


if __name__ == "__main__":
    main()
