"""Write a deltakv.delta/1 delta between two safetensors checkpoint directories."""
import json, os, sys, zlib
import numpy as np, zstandard

def tensors(d):  # name -> raw bytes, over every *.safetensors file in d
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        raw = open(os.path.join(d, f), "rb").read()
        n = int.from_bytes(raw[:8], "little")
        for k, v in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__":
                out[k] = raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
    return out

parent_dir, new_dir, out_dir, parent_version, version = sys.argv[1:6]
parent, new = tensors(parent_dir), tensors(new_dir)
os.makedirs(out_dir)
entries, shard = [], open(os.path.join(out_dir, "shard-00000.zst"), "wb")
for name, data in new.items():
    xor = np.bitwise_xor(np.frombuffer(parent[name], np.uint8), np.frombuffer(data, np.uint8))
    if not xor.any():
        continue  # unchanged tensors are omitted
    frame = zstandard.ZstdCompressor(level=3).compress(xor.tobytes())
    entries.append({"name": name, "length": len(data),
                    "parent_adler32": f"{zlib.adler32(parent[name]):08x}",
                    "adler32": f"{zlib.adler32(data):08x}",
                    "frames": [{"offset": 0, "length": len(data), "object": "shard-00000.zst",
                                "object_offset": shard.tell(), "compressed_length": len(frame)}]})
    shard.write(frame)
shard.close()
meta = {"delta_encoding": "xor", "compression_format": "zstd", "checksum_format": "adler32",
        "version": version, "base_version": parent_version}
objects = [{"name": "shard-00000.zst", "size": os.path.getsize(shard.name)}]
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"format": "deltakv.delta/1", "metadata": meta, "objects": objects,
               "tensors": entries}, f)
