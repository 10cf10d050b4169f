"""families/cogvideox/adapter.py: the model card's license rule (saving and reloading on tiny pipelines, the snippet
and the rows: test_spec.py)."""

from __future__ import annotations

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family


def test_license_by_release():
    card = get_family("cogvideox").card

    def license_of(name):
        return card.base_model_license(TrainConfig(family="cogvideox", pretrained_model_name_or_path=name).model)

    assert license_of("THUDM/CogVideoX-2b") == "apache-2.0" and license_of("zai-org/CogVideoX1.5-5B") == "other"
    assert license_of("someone/CogVideoX-2b-finetune") is None
    assert get_family("cogvideox").adapter.info.adapter_weight_name == "pytorch_lora_weights.safetensors"
