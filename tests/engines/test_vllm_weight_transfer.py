"""deltakv.vllm.DeltakvWeightTransferEngine through vLLM's own WeightTransferEngineFactory and
update API calls (init_transfer_engine, start/update/finish_weight_update) on a CPU
torch.nn.Module and a real sidecar: the updated model equals one loaded from the new weights."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.distributed.weight_transfer.base")
from vllm.config.parallel import ParallelConfig  # noqa: E402
from vllm.config.weight_transfer import WeightTransferConfig  # noqa: E402
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory  # noqa: E402

import deltakv  # noqa: E402
from deltakv import vllm as dvllm  # noqa: E402
from sidecar_proc import TOKEN  # noqa: E402
from torch_state import module_state  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 16, bias=False)
        self.norm = torch.nn.Parameter(torch.ones(16, dtype=torch.bfloat16))

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) * self.norm.float()




def make_engine(model):
    dvllm.register()
    vllm_config = types.SimpleNamespace(parallel_config=ParallelConfig(), model_config=None)
    return WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend="deltakv"),
                                                     vllm_config, torch.device("cpu"), model)


def test_update_through_vllms_api_equals_the_new_weights(sidecar_factory, tmp_path):
    s = sidecar_factory()
    torch.manual_seed(0)
    model, new_model = Tiny(), Tiny()
    new_model.load_state_dict(model.state_dict())
    with torch.no_grad():  # an RL step: a few weights move
        new_model.up.weight[3, :5] += 0.25
        new_model.down.weight[1, 7] -= 1.0
        new_model.norm[2] = 1.5
    deltakv.publish(module_state(model), module_state(new_model), str(tmp_path / "d12"),
                    parent_version="v1", version="v2")
    engine = make_engine(model)
    assert isinstance(engine, dvllm.DeltakvWeightTransferEngine)
    engine.init_transfer_engine(engine.parse_init_info({"shm_name": s.shm,
                                                        "initial_version": "v1"}))
    x = torch.randn(4, 32)
    before = model(x)
    engine.start_weight_update()
    engine.update_weights({"version": "v2", "delta": str(tmp_path / "d12"),
                           "sidecar_url": s.url, "token": TOKEN, "timeout_s": 60})
    engine.finish_weight_update()
    for (name, p), (_n, q) in zip(model.named_parameters(), new_model.named_parameters()):
        assert torch.equal(p, q), name
    assert torch.equal(model(x), new_model(x)) and not torch.equal(before, model(x))
    assert (engine.handle.version_id, engine.handle.policy_version) == ("v2", 1)

    # A delta whose parent is not what the model serves: refused, nothing changes.
    deltakv.publish(module_state(model), module_state(model), str(tmp_path / "same"),
                    parent_version="v7", version="v8")
    engine.start_weight_update()
    with pytest.raises(deltakv.DeltakvError, match="aborted"):
        engine.update_weights({"version": "v8", "delta": str(tmp_path / "same"),
                               "sidecar_url": s.url, "token": TOKEN, "timeout_s": 60})
    engine.finish_weight_update()
    assert engine.handle.version_id == "v2"
    for (name, p), (_n, q) in zip(model.named_parameters(), new_model.named_parameters()):
        assert torch.equal(p, q), name
    engine.shutdown()


def test_api_misuse_is_refused(sidecar_factory):
    s = sidecar_factory()
    engine = make_engine(Tiny())
    with pytest.raises(deltakv.FailedPreconditionError, match="init_transfer_engine"):
        engine.start_weight_update()
    with pytest.raises(ValueError, match="Invalid init_info"):
        engine.parse_init_info({"no_such_field": 1})
    engine.init_transfer_engine(engine.parse_init_info({"shm_name": s.shm}))
    with pytest.raises(deltakv.FailedPreconditionError, match="initialized"):
        engine.init_transfer_engine(engine.parse_init_info({"shm_name": s.shm}))
    with pytest.raises(ValueError, match="version"):
        engine.update_weights({})
    with pytest.raises(TimeoutError):  # nobody asked the sidecar for this version
        engine.update_weights({"version": "v9", "timeout_s": 0.2})
    engine.shutdown()
    with pytest.raises(deltakv.NotFoundError, match="control segment"):
        make_engine(Tiny()).init_transfer_engine(
            dvllm.DeltakvInitInfo(shm_name="deltakv-no-such-segment", attach_timeout_ms=50))
