#!/usr/bin/env python3
"""Seal a session file by hand, for trying the plugin on a test bed.

usage: seal.py KEYFILE CLUSTER JOB RUN OUTFILE [RESERVATION] < NAME=VALUE lines

A version 2 file (test/vectors/README.md section 4) under the key in KEYFILE,
of RESERVATION (default: a random UUID).

Writes OUTFILE atomically (temporary name, then rename), mode 0600.
"""
import hashlib
import os
import sys
import uuid

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def main():
    keyfile, cluster, job, run, out = sys.argv[1:6]
    reservation = str(uuid.UUID(sys.argv[6])) if len(sys.argv) > 6 else str(uuid.uuid4())
    key = bytes.fromhex(open(keyfile).read().strip())
    key_id = hashlib.sha256(b"juice-slurm session key id\n" + key).hexdigest()[:16]
    header = (f"JUICE-SESSION v2 cluster={cluster} job={int(job)} run={int(run)} "
              f"reservation={reservation} key={key_id}").encode()
    nonce = os.urandom(12)
    data = header + b"\n" + nonce + AESGCM(key).encrypt(nonce, sys.stdin.buffer.read(), header)
    tmp = out + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.close(fd)
    os.rename(tmp, out)


if __name__ == "__main__":
    main()
