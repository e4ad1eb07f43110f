"""A torch module's parameters as deltakv.publish takes them (bf16 as its bits, "BF16")."""
from __future__ import annotations

import torch


def module_state(model: torch.nn.Module) -> dict:
    out = {}
    for name, p in model.named_parameters():
        t = p.detach().clone()
        out[name] = (t.view(torch.int16).numpy(), "BF16") if t.dtype == torch.bfloat16 \
            else t.numpy()
    return out
