"""Apply a deltakv.delta/1 delta with plain numpy XOR: an independent reference for `deltakv apply`."""
import json, os, shutil, sys, zlib
import numpy as np, zstandard

parent_dir, delta_dir, out_dir = sys.argv[1:4]
manifest = json.load(open(os.path.join(delta_dir, "manifest.json")))
assert manifest["format"] == "deltakv.delta/1" and manifest["metadata"]["delta_encoding"] == "xor"
parent = {}  # tensor name -> bytes
for f in sorted(x for x in os.listdir(parent_dir) if x.endswith(".safetensors")):
    raw = open(os.path.join(parent_dir, f), "rb").read()
    n = int.from_bytes(raw[:8], "little")
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            parent[k] = raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]


def xor_digest(xor):
    """FORMAT.md 2.5: sum of little-endian 64-bit words times splitmix64(j), mod 2^128."""
    words = np.frombuffer(xor + bytes(-len(xor) % 8), "<u8")
    total = 0
    for j in np.flatnonzero(words):
        z = (int(j) + 0x9E3779B97F4A7C15) % 2**64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        total += int(words[j]) * (z ^ (z >> 31))
    return f"{total % 2**128:032x}"


new = dict(parent)
for t in manifest["tensors"]:
    assert f"{zlib.adler32(parent[t['name']]):08x}" == t["parent_adler32"], t["name"]
    buf = np.frombuffer(parent[t["name"]], np.uint8).copy()
    for fr in t["frames"]:
        blob = open(os.path.join(delta_dir, fr["object"]), "rb").read()
        comp = blob[fr["object_offset"]:fr["object_offset"] + fr["compressed_length"]]
        xor = zstandard.ZstdDecompressor().stream_reader(comp, read_across_frames=True).read()
        assert len(xor) == fr["length"], t["name"]
        assert "xor_digest" not in fr or xor_digest(xor) == fr["xor_digest"], t["name"]
        buf[fr["offset"]:fr["offset"] + fr["length"]] ^= np.frombuffer(xor, np.uint8)
    new[t["name"]] = buf.tobytes()
    assert f"{zlib.adler32(new[t['name']]):08x}" == t["adler32"], t["name"]
os.makedirs(out_dir)
files = manifest.get("checkpoint", {}).get("files")
if files is None:  # same files and headers as the parent
    files = []
    for f in sorted(x for x in os.listdir(parent_dir) if x.endswith(".safetensors")):
        raw = open(os.path.join(parent_dir, f), "rb").read(8)
        n = int.from_bytes(raw, "little")
        files.append({"name": f, "header": open(os.path.join(parent_dir, f), "rb").read(8 + n)[8:].decode()})
for f in files:
    header = f["header"].encode()
    entries = sorted((v["data_offsets"][0], k) for k, v in json.loads(header).items() if k != "__metadata__")
    with open(os.path.join(out_dir, f["name"]), "wb") as out:
        out.write(len(header).to_bytes(8, "little") + header)
        for _, name in entries:
            out.write(new[name])
