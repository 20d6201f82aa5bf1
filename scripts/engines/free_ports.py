#!/usr/bin/env python3
"""Prints N distinct free loopback TCP ports (default 1), below the kernel's ephemeral range.

usage: free_ports.py [N]

A port another process bound to 0 (every test of the suite does) is always in the
ephemeral range, so it is never one of these: nothing takes them between this check and
the engine's bind but a process that picks fixed ports (kafka.sh still starts again on new
ports if one was taken; hbase.sh fails the start). With no room below the range, any free
port.
"""
import random
import socket
import sys


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
        low = int(f.read().split()[0])
    found = []
    if low - 1024 < 2000:  # no room below the range: any free port (bound to 0)
        while len(found) < n:
            with socket.socket() as s:
                s.bind(('127.0.0.1', 0))
                if s.getsockname()[1] not in found:
                    found.append(s.getsockname()[1])
        print(*found)
        return
    for _ in range(10000):
        if len(found) == n:
            break
        p = random.randrange(max(1024, low - 12000), low)
        if p in found:
            continue
        s = socket.socket()
        try:
            s.bind(('127.0.0.1', p))
            found.append(p)
        except OSError:
            pass
        finally:
            s.close()
    if len(found) < n:
        sys.exit(f'free_ports.py: found only {len(found)} of {n} free ports')
    print(*found)


if __name__ == '__main__':
    main()
