"""deltakv.publish from numpy arrays and from checkpoint directories, checked against the CLI and
by applying the delta with the CLI."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

import deltakv


def safetensors_tensors(d: str) -> dict:
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        raw = open(os.path.join(d, f), "rb").read()
        n = int.from_bytes(raw[:8], "little")
        for k, v in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__":
                b, e = v["data_offsets"]
                out[k] = (v["dtype"], v["shape"], raw[8 + n + b:8 + n + e])
    return out


def as_arrays(tensors: dict) -> dict:
    # Raw bytes as uint8 arrays reinterpreted by dtype name: any safetensors dtype round-trips.
    size = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2,
            "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
            "F64": 8}
    out = {}
    for k, (dtype, shape, data) in tensors.items():
        a = np.frombuffer(data, np.uint8)  # read-only views of the file's bytes
        if shape:
            a = a.reshape(*shape[:-1], shape[-1] * size[dtype])
        elif size[dtype] != 1:
            a = a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[size[dtype]]).reshape(())
        else:
            a = a.reshape(())
        out[k] = (a, dtype)
    return out


@pytest.fixture
def checkpoints(deltakv_bin, tmp_path):
    t = lambda p: str(tmp_path / p)
    subprocess.run([deltakv_bin, "checkpoint", "generate", "--out", t("v1"), "--size-mib", "2",
                    "--files", "2"], check=True, capture_output=True)
    subprocess.run([deltakv_bin, "checkpoint", "mutate", "--parent", t("v1"), "--out", t("v2"),
                    "--density", "0.01", "--seed", "5"], check=True, capture_output=True)
    return t


def test_versions():
    assert deltakv.__version__.count(".") == 2
    assert deltakv.abi_version() >= 1


def test_publish_from_directories_equals_the_cli(deltakv_bin, checkpoints):
    t = checkpoints
    s = deltakv.publish(t("v1"), t("v2"), t("py"), frame_bytes=1 << 20)
    subprocess.run([deltakv_bin, "publish", "--parent", t("v1"), "--new", t("v2"), "--out",
                    t("cli"), "--frame-mib", "1"], check=True, capture_output=True)
    assert s.tensors_changed > 0 and s.frames > 0 and 0 < s.density < 0.02
    assert sorted(os.listdir(t("py"))) == sorted(os.listdir(t("cli")))
    for f in os.listdir(t("cli")):
        assert open(os.path.join(t("py"), f), "rb").read() == \
            open(os.path.join(t("cli"), f), "rb").read(), f


def test_sequences_equal_the_cli_with_each_parse(deltakv_bin, checkpoints):
    t = checkpoints
    sizes = {}
    for parse in ("runs", "zstd"):
        s = deltakv.publish(t("v1"), t("v2"), t("py-" + parse), frame_bytes=1 << 20,
                            sequences=parse)
        subprocess.run([deltakv_bin, "publish", "--parent", t("v1"), "--new", t("v2"), "--out",
                        t("cli-" + parse), "--frame-mib", "1", "--sequences", parse],
                       check=True, capture_output=True)
        for f in os.listdir(t("cli-" + parse)):
            assert open(os.path.join(t("py-" + parse), f), "rb").read() == \
                open(os.path.join(t("cli-" + parse), f), "rb").read(), (parse, f)
        sizes[parse] = s.compressed_bytes
    assert sizes["runs"] < sizes["zstd"]
    with pytest.raises(ValueError, match="sequences"):
        deltakv.publish(t("v1"), t("v2"), t("py-bad"), sequences="fast")
    assert not os.path.exists(t("py-bad"))


def test_publish_from_arrays_applies_to_the_parent(deltakv_bin, checkpoints):
    t = checkpoints
    parent = as_arrays(safetensors_tensors(t("v1")))
    new = as_arrays(safetensors_tensors(t("v2")))
    s = deltakv.publish(parent, new, t("d"), parent_version="v1", version="v2", threads=2)
    assert s.parent_version == "v1" and s.version == "v2"
    assert s.tensors == len(new) and s.tensors_changed > 0
    subprocess.run([deltakv_bin, "apply", "--parent", t("v1"), "--delta", t("d"), "--out",
                    t("out")], check=True, capture_output=True)
    got = safetensors_tensors(t("out"))
    want = safetensors_tensors(t("v2"))
    assert {k: v[2] for k, v in got.items()} == {k: v[2] for k, v in want.items()}


def test_numpy_dtypes_and_dlpack_objects(tmp_path):
    rng = np.random.default_rng(1)
    a = {"f32": rng.standard_normal((32, 8), dtype=np.float32),
         "i64": np.arange(50, dtype=np.int64),
         "bf16": (rng.integers(0, 1 << 16, (4, 16), dtype=np.uint16), "BF16"),
         "scalar": np.array(1.5, dtype=np.float64)}
    b = {k: (v[0].copy(), v[1]) if isinstance(v, tuple) else v.copy() for k, v in a.items()}
    b["f32"][1, 2] = 7.0
    b["bf16"][0][3, 3] ^= 0x40
    b["scalar"] = np.array(2.5)

    class Wrapped:  # any object that speaks DLPack
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, *args, **kwargs):
            return self.arr.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    b["i64"] = Wrapped(b["i64"])
    s = deltakv.publish(a, b, str(tmp_path / "d"), parent_version="p", version="n")
    assert s.tensors == 4 and s.tensors_changed == 3
    assert s.nonzero_bytes >= 3
    m = json.load(open(tmp_path / "d" / "manifest.json"))
    assert {t["name"] for t in m["tensors"]} == {"f32", "bf16", "scalar"}


def test_bad_input_raises_and_leaves_nothing(tmp_path):
    a = {"w": np.zeros(16, np.float32)}
    out = str(tmp_path / "d")
    with pytest.raises(deltakv.InvalidArgumentError, match="required"):
        deltakv.publish(a, a, out)
    with pytest.raises(deltakv.InvalidArgumentError, match="changed dtype or shape"):
        deltakv.publish(a, {"w": np.zeros(17, np.float32)}, out, parent_version="1", version="2")
    with pytest.raises(deltakv.InvalidArgumentError, match="not in the parent"):
        deltakv.publish(a, {"x": np.zeros(16, np.float32)}, out, parent_version="1", version="2")
    with pytest.raises(deltakv.InvalidArgumentError, match="not C-contiguous"):
        deltakv.publish({"w": np.zeros((4, 8), np.float32)[:, ::2]},
                        {"w": np.zeros((4, 4), np.float32)}, out, parent_version="1",
                        version="2")
    with pytest.raises(deltakv.InvalidArgumentError, match="no safetensors name"):
        deltakv.publish({"c": np.zeros(4, np.complex64)}, {"c": np.zeros(4, np.complex64)}, out,
                        parent_version="1", version="2")
    with pytest.raises(deltakv.InvalidArgumentError, match="level"):
        deltakv.publish(a, a, out, parent_version="1", version="2", level=99)
    with pytest.raises(TypeError):
        deltakv.publish(str(tmp_path), a, out)
    assert not os.path.exists(out)
    e = None
    try:
        deltakv.publish(a, a, out)
    except deltakv.DeltakvError as err:
        e = err
    assert e is not None and e.status == 1 and e.status_name == "INVALID_ARGUMENT"
    assert isinstance(e, ValueError)
    deltakv.publish(a, a, out, parent_version="1", version="2")
    with pytest.raises(deltakv.FailedPreconditionError, match="exists"):
        deltakv.publish(a, a, out, parent_version="1", version="2")
