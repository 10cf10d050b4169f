"""LoRA injection, parameter groups, precision policy, and the save -> load_lora_weights round trip."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.families import get_family
from dit_lora.api import load_adapter
from dit_lora.output.adapter import ADAPTER_FILE, NonFiniteWeightsError, write_adapter
from dit_lora.training import trainables


def _metadata(path) -> dict:
    """An adapter file's safetensors metadata (rank/alpha as diffusers stores them)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return dict(fh.metadata() or {})


def _cfg(model, **kw) -> TrainConfig:
    return TrainConfig(pretrained_model_name_or_path=str(model), train_data_dir="unused", resolution=64, **kw)


@pytest.fixture(scope="module")
def loaded(tiny_sana):
    family = get_family("sana")
    cfg = _cfg(tiny_sana)
    comps = family.load_components(cfg, torch.device("cpu"))
    family.configure(comps, cfg)
    return family, cfg, comps


def test_precision_policy(loaded):
    family, cfg, comps = loaded
    assert comps.model.dtype == torch.bfloat16
    assert next(comps.encoders["text_encoder"].parameters()).dtype == torch.bfloat16
    assert next(comps.encoders["vae"].parameters()).dtype == torch.float32
    assert not any(p.requires_grad for p in comps.model.parameters())


def _fresh_transformer(tiny_sana):
    from diffusers import SanaTransformer2DModel

    return SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.bfloat16)


def test_lora_weights_are_fp32_masters_on_bf16_base(tiny_sana):
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=("to_q", "to_out.0"), seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and p.dtype == torch.float32 for n, p in trainable.items())
    frozen = [p for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    assert any(n.endswith("to_out.0.lora_A.default.weight") for n in trainable)


def test_param_groups_and_learning_rates(tiny_sana):
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q", "to_k"), seed=0)
    backbone = trainables.unfreeze_backbone(model, ["caption_projection", r"time_embed\."])
    assert backbone and all("caption_projection" in n or "time_embed." in n for n in backbone)
    groups = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=backbone, backbone_learning_rate=1e-5,
                                         weight_decay=0.01, loraplus_lr_ratio=None)
    info = {g.name: g for g in trainables.describe_groups(groups)}
    assert set(info) == {"lora", "backbone"}
    assert info["lora"].lr == 1e-4 and info["backbone"].lr == 1e-5
    n_lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert info["lora"].num_params == n_lora
    assert info["backbone"].num_params == sum(dict(model.named_parameters())[n].numel() for n in backbone)
    table = trainables.format_groups(list(info.values()))
    assert "backbone" in table and f"{n_lora:,}" in table

    plus = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=backbone, backbone_learning_rate=1e-5,
                                       weight_decay=0.0, loraplus_lr_ratio=16)
    by_name = {g["name"]: g for g in plus}
    assert by_name["lora_A"]["lr"] == 1e-4 and by_name["lora_B"]["lr"] == pytest.approx(1.6e-3)
    assert all("lora_A" in n for n, p in model.named_parameters() if any(p is q for q in by_name["lora_A"]["params"]))
    assert by_name["backbone"]["lr"] == 1e-5
    ids = [id(p) for g in plus for p in g["params"]]
    assert len(ids) == len(set(ids)) == sum(1 for p in model.parameters() if p.requires_grad)


def test_bad_targets_and_patterns_name_valid_options(tiny_sana):
    from dit_lora.errors import UserError

    model = _fresh_transformer(tiny_sana)
    with pytest.raises(UserError, match="to_q"):
        trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_qq",), seed=0)
    with pytest.raises(UserError, match="--train_backbone"):
        trainables.unfreeze_backbone(model, ["no_such_module"])


def _inputs(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    x = torch.randn(2, cfg.in_channels, 8, 8, generator=g).to(torch.bfloat16)
    text = torch.randn(2, 12, cfg.caption_channels, generator=g).to(torch.bfloat16)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 6:] = 0
    t = torch.tensor([900.0, 150.0])
    return dict(hidden_states=x, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t, return_dict=False)


def test_saved_adapter_reloads_at_trained_strength(tiny_sana, tmp_path):
    """alpha != rank: the scale is folded into lora_B, so the stock loader and a metadata-blind one (ComfyUI, old
    diffusers: alpha taken = rank) both reproduce the trained model; the live model is left as trained."""
    from diffusers import SanaPipeline
    from safetensors.torch import load_file, save_file

    family = get_family("sana")
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=16, dropout=0.0, targets=family.default_lora_layers, seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    with torch.no_grad():  # stand-in for training: make lora_B non-zero
        g = torch.Generator().manual_seed(3)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        trained = model(**_inputs(model))[0].float()
    live = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    lora, backbone = trainables.split_trainable_state(model, [])
    write_adapter(family, tmp_path, lora, model.peft_config["default"].to_dict(), backbone, [])
    meta = json.loads(_metadata(tmp_path / ADAPTER_FILE)["lora_adapter_metadata"])
    assert meta["transformer.r"] == 4 and meta["transformer.lora_alpha"] == 4  # scale 16 / 4 is in lora_B
    saved = load_file(str(tmp_path / ADAPTER_FILE))
    for name, value in live.items():  # folded on export only: the live (checkpointed) weights are untouched
        assert torch.equal(dict(model.named_parameters())[name], value), name
        key = "transformer." + name.replace(".default.", ".")
        assert torch.equal(saved[key], value * 4 if "lora_B" in name else value), name
    # A metadata-blind consumer: the same tensors in a file without diffusers' metadata.
    blind = tmp_path / "blind"
    blind.mkdir()
    save_file(saved, str(blind / ADAPTER_FILE))
    assert "lora_adapter_metadata" not in _metadata(blind / ADAPTER_FILE)

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        base_out = _fresh_transformer(tiny_sana)(**_inputs(model))[0].float()
    change = (trained - base_out).abs().max()
    assert change > 1e-2  # the adapter does something measurable
    for folder in (tmp_path, blind):
        pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.bfloat16)
        pipe.load_lora_weights(folder)
        assert next(iter(pipe.transformer.transformer_blocks[0].attn1.to_q.scaling.values())) == 1.0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            loaded_out = pipe.transformer.eval()(**_inputs(model))[0].float()
        # bf16 LoRA weights after loading vs fp32 masters: equal up to bf16 rounding, far below the LoRA effect
        # (at the wrong strength, e.g. the unfolded file read as alpha = rank, it is off by over 0.3x the change).
        assert (loaded_out - trained).abs().max() < 0.05 * change, folder


