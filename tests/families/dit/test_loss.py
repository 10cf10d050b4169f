"""families/dit/loss.py: labels dropped to the run's null class, the epsilon half of a learned-sigma output."""

from __future__ import annotations

import torch
from diffusers import DDPMScheduler

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.dit.state import DiTRun
from dit_lora.registry import get_family


class _Recorder(torch.nn.Module):
    """A stand-in transformer: records the labels it is given and predicts 2 x the channels (learned sigma)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.labels: list[torch.Tensor] = []

    def forward(self, x, timestep, class_labels, return_dict=False):
        self.labels.append(class_labels)
        return (torch.cat([x * self.scale, torch.full_like(x, 1e6)], dim=1),)


def test_labels_drop_to_the_null_class_and_only_epsilon_enters_the_loss():
    loss = get_family("dit").loss
    cfg = TrainConfig.for_family("dit")
    model = _Recorder()
    batch = {"latents": torch.randn(8, 4, 4, 4), "class_labels": torch.zeros(8, dtype=torch.long)}
    comps = Components(model=model, scheduler=DDPMScheduler(),
                       state=DiTRun(class_dropout_prob=1.0, null_class=7, learned_sigma=True, in_channels=4))
    value = loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(0), cfg)
    assert model.labels[-1].tolist() == [7] * 8  # every label dropped at probability 1
    assert torch.isfinite(value) and value < 1e3  # the variance half (1e6) is not in the loss
    comps.state.class_dropout_prob = 0.0
    loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(0), cfg)
    assert model.labels[-1].tolist() == [0] * 8
