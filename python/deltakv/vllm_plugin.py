"""vLLM plugin entry point (group "vllm.general_plugins", declared in pyproject.toml): vLLM calls
register() in every process it starts, so the weight transfer backend "deltakv" is known to the
engine core and the workers whatever their start method. Imports nothing heavy: the backend's
module (deltakv.vllm) is loaded by vLLM only when the backend is selected."""
from __future__ import annotations


def register() -> None:
    """Registers DeltakvWeightTransferEngine as weight transfer backend "deltakv" (idempotent)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    if "deltakv" not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine("deltakv", "deltakv.vllm",
                                                    "DeltakvWeightTransferEngine")