def test_fold_lora_scale_keeps_the_function_for_rslora_patterns_and_bias():
    """alpha / sqrt(r) (rsLoRA), per-layer rank/alpha patterns and lora_B biases fold exactly as PEFT scales them."""
    import copy
    import inspect

    from peft import LoraConfig, inject_adapter_in_model

    from dit_lora.output.adapter import fold_lora_scale

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    x = torch.randn(3, 8)
    configs = [LoraConfig(r=4, lora_alpha=16, use_rslora=True, target_modules=["0", "1"]),
               LoraConfig(r=4, lora_alpha=16, rank_pattern={"1": 2}, alpha_pattern={"0": 3}, target_modules=["0", "1"],
                          lora_bias=True)]
    for config in configs:
        model = inject_adapter_in_model(config, copy.deepcopy(base))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_" in name:
                    param.copy_(torch.randn(param.shape))
            want = model(x)
        state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
        before = {k: v.clone() for k, v in state.items()}
        folded, folded_config = fold_lora_scale(state, config.to_dict())
        assert all(torch.equal(state[k], before[k]) for k in state)  # inputs untouched
        params = inspect.signature(LoraConfig).parameters
        fresh = inject_adapter_in_model(LoraConfig(**{k: v for k, v in folded_config.items() if k in params}),
                                        copy.deepcopy(base))
        assert all(m.scaling["default"] == 1.0 for m in fresh.modules() if hasattr(m, "scaling"))
        missing = fresh.load_state_dict({k.replace(".lora_A", ".lora_A.default").replace(".lora_B", ".lora_B.default"): v
                                         for k, v in folded.items()}, strict=False).missing_keys
        assert not [k for k in missing if "lora_" in k]
        with torch.no_grad():
            torch.testing.assert_close(fresh(x), want, rtol=1e-5, atol=1e-6 * want.abs().max().item())


def test_backbone_weights_round_trip_with_load_adapter(tiny_sana, tmp_path):
    from diffusers import SanaPipeline

    family = get_family("sana")
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q",), seed=0)
    names = trainables.unfreeze_backbone(model, ["caption_projection"])
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in names or "lora_B" in n:
                p.add_(0.1)
    lora, backbone = trainables.split_trainable_state(model, names)
    write_adapter(family, tmp_path, lora, model.peft_config["default"].to_dict(), backbone, ["caption_projection"])
    pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.bfloat16)
    load_adapter(pipe, tmp_path)
    loaded = dict(pipe.transformer.named_parameters())
    for n in names:
        assert torch.equal(loaded[n], dict(model.named_parameters())[n].to(torch.bfloat16))


def test_non_finite_adapter_is_never_written(tmp_path):
    family = get_family("sana")
    bad = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.tensor([[float("nan")]])}
    with pytest.raises(NonFiniteWeightsError, match="nothing was written"):
        write_adapter(family, tmp_path, bad, {"r": 1, "lora_alpha": 1}, {}, [])
    assert not (tmp_path / ADAPTER_FILE).exists()
    assert not any(tmp_path.iterdir())


def test_fp16_checkpoint_is_flagged(tmp_path):
    from safetensors.torch import save_file

    family = get_family("sana")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "model_index.json").write_text("{}")
    save_file({"w": torch.zeros(2, dtype=torch.float16)}, str(tmp_path / "transformer" / "m.safetensors"))
    notes = family.precision_notes(_cfg(tmp_path))
    assert notes and "fp16" in notes[0] and "_BF16_diffusers" in notes[0]
    save_file({"w": torch.zeros(2, dtype=torch.bfloat16)}, str(tmp_path / "transformer" / "m.safetensors"))
    assert family.precision_notes(_cfg(tmp_path)) == []


@pytest.mark.parametrize("hub_id, advice", [
    ("Efficient-Large-Model/Sana_600M_1024px_diffusers", "has no BF16 release"),
    ("Efficient-Large-Model/Sana_1600M_1024px_diffusers",
     "Prefer its BF16 release, Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"),
])
def test_fp16_advice_names_the_bf16_release_only_where_one_exists(tmp_path, hub_id, advice):
    """Hub layout: fp32 main files beside an fp16 variant; --variant fp16 is what is read."""
    from real_layout import write_configs
    from safetensors.torch import save_file

    folder = write_configs(hub_id, tmp_path / "model")
    save_file({"w": torch.zeros(2)}, str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    save_file({"w": torch.zeros(2, dtype=torch.float16)},
              str(folder / "transformer" / "diffusion_pytorch_model.fp16.safetensors"))
    family = get_family("sana")
    assert family.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder))) == []  # fp32 main files
    (note,) = family.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder), variant="fp16"))
    assert advice in note
    assert family.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder), variant="fp16",
                                              mixed_precision="fp16")) == []
