#!/usr/bin/env python3
"""JA4 and JA4_r of every well-formed capture in this directory, computed from
the raw bytes by code of its own (no line shared with the Rust parser), as
FoxIO's technical_details/JA4.md describes it. The SHA-256 is Python's
hashlib.

Writes ja4.jsonl next to manifest.jsonl: one object per file whose manifest
`expected` is a parsed hello (routed, NoSni, EchOuterAbsent), with the
fields `file`, `ja4`, `ja4_r`. preread-parser/tests/ja4.rs compares the
Rust fingerprint with these.

Run from anywhere: python3 testdata/clienthellos/ja4.py
"""

import hashlib
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PARSED = {"routed", "NoSni", "EchOuterAbsent"}
VERSIONS = {
    0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3",
    0x0002: "s2", 0xFEFF: "d1", 0xFEFD: "d2", 0xFEFC: "d3",
}


def grease(v):
    return (v & 0x0F0F) == 0x0A0A and (v >> 8) == (v & 0xFF)


def u16(b, i):
    return (b[i] << 8) | b[i + 1]


def handshake_message(data):
    """Concatenates the payloads of the handshake records until the first
    message is whole; returns the ClientHello body (no 4-byte header)."""
    payload = b""
    i = 0
    while True:
        assert data[i] == 22, "not a handshake record"
        n = u16(data, i + 3)
        payload += data[i + 5:i + 5 + n]
        i += 5 + n
        if len(payload) >= 4:
            need = 4 + int.from_bytes(payload[1:4], "big")
            if len(payload) >= need:
                assert payload[0] == 1
                return payload[4:need]


def fields(body):
    i = 2 + 32
    legacy = u16(body, 0)
    i += 1 + body[i]
    n = u16(body, i)
    ciphers = [u16(body, i + 2 + k) for k in range(0, n, 2)]
    i += 2 + n
    i += 1 + body[i]
    exts = []
    if i < len(body):
        end = i + 2 + u16(body, i)
        i += 2
        while i < end:
            t, n = u16(body, i), u16(body, i + 2)
            exts.append((t, body[i + 4:i + 4 + n]))
            i += 4 + n
    return legacy, ciphers, exts


def hex4(values):
    return ",".join("%04x" % v for v in values)


def sha12(text):
    if not text:
        return "000000000000"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def ja4(body, transport="t"):
    legacy, ciphers, exts = fields(body)
    ciphers = [c for c in ciphers if not grease(c)]
    exts = [(t, d) for t, d in exts if not grease(t)]
    types = [t for t, _ in exts]
    data = dict(exts)
    if 0x002B in data:
        offered = data[0x002B][1:]
        offered = [u16(offered, k) for k in range(0, len(offered), 2)]
        version = max([v for v in offered if not grease(v)], default=0)
    else:
        version = legacy
    alpn = "00"
    if 0x0010 in data and len(data[0x0010]) > 3:
        d = data[0x0010]
        first = d[3:3 + d[2]]
        if first:
            if chr(first[0]).isalnum() and chr(first[-1]).isalnum() and first[0] < 128 and first[-1] < 128:
                alpn = chr(first[0]) + chr(first[-1])
            else:
                h = first.hex()
                alpn = h[0] + h[-1]
    a = "%s%s%s%02d%02d%s" % (
        transport,
        VERSIONS.get(version, "00"),
        "d" if 0x0000 in data else "i",
        min(len(ciphers), 99),
        min(len(types), 99),
        alpn,
    )
    b = hex4(sorted(ciphers))
    c = hex4(sorted(t for t in types if t not in (0x0000, 0x0010)))
    sigs = []
    if 0x000D in data:
        d = data[0x000D]
        lst = d[2:2 + u16(d, 0)] if len(d) >= 2 else b""
        sigs = [u16(lst, k) for k in range(0, len(lst) - 1, 2)]
        sigs = [s for s in sigs if not grease(s)]
    c_hashed = sha12(c + ("_" + hex4(sigs) if sigs else "")) if c else "000000000000"
    raw_c = c + ("_" + hex4(sigs) if sigs else "")
    return "%s_%s_%s" % (a, sha12(b), c_hashed), "%s_%s_%s" % (a, b, raw_c)


def main():
    out = []
    with open(os.path.join(HERE, "manifest.jsonl")) as manifest:
        for line in manifest:
            entry = json.loads(line)
            if entry["expected"] not in PARSED:
                continue
            with open(os.path.join(HERE, entry["file"]), "rb") as f:
                data = f.read()
            data = data[entry.get("prefix_len", 0):]
            fp, raw = ja4(handshake_message(data))
            out.append({"file": entry["file"], "ja4": fp, "ja4_r": raw})
    with open(os.path.join(HERE, "ja4.jsonl"), "w") as f:
        for entry in out:
            f.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    main()
