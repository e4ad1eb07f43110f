"""Regenerates the format test vectors: a tiny parent and child checkpoint (plain Python, no
deltakv code) and the delta between them written by `deltakv publish`.

Usage: python3 make_vectors.py PATH/TO/deltakv   (run from this directory)
"""
import json, os, shutil, struct, subprocess, sys

def write_safetensors(path, tensors, metadata):
    header, blob = {"__metadata__": metadata}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)

def tensors(step):
    w = bytearray(struct.pack("<64H", *[(0x3c00 + 37 * i) & 0xffff for i in range(64)]))  # bf16-ish
    norm = bytearray(struct.pack("<4f", 1.0, 0.5, 0.25, 0.125))
    codes = bytearray(range(16))
    if step:
        w[10] ^= 0x01; w[11] ^= 0x80; w[100] ^= 0x03  # a few changed bytes
        codes[15] = 0
    return [("layer.w", "BF16", [8, 8], bytes(w)), ("layer.norm", "F32", [4], bytes(norm)),
            ("codes", "U8", [16], bytes(codes)), ("empty", "BF16", [0], b"")]

for d in ("parent", "child", "delta"):
    shutil.rmtree(d, ignore_errors=True)
os.makedirs("parent"); os.makedirs("child")
write_safetensors("parent/model.safetensors", tensors(False), {"format": "pt"})
write_safetensors("child/model.safetensors", tensors(True), {"format": "pt", "step": "1"})
subprocess.run([sys.argv[1], "publish", "--parent", "parent", "--new", "child", "--out", "delta",
                "--parent-version", "v1", "--version", "v2", "--level", "3", "--threads", "1"],
               check=True)
