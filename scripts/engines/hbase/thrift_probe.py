#!/usr/bin/env python3
"""One real THBaseService.listNamespaces() call through a Thrift2 gateway; exit 0 and print
the namespaces when the gateway answers with a reply, 1 otherwise.

    thrift_probe.py HOST:PORT framed|buffered binary|compact

Hand-encoded (no Thrift library needed): a call message with an empty argument struct, and
the reply's message header checked; the namespaces are read from the result struct."""
import re
import socket
import struct
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def call_message(protocol):
    name = b"listNamespaces"
    if protocol == "binary":  # strict binary: version | CALL, name, seqid, empty struct
        return struct.pack(">I", 0x80010001) + struct.pack(">I", len(name)) + name + struct.pack(">i", 1) + b"\x00"
    # compact: protocol id, version | CALL << 5, varint seqid, varint name length, name, stop
    return bytes([0x82, 0x21]) + varint(1) + varint(len(name)) + name + b"\x00"


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("gateway closed the connection")
        buf += chunk
    return buf


def main():
    addr, transport, protocol = sys.argv[1], sys.argv[2], sys.argv[3]
    host, port = addr.rsplit(":", 1)
    msg = call_message(protocol)
    if transport == "framed":
        msg = struct.pack(">I", len(msg)) + msg
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(msg)
        if transport == "framed":
            n = struct.unpack(">I", read_exact(s, 4))[0]
            body = read_exact(s, n)
        else:
            body = s.recv(1 << 20)
        ok = (protocol == "binary" and body[:4] == struct.pack(">I", 0x80010002)) or (
            protocol == "compact" and body[:2] == bytes([0x82, 0x41]))
        if not ok:
            print("no reply message: %r" % body[:32], file=sys.stderr)
            return 1
        # Name-like runs of the reply's result struct are the namespaces (enough for a log line).
        names = [w for w in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", body[4:]) if w != b"listNamespaces"]
        print("namespaces via gateway: " + ",".join(n.decode() for n in names))
        return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, EOFError) as e:
        print(e, file=sys.stderr)
        sys.exit(1)
