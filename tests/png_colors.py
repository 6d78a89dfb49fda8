#!/usr/bin/env python3
"""Count pixels of given colours in a PNG, using a standard-library-only decoder.

Why it exists: the UI tests take headless-Chromium screenshots of the schedule
chart and must show that each expected colour was really drawn, on machines
with neither PIL nor numpy. Chromium writes 8-bit RGB or RGBA, non-interlaced,
which is all this reader supports; anything else is refused (exit 2) rather
than guessed at.

    png_colors.py FILE --expect '#4e79a7' [--expect ...] [--min-pixels 200] [--tolerance 8]

Exit 0: every colour has at least --min-pixels pixels within --tolerance (the
largest per-channel difference). Exit 1: some colour has fewer. Exit 2: the
file cannot be read or is a kind of PNG this reader does not support.
"""
import argparse
import struct
import sys
import zlib
from collections import Counter

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}  # colour type -> bytes per pixel at bit depth 8


class PngError(Exception):
    pass


def read_png(path):
    """Return (width, height, channels, pixels) with pixels as raw row-major bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PngError(f"cannot read {path}: {e}")
    if not data.startswith(SIGNATURE):
        raise PngError(f"{path} is not a PNG file (bad signature)")
    pos, header, idat = len(SIGNATURE), None, []
    while True:
        if pos + 8 > len(data):
            raise PngError(f"{path} is truncated (no IEND chunk)")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(crc) != 4:
            raise PngError(f"{path} is truncated inside a {kind!r} chunk")
        # A bad CRC means a corrupt file; say so instead of decoding garbage.
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise PngError(f"{path}: CRC mismatch in {kind!r} chunk")
        pos += 12 + length
        if kind == b"IHDR":
            if length != 13:
                raise PngError(f"{path}: IHDR chunk has length {length}, not 13")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        # Other chunks (text, gamma, sRGB, pHYs, a suggested palette) do not change pixels.
    if header is None:
        raise PngError(f"{path} has no IHDR chunk")
    width, height, depth, ctype, _comp, _filt, interlace = header
    if depth != 8 or ctype not in CHANNELS or interlace != 0:
        raise PngError(f"{path}: unsupported PNG (bit depth {depth}, colour type {ctype}, "
                       f"interlace {interlace}); only 8-bit RGB/RGBA, non-interlaced")
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise PngError(f"{path}: image data does not decompress: {e}")
    bpp = CHANNELS[ctype]
    if len(raw) < height * (1 + width * bpp):
        raise PngError(f"{path}: image data too short for {width}x{height}")
    try:
        return width, height, bpp, unfilter(raw, width, height, bpp)
    except PngError as e:
        raise PngError(f"{path}: {e}")


def unfilter(raw, width, height, bpp):
    """Undo the per-scanline filters (PNG spec section 9)."""
    stride = width * bpp
    out = bytearray(height * stride)
    prev = bytes(stride)  # the row above the first row counts as zeros
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ftype == 2:  # Up
            line = bytearray((x + b) & 255 for x, b in zip(line, prev))
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a, c = (line[i - bpp], prev[i - bpp]) if i >= bpp else (0, 0)
                b = prev[i]
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif ftype != 0:
            raise PngError(f"row {y} has unknown filter type {ftype}")
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return bytes(out)


def colour_counts(pixels, bpp, expected, tolerance):
    """Pixels within tolerance of each expected (r, g, b) colour."""
    # Count distinct pixel values first: a screenshot has few distinct colours,
    # so comparing those is much faster than comparing every pixel.
    distinct = Counter(pixels[i:i + bpp] for i in range(0, len(pixels), bpp))
    counts = [0] * len(expected)
    for value, n in distinct.items():
        if bpp == 4 and value[3] == 0:
            continue  # fully transparent: its RGB means nothing on screen
        for k, want in enumerate(expected):
            if max(abs(value[0] - want[0]), abs(value[1] - want[1]),
                   abs(value[2] - want[2])) <= tolerance:
                counts[k] += n
    return counts


def parse_colour(text):
    s = text.strip().lstrip("#")
    if len(s) != 6 or any(ch not in "0123456789abcdefABCDEF" for ch in s):
        raise argparse.ArgumentTypeError(f"colour must look like #4e79a7, got {text!r}")
    return tuple(int(s[i:i + 2], 16) for i in (0, 2, 4))


def main():
    ap = argparse.ArgumentParser(description="Count pixels of expected colours in a PNG.")
    ap.add_argument("file")
    ap.add_argument("--expect", action="append", required=True, type=parse_colour,
                    metavar="#RRGGBB", help="a colour that must appear (repeatable)")
    ap.add_argument("--min-pixels", type=int, default=200)
    ap.add_argument("--tolerance", type=int, default=8,
                    help="largest per-channel difference still counted as a match")
    args = ap.parse_args()
    try:
        _w, _h, bpp, pixels = read_png(args.file)
    except PngError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = colour_counts(pixels, bpp, args.expect, args.tolerance)
    names = ["#%02x%02x%02x" % c for c in args.expect]
    for name, n in zip(names, counts):
        print(f"{name} {n}")
    missing = [f"{name} ({n} < {args.min_pixels})"
               for name, n in zip(names, counts) if n < args.min_pixels]
    if missing:
        print("missing colours: " + ", ".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
