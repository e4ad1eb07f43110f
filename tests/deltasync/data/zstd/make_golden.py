#!/usr/bin/env python3
"""Writes the golden zstd frames used by tests/deltasync/walker_golden_test.cc.

Run once from this directory (needs the `zstd` CLI and python-zstandard); the outputs are
committed. Inputs are deterministic (seeded), so rerunning with the same zstd versions gives
the same files. Frames:
  good_*.zst  must decode; the test checks the walker against libzstd + a nonzero scan.
  bad_*.zst   must fail; the test checks the walker's status code (and libzstd's verdict).
Hand-built frames use the helpers below (RFC 8878 field layouts).
"""
import os
import random
import struct
import subprocess
import tempfile

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def sparse(size, density, seed):
    rng = random.Random(seed)
    out = bytearray(size)
    for i in range(size):
        if rng.random() < density:
            out[i] = rng.randrange(1, 256)
    return bytes(out)


def bf16_like(size, changed, seed):
    rng = random.Random(seed)
    out = bytearray(size)
    for i in range(0, size - 1, 2):
        if rng.random() < changed:
            out[i] = rng.randrange(1, 8)
    return bytes(out)


def cli(args, data):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.bin")
        with open(src, "wb") as f:
            f.write(data)
        return subprocess.run(["zstd", "-q", "-c", *args, src], check=True,
                              stdout=subprocess.PIPE).stdout


def cli_stdin(args, data):
    return subprocess.run(["zstd", "-q", "-c", *args], input=data, check=True,
                          stdout=subprocess.PIPE).stdout


# --- hand-built frames ------------------------------------------------------------------------

MAGIC = struct.pack("<I", 0xFD2FB528)


def frame_header(window_log=None, fcs=None, checksum=False, dict_id=None, single=False):
    """Frame_Header_Descriptor + optional fields; fcs as 1/2/4/8-byte field chosen to fit."""
    fhd = 0
    fields = b""
    if checksum:
        fhd |= 0x04
    if single:
        fhd |= 0x20
    else:
        fields += bytes([(window_log - 10) << 3])
    if dict_id is not None:
        fhd |= 3
        fields += struct.pack("<I", dict_id)
    if fcs is not None:
        if single and fcs < 256:
            fields += bytes([fcs])
        elif 256 <= fcs < 65536 + 256:
            fhd |= 1 << 6
            fields += struct.pack("<H", fcs - 256)
        else:
            fhd |= 2 << 6
            fields += struct.pack("<I", fcs)
    return MAGIC + bytes([fhd]) + fields


def block(btype, content, last, size=None):
    if size is None:
        size = len(content)
    return struct.pack("<I", (size << 3) | (btype << 1) | int(last))[:3] + content


def raw_literals(data):
    assert len(data) < 32
    return bytes([len(data) << 3]) + data


def rle_seq_block(literals, ll_code, of_code, ml_code, bits, nb_bits, nb_seq=1):
    """Compressed block: raw literals, all three tables in RLE mode, a bitstream of `nb_bits`
    bits holding the value `bits` (read from the top), closed by the end marker."""
    stream_value = bits | (1 << nb_bits)
    nbytes = (nb_bits + 8) // 8
    stream = stream_value.to_bytes(nbytes, "little")
    seq = bytes([nb_seq, 0x54, ll_code, of_code, ml_code]) + stream
    return raw_literals(literals) + seq


