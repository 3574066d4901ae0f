#!/usr/bin/python3
"""Draw korch's kernelspec logos (kernelspec/python3/logo-32x32.png and
logo-64x64.png): a blue disc with a yellow "k", antialiased by 4x4
supersampling, written as RGBA PNG with zlib and no metadata, so the
same script always writes the same bytes. Run from the repository root:

    scripts/make-logos.py [DIR]      (default kernelspec/python3)
"""
import math
import os
import struct
import sys
import zlib

BLUE = (0x30, 0x6f, 0xa8)
YELLOW = (0xff, 0xd4, 0x3b)
SS = 4  # samples per pixel side


def seg_dist(px, py, ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def shade(u, v):
    """Colour at (u, v) in the unit square, or None outside the disc."""
    if math.hypot(u - 0.5, v - 0.5) > 0.48:
        return None
    w = 0.075  # half the stroke width
    strokes = [(0.36, 0.2, 0.36, 0.8), (0.66, 0.36, 0.37, 0.6), (0.45, 0.53, 0.68, 0.8)]
    if any(seg_dist(u, v, *s) <= w for s in strokes):
        return YELLOW
    return BLUE


def render(size):
    rows = []
    for y in range(size):
        row = bytearray([0])  # filter: none
        for x in range(size):
            acc, hits = [0, 0, 0], 0
            for sy in range(SS):
                for sx in range(SS):
                    c = shade((x + (sx + 0.5) / SS) / size, (y + (sy + 0.5) / SS) / size)
                    if c:
                        hits += 1
                        for i in range(3):
                            acc[i] += c[i]
            if hits:
                row += bytes(round(a / hits) for a in acc) + bytes([round(255 * hits / (SS * SS))])
            else:
                row += bytes(4)
        rows.append(bytes(row))
    return b"".join(rows)


def png(size, raw):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "kernelspec/python3"
    for size in (32, 64):
        path = os.path.join(out, "logo-%dx%d.png" % (size, size))
        with open(path, "wb") as f:
            f.write(png(size, render(size)))
        print(path)


if __name__ == "__main__":
    main()
