#!/usr/bin/env python3
"""Seal a session file by hand, for trying the plugin on a test bed.

usage: seal.py KEYFILE CLUSTER JOB RUN OUTFILE < NAME=VALUE lines

Writes OUTFILE atomically (temporary name, then rename), mode 0600.
"""
import os
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def main():
    keyfile, cluster, job, run, out = sys.argv[1:6]
    key = bytes.fromhex(open(keyfile).read().strip())
    header = f"JUICE-SESSION v1 cluster={cluster} job={int(job)} run={int(run)}".encode()
    nonce = os.urandom(12)
    data = header + b"\n" + nonce + AESGCM(key).encrypt(nonce, sys.stdin.buffer.read(), header)
    tmp = out + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.close(fd)
    os.rename(tmp, out)


if __name__ == "__main__":
    main()
