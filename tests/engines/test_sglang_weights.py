"""deltakv.sglang.DeltakvWeightUpdater on a CPU torch.nn.Module in the SGLang venv and a real
sidecar: an update applied in place equals a module loaded with the new weights; a refused
sync changes nothing."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang.srt.mem_cache.hicache_storage")

import deltakv  # noqa: E402
from deltakv.sglang import DeltakvWeightUpdater  # noqa: E402
from sidecar_proc import TOKEN  # noqa: E402
from torch_state import module_state  # noqa: E402




def test_update_in_place(sidecar_factory, tmp_path):
    s = sidecar_factory()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    model[1].to(torch.bfloat16)
    new = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    new[1].to(torch.bfloat16)
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        new[0].weight[2, 3] += 1.0
        new[1].bias[1] = 0.5
    deltakv.publish(module_state(model), module_state(new), str(tmp_path / "d"),
                    parent_version="v1", version="v2")
    u = DeltakvWeightUpdater(model, shm_name=s.shm, initial_version="v1")
    u.update("v2", delta=str(tmp_path / "d"), sidecar_url=s.url, token=TOKEN, timeout_s=60)
    for (name, p), (_n, q) in zip(model.named_parameters(), new.named_parameters()):
        assert torch.equal(p, q), name
    assert (u.handle.version_id, u.handle.policy_version) == ("v2", 1)
    with pytest.raises(deltakv.FailedPreconditionError, match="aborted"):
        u.update("v3", delta=str(tmp_path / "missing"), sidecar_url=s.url, token=TOKEN,
                 timeout_s=60)
    for (name, p), (_n, q) in zip(model.named_parameters(), new.named_parameters()):
        assert torch.equal(p, q), name
    u.close()


def test_custom_weight_loader_contract(sidecar_factory, tmp_path):
    """The loader as SGLang's update_weights_from_tensor calls it: resolved by SGLang's own
    dynamic_import from the load_format string, then loader(model, named_tensors)."""
    from sglang.srt.model_executor.model_runner_components import weight_updater
    from deltakv import sglang as dsg
    s = sidecar_factory()
    torch.manual_seed(2)
    model, new = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        new.weight[1, 2] += 0.5
    deltakv.publish(module_state(model), module_state(new), str(tmp_path / "d"),
                    parent_version="v1", version="v2")
    loader = weight_updater.dynamic_import(dsg.LOADER)
    with pytest.raises(deltakv.FailedPreconditionError, match="attach_request"):
        loader(model, dsg.update_request("v2"))
    loader(model, dsg.attach_request(shm_name=s.shm, initial_version="v1"))
    with pytest.raises(deltakv.FailedPreconditionError, match="already"):
        loader(model, dsg.attach_request(shm_name=s.shm, initial_version="v1"))
    loader(model, dsg.update_request("v2", delta=str(tmp_path / "d"), sidecar_url=s.url,
                                     token=TOKEN, timeout_s=60))
    assert torch.equal(model.weight, new.weight) and torch.equal(model.bias, new.bias)
    with pytest.raises(deltakv.InvalidArgumentError, match="one 'deltakv.request'"):
        loader(model, [("model.weight", torch.zeros(1))])
    with pytest.raises(deltakv.InvalidArgumentError, match="malformed"):
        loader(model, [("deltakv.request", torch.tensor([1, 2, 3], dtype=torch.uint8))])
    # Anything but a uint8 tensor of one of the two requests is refused the same way.
    good = dsg.update_request("v2")[0][1]
    with pytest.raises(deltakv.InvalidArgumentError, match="uint8"):
        loader(model, [("deltakv.request", good.to(torch.int8))])

    def raw(fields):
        return [("deltakv.request", torch.tensor(list(json.dumps(fields).encode()),
                                                 dtype=torch.uint8))]

    for fields, match in (({"op": "update"}, "without \\['version'\\]"),
                          ({"op": "update", "version": "v2", "bogus": 1}, "unknown fields"),
                          ({"op": "attach", "shm_name": s.shm, "bogus": 1}, "unknown fields")):
        with pytest.raises(deltakv.InvalidArgumentError, match=match):
            loader(model, raw(fields))
    dsg._UPDATERS.pop(model).close()