def main():
    # CLI frames (content size + checksum by default).
    a = sparse(300000, 0.002, 1)
    b = bf16_like(200000, 0.05, 2)
    write("good_cli_l3.zst", cli(["-3"], a))
    write("good_cli_l19.zst", cli(["-19"], b))
    write("good_cli_long_l9.zst", cli(["-9", "--long=20"], a + a))
    write("good_cli_stdin_nosize.zst", cli_stdin(["-1"], b))
    write("good_cli_no_check.zst", cli(["-3", "--no-check"], a))
    write("good_cli_multi.zst", cli(["-1"], a[:1000]) + cli(["-5"], b[:5000]))
    write("good_cli_zeros.zst", cli(["-3"], bytes(1 << 20)))

    # python-zstandard frames.
    write("good_py_lm5.zst",
          zstandard.ZstdCompressor(level=-5, write_checksum=True).compress(a))
    write("good_py_l1_nosize.zst",
          zstandard.ZstdCompressor(level=1, write_content_size=False).compress(b))
    cobj = zstandard.ZstdCompressor(level=3, write_checksum=True).compressobj()
    flushed = b""
    for i in range(0, len(b), 7000):  # flushes produce many small blocks
        flushed += cobj.compress(b[i:i + 7000]) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    flushed += cobj.flush()
    write("good_py_flushed_blocks.zst", flushed)
    dense = random.Random(3).randbytes(5000)
    write("good_py_dense_raw.zst", zstandard.ZstdCompressor(level=3).compress(dense))

    # Hand-built frames.
    write("good_empty_frame.zst", frame_header(single=True, fcs=0) + block(0, b"", True))
    write("good_skippable_only.zst", struct.pack("<II", 0x184D2A5F, 3) + b"abc")
    write("good_rle_blocks.zst",
          frame_header(window_log=17, fcs=200000) + block(1, b"\x00", False, 100000) +
          block(1, b"\x07", False, 1000) + block(1, b"\x00", True, 99000))
    # Literals "ab" then a match of 5 at offset 2 (overlapping) then nothing: "abababa".
    write("good_overlap_match.zst",
          frame_header(window_log=10, fcs=7) +
          block(2, rle_seq_block(b"ab", 2, 2, 2, 0b01, 2), True))
    # Zero sequences written in 2 bytes (RFC-valid; libzstd 1.5.4 rejects it).
    write("good_zero_seq_2byte.zst",
          frame_header(window_log=10, fcs=3) + block(2, raw_literals(b"xyz") + b"\x80\x00", True))

    # Bad frames.
    full = cli(["-3"], a)
    write("bad_truncated.zst", full[:len(full) // 2])
    bad = bytearray(full)
    bad[-1] ^= 0xFF
    write("bad_checksum.zst", bytes(bad))
    write("bad_reserved_block.zst", frame_header(window_log=10) + block(3, b"", True))
    write("bad_dictionary.zst", frame_header(window_log=10, dict_id=1234) + block(0, b"x", True))
    write("bad_window_too_large.zst", MAGIC + b"\x00" + bytes([(31 - 10 + 1) << 3]) +
          block(0, b"", True))
    write("bad_content_size.zst", frame_header(single=True, fcs=5) + block(0, b"abcd", True))
    write("bad_trailing_garbage.zst", cli(["-1"], b[:100]) + b"\x01\x02")
    write("bad_unknown_magic.zst", b"\x00\x01\x02\x03\x04\x05\x06\x07")
    # "a" then a match at offset 5 from position 1: reaches before the frame start.
    write("bad_offset_before_start.zst",
          frame_header(window_log=10, fcs=4) + block(2, rle_seq_block(b"a", 1, 3, 0, 0, 3), True))
    # LL = 0 with Offset_Value 3 means rep1 - 1 = 0 (libzstd 1.5.4 quietly uses 1).
    write("bad_offset_zero_rep.zst",
          frame_header(window_log=10, fcs=5) + block(1, b"\x05", False, 2) +
          block(2, rle_seq_block(b"", 0, 1, 0, 0b1, 1), True))
    write("bad_zero_seq_extra.zst",
          frame_header(window_log=10, fcs=3) + block(2, raw_literals(b"xyz") + b"\x00\x00", True))
    write("bad_treeless_first.zst",
          frame_header(window_log=10, fcs=10) + block(2, b"\x53\x01\x00\x01\x00\x80", True))


if __name__ == "__main__":
    main()
