"""families/sana/adapter.py: the model card's snippet, rows and license, and the adapter file."""

from __future__ import annotations

from sana_configs import sana_cfg

from dit_lora.registry import get_family


def test_usage_snippet_card_and_license():
    family = get_family("sana")
    cfg = sana_cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers",
               complex_human_instruction=False, validation_prompt='a "cat"')
    snippet = family.card.usage_snippet(cfg, "me/adapter")
    assert 'pipe.load_lora_weights("me/adapter")' in snippet and "complex_human_instruction=None" in snippet
    assert '"a \\"cat\\""' in snippet
    compile(snippet, "snippet", "exec")
    assert "complex_human_instruction=None" not in family.card.usage_snippet(sana_cfg(complex_human_instruction=True), "x")
    settings = family.card.card_settings(cfg)
    assert settings["weighting_scheme"] == "logit_normal" and settings["max_sequence_length"] == 300
    assert family.card.base_model_license(cfg.model) == "other" and family.card.base_model_license(sana_cfg().model) is None


def test_the_adapter_is_saved_under_the_familys_weight_name(tmp_path):
    import torch
    from safetensors.torch import load_file

    spec = get_family("sana")
    lora = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.ones(1, 4),
            "transformer_blocks.0.attn1.to_q.lora_B.weight": torch.ones(4, 1)}
    path = spec.adapter.save_adapter(tmp_path, lora, {"r": 1, "lora_alpha": 1})
    assert path == tmp_path / spec.info.adapter_weight_name and path.is_file()
    assert set(load_file(str(path))) == {f"transformer.{k}" for k in lora}
