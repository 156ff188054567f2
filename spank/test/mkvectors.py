#!/usr/bin/env python3
"""Write our own session-file test cases (independent of the Go sealer).

usage: mkvectors.py DIR

DIR/key.hex, and for each case DIR/<name>.session and DIR/<name>.expect.
Same layout as test/vectors/session: an .expect file starts with
`open cluster=C job=N run=N` (here also `cluster=` = do not check and
`run=any`), then `ok` and the expected NAME=VALUE lines, or `error`.
"""
import hashlib
import os
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
ENV = [
    ("JUICE_SESSION_ID", "6f1c2d3e-aaaa-bbbb-cccc-000000000042"),
    ("JUICE_AGENT_ADDR", "10.0.0.5:43210"),
    ("JUICE_GPUS", "1"),
    ("JUICE_VRAM", "1610612736"),
    ("JUICE_CFG_OVERRIDE", '{"pool":"test","vram":1610612736,"x":"a=b c"}'),
]


RESERVATION = "3f6c2a1e-9b7d-4e5f-8a2c-1d0e9f8b7a6c"


def key_id(key):
    """reconcile/session.KeyID: SHA-256 over a label and the key, first 8 bytes in hex."""
    return hashlib.sha256(b"juice-slurm session key id\n" + key).hexdigest()[:16]


def header(cluster="c1", job=42, run=0, version="v2", key=KEY, reservation=RESERVATION):
    h = f"JUICE-SESSION {version} cluster={cluster} job={job} run={run}"
    if version == "v2":
        h += f" reservation={reservation} key={key_id(key)}"
    return h.encode()


def seal(hdr, plaintext, key=KEY, nonce=b"\x01" * 12):
    return hdr + b"\n" + nonce + AESGCM(key).encrypt(nonce, plaintext, hdr)


def lines(env, final_nl=True):
    s = "\n".join(f"{k}={v}" for k, v in env)
    return (s + ("\n" if final_nl else "")).encode()


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "key.hex"), "w") as f:
        f.write(KEY.hex() + "\n")
    ctx = "open cluster=c1 job=42 run=0\n"
    ok = ctx + "ok\n" + lines(ENV).decode()
    good = seal(header(), lines(ENV))
    cases = {
        "good": (good, ok),
        "good_no_final_newline": (seal(header(), lines(ENV, False)), ok),
        "good_run3": (seal(header(run=3), lines(ENV)),
                      "open cluster=c1 job=42 run=3\nok\n" + lines(ENV).decode()),
        "good_any_run": (seal(header(run=5), lines(ENV)),
                         "open cluster=c1 job=42 run=any\nok\n" + lines(ENV).decode()),
        "good_any_cluster": (seal(header(cluster="other"), lines(ENV)),
                             "open cluster= job=42 run=0\nok\n" + lines(ENV).decode()),
        "tampered": (good[:-20] + bytes([good[-20] ^ 1]) + good[-19:], ctx + "error\n"),
        "tampered_tag": (good[:-1] + bytes([good[-1] ^ 0x80]), ctx + "error\n"),
        # header rewritten to our job: the AAD no longer matches
        "tampered_header": (header() + seal(header(job=43), lines(ENV))[len(header(job=43)):],
                            ctx + "error\n"),
        "otherjob": (seal(header(job=43), lines(ENV)), ctx + "error\n"),
        "othercluster": (seal(header(cluster="c2"), lines(ENV)), ctx + "error\n"),
        "otherrun": (seal(header(run=1), lines(ENV)), ctx + "error\n"),
        "wrongkey": (seal(header(), lines(ENV), key=OTHER_KEY), ctx + "error\n"),
        "unknown_key": (seal(header(key=OTHER_KEY), lines(ENV), key=OTHER_KEY), ctx + "error\n"),
        "reservation_asked": (good, "open cluster=c1 job=42 run=0 reservation=" + RESERVATION + "\nok\n"
                              + lines(ENV).decode()),
        "other_reservation": (good, "open cluster=c1 job=42 run=0 reservation=" + RESERVATION[:-1] + "d\nerror\n"),
        "v1": (seal(header(version="v1"), lines(ENV)), ok),
        "v1_wrongkey": (seal(header(version="v1"), lines(ENV), key=OTHER_KEY), ctx + "error\n"),
        "v1_with_v2_fields": (seal(header(version="v1") + b" reservation=" + RESERVATION.encode()
                                   + b" key=" + key_id(KEY).encode(), lines(ENV)), ctx + "error\n"),
        "truncated": (good[:len(header()) + 1 + 20], ctx + "error\n"),
        "header_only": (header() + b"\n", ctx + "error\n"),
        "no_newline": (header(), ctx + "error\n"),
        "empty": (b"", ctx + "error\n"),
        "badversion": (seal(header(version="v3"), lines(ENV)), ctx + "error\n"),
        "v2_without_fields": (seal(b"JUICE-SESSION v2 cluster=c1 job=42 run=0", lines(ENV)), ctx + "error\n"),
        "badheader_leading_zero": (seal(header().replace(b"job=42", b"job=042"), lines(ENV)),
                                   ctx + "error\n"),
        "badheader_extra": (seal(header() + b" x=1", lines(ENV)), ctx + "error\n"),
        "badname": (seal(header(), b"PATH=/tmp/evil\n"), ctx + "error\n"),
        "lowercase_name": (seal(header(), b"JUICE_gpus=1\n"), ctx + "error\n"),
        "bare_prefix": (seal(header(), b"JUICE_=1\n"), ctx + "error\n"),
        "no_equals": (seal(header(), b"JUICE_X\n"), ctx + "error\n"),
        "empty_line": (seal(header(), b"JUICE_X=1\n\nJUICE_Y=2\n"), ctx + "error\n"),
        "duplicate": (seal(header(), b"JUICE_X=1\nJUICE_X=2\n"), ctx + "error\n"),
        "nul_in_value": (seal(header(), b"JUICE_X=a\0b\n"), ctx + "error\n"),
        "empty_plaintext": (seal(header(), b""), ctx + "ok\n"),
        "oversized": (seal(header(), b"JUICE_X=" + b"a" * 70000 + b"\n"), ctx + "error\n"),
        "empty_value": (seal(header(), b"JUICE_X=\n"), ctx + "ok\nJUICE_X=\n"),
    }
    for name, (data, expect) in cases.items():
        with open(os.path.join(d, name + ".session"), "wb") as f:
            f.write(data)
        with open(os.path.join(d, name + ".expect"), "w") as f:
            f.write(expect)
    # a symlink is refused (O_NOFOLLOW)
    os.symlink("good.session", os.path.join(d, "symlink.session"))
    with open(os.path.join(d, "symlink.expect"), "w") as f:
        f.write(ctx + "error\n")


if __name__ == "__main__":
    main()
