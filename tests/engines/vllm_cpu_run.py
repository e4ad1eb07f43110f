"""One vLLM CPU engine process for the end-to-end tests (test_vllm_cpu_e2e.py): starts an LLM on a
local checkpoint as the JSON job in argv[1] says, generates greedily from token-id prompts, and
prints one JSON line with the outputs and vLLM's own prefix-cache counters.

Job fields: model (dir), prompts (lists of token ids), max_tokens, block_size, kv_pool (use the
deltakv connector over this pool), update (a deltakv weight update: shm, initial_version,
version, delta, sidecar_url, token_file; outputs are generated before and after it), register
(default true: register the "deltakv" weight transfer backend by hand; false: leave it to the
package's vllm.general_plugins entry point, and report the entry points vLLM sees).
"""
from __future__ import annotations

import json
import sys


def counters(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        if m.name in ("vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries",
                      "vllm:prefix_cache_hits", "vllm:prompt_tokens"):
            out[m.name] = int(getattr(m, "value", 0))
    return out


def generate(llm, prompts, max_tokens):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                           use_tqdm=False)
    return [list(r.outputs[0].token_ids) for r in results], \
        [int(r.num_cached_tokens or 0) for r in results]


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    from vllm import LLM
    kwargs = dict(model=job["model"], skip_tokenizer_init=True, gpu_memory_utilization=0.1,
                  max_model_len=512, max_num_seqs=4, dtype="float32", enforce_eager=True,
                  seed=0, block_size=job.get("block_size", 32), disable_log_stats=False)
    if job.get("kv_pool"):
        kwargs["kv_transfer_config"] = {
            "kv_connector": "DeltakvConnector",
            "kv_connector_module_path": "deltakv.vllm_connector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"deltakv_pool": job["kv_pool"]}}
    update = job.get("update")
    out = {}
    if update:
        if job.get("register", True):
            import deltakv.vllm
            deltakv.vllm.register()
        else:
            from importlib.metadata import entry_points
            out["plugins"] = sorted(f"{ep.name} = {ep.value}"
                                    for ep in entry_points(group="vllm.general_plugins"))
        kwargs["weight_transfer_config"] = {"backend": "deltakv"}
    llm = LLM(**kwargs)
    if update:
        llm.init_weight_transfer_engine({"init_info": {
            "shm_name": update["shm"], "initial_version": update["initial_version"],
            "checkpoint": job["model"]}})
        out["before"], _ = generate(llm, job["prompts"], job["max_tokens"])
        llm.start_weight_update()
        llm.update_weights({"update_info": {
            "version": update["version"], "delta": update["delta"],
            "sidecar_url": update["sidecar_url"], "token_file": update["token_file"],
            "timeout_s": 120}})
        llm.finish_weight_update()
        # KV computed under the old weights is stale: vLLM's own cache and the connector's.
        llm.reset_prefix_cache(reset_connector=bool(job.get("kv_pool")))
    out["outputs"], out["cached"] = generate(llm, job["prompts"], job["max_tokens"])
    out["metrics"] = counters(llm)
    llm.llm_engine.engine_core.shutdown()  # the connector completes its stores
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
