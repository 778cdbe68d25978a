"""Draw the extension icon (128x128 PNG) with the stdlib only: four ranks linked in a ring around a
check mark, on PyTorch orange. Run: python vscode-client/scripts/make_icon.py"""
import math
import struct
import sys
import zlib
from pathlib import Path

N, SS = 128, 4  # size, supersampling
BG = (0xEE, 0x4C, 0x2C)
WHITE = (255, 255, 255)
YELLOW = (0xFF, 0xD4, 0x3B)


def seg_dist(px, py, ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def shade(x, y):
    """Colour (or None for transparent) at a point in 0..128 coordinates."""
    r = 22  # rounded corner radius
    cx, cy = min(max(x, r + 4), N - r - 4), min(max(y, r + 4), N - r - 4)
    if math.hypot(x - cx, y - cy) > r:
        return None
    ranks = [(34, 34), (94, 34), (94, 94), (34, 94)]
    for (ax, ay) in ranks:
        if math.hypot(x - ax, y - ay) <= 11:
            return WHITE
    for i in range(4):
        (ax, ay), (bx, by) = ranks[i], ranks[(i + 1) % 4]
        if seg_dist(x, y, ax, ay, bx, by) <= 3.2:
            return WHITE
    # check mark in the middle
    if seg_dist(x, y, 50, 64, 60, 75) <= 5 or seg_dist(x, y, 60, 75, 80, 52) <= 5:
        return YELLOW
    return BG


def main(out: Path) -> None:
    rows = []
    for j in range(N):
        row = bytearray([0])
        for i in range(N):
            acc = [0, 0, 0, 0]
            for sj in range(SS):
                for si in range(SS):
                    c = shade(i + (si + 0.5) / SS, j + (sj + 0.5) / SS)
                    if c is not None:
                        for k in range(3):
                            acc[k] += c[k]
                        acc[3] += 255
            n = SS * SS
            a = acc[3] // n
            if a:
                k = acc[3] // 255
                row += bytes([acc[0] // k, acc[1] // k, acc[2] // k, a])
            else:
                row += bytes(4)
        rows.append(bytes(row))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", N, N, 8, 6, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")
    out.write_bytes(png)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "images" / "icon.png")
