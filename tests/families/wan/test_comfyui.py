"""families/wan/comfyui.py: a dit-lora Wan adapter in ComfyUI's key format loads, through diffusers' own converter
for such files, to the same transformer output as the diffusers file; every module is named as the original Wan
checkpoint (ComfyUI's names) names a weight; nothing unknown is dropped. With a ComfyUI checkout
(``DIT_LORA_COMFYUI``, marker ``comfyui``) ComfyUI's own loader takes every tensor of the export on its WAN21 model
and applies B·A (alpha/r folded) to each weight, and loads nothing of the diffusers-named file."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from comfyui_loader import expected_deltas, load_in_comfyui, requires_comfyui
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dit_lora.core.errors import UserError
from dit_lora.families.wan.comfyui import SUFFIX, comfyui_module, comfyui_state, write_comfyui_files
from dit_lora.output.adapter import ADAPTER_FILE, write_adapter
from dit_lora.output.export import EXPORT_MARKER
from dit_lora.modeling import trainables

RANK, ALPHA = 4, 12.0  # alpha != rank: the fold into lora_B (scale 3) must survive the export
LOW_FILE = "pytorch_lora_weights_low_noise.safetensors"


def _tiny_wan(i2v: bool, image_dim: int = 12):
    """A 2-layer fp32 WanTransformer3DModel; the I2V one has the image embedder and add_k/add_v projections."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    extra = dict(image_dim=image_dim, added_kv_proj_dim=16) if i2v else {}
    return WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, text_dim=16,
        freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
        rope_max_seq_len=32, **extra,
    ).eval()


def _inputs(model) -> dict:
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, 4, 2, 4, 4, generator=g), timestep=torch.tensor([700.0]),
                  encoder_hidden_states=torch.randn(1, 8, 16, generator=g), return_dict=False)
    if model.config.image_dim:
        inputs["encoder_hidden_states_image"] = torch.randn(1, 5, model.config.image_dim, generator=g)
    return inputs


def _linear_names(model) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def _lora_layers(model) -> list[str]:
    """The modules carrying a loaded LoRA (PEFT layers with at least one adapter)."""
    from peft.tuners.lora import LoraLayer

    return [n for n, m in model.named_modules() if isinstance(m, LoraLayer) and len(m.lora_A) > 0]


def _pipe(transformer):
    from diffusers import WanPipeline

    return WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None, transformer=transformer)


def _train_and_save(model, out_dir, weight_name=ADAPTER_FILE, seed=0):
    """LoRA on every Linear of the blocks, embedders and proj_out, non-zero lora_B, written as dit-lora writes it
    (``write_adapter``: alpha/r folded into lora_B, then ``WanPipeline.save_lora_weights``)."""
    from diffusers import WanPipeline

    trainables.add_lora(model, rank=RANK, alpha=ALPHA, dropout=0.0, targets=_linear_names(model), seed=seed)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.05)
    lora_state, _ = trainables.split_trainable_state(model, [])

    def save_adapter(folder, state, config):
        WanPipeline.save_lora_weights(folder, transformer_lora_layers=state, transformer_lora_adapter_metadata=config,
                                      weight_name=weight_name, safe_serialization=True)

    stand_in = SimpleNamespace(adapter=SimpleNamespace(save_adapter=save_adapter), adapter_extras=None)
    write_adapter(stand_in, out_dir, lora_state, model.peft_config["default"].to_dict(), {}, [])
    return out_dir / weight_name


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_comfyui_file_loads_to_the_trained_output(i2v, tmp_path):
    base = _tiny_wan(i2v)
    trained = copy.deepcopy(base)
    with torch.no_grad():
        base_out = base(**_inputs(base))[0]
    _train_and_save(trained, tmp_path)
    with torch.no_grad():
        trained_out = trained(**_inputs(trained))[0]
    assert (trained_out - base_out).abs().max() > 1e-2  # the LoRA changes the output: the comparison can fail

    (comfy_file,) = write_comfyui_files(tmp_path)
    assert comfy_file == tmp_path / f"pytorch_lora_weights{SUFFIX}"
    keys = load_file(str(comfy_file)).keys()
    assert all(k.startswith("diffusion_model.") for k in keys) and not any(k.endswith(".alpha") for k in keys)

    outputs = {}
    for label, name in (("diffusers", ADAPTER_FILE), ("comfyui", comfy_file.name)):
        fresh = copy.deepcopy(base)
        _pipe(fresh).load_lora_weights(str(tmp_path), weight_name=name)
        assert len(_lora_layers(fresh)) == len(_lora_layers(trained)) == len(_linear_names(base)), label
        with torch.no_grad():
            outputs[label] = fresh(**_inputs(fresh))[0]
    torch.testing.assert_close(outputs["diffusers"], trained_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs["comfyui"], outputs["diffusers"], atol=1e-5, rtol=1e-5)
    if i2v:
        assert any(".cross_attn.k_img." in k for k in keys) and any("img_emb.proj.3." in k for k in keys)


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_every_exported_module_is_a_weight_of_the_original_wan_checkpoint(i2v):
    """Mapped through diffusers' single-file converter (original Wan names -> diffusers'), each exported module
    name is a Linear weight of the model, of the shape the LoRA's product has."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    model = _tiny_wan(i2v)
    weights = model.state_dict()
    state = {}
    for name in _linear_names(model):
        out_f, in_f = weights[f"{name}.weight"].shape
        state[f"transformer.{name}.lora_A.weight"] = torch.randn(RANK, in_f)
        state[f"transformer.{name}.lora_B.weight"] = torch.randn(out_f, RANK)
    comfy = comfyui_state(state)
    modules = sorted({k[len("diffusion_model."):].rsplit(".lora_", 1)[0] for k in comfy})
    assert len(modules) == len(_linear_names(model))
    for module in modules:
        (diffusers_key,) = convert_wan_transformer_to_diffusers({f"{module}.weight": torch.empty(0)})
        assert diffusers_key in weights, (module, diffusers_key)
        out_f, in_f = weights[diffusers_key].shape
        up, down = comfy[f"diffusion_model.{module}.lora_B.weight"], comfy[f"diffusion_model.{module}.lora_A.weight"]
        assert (up.shape[0], down.shape[1]) == (out_f, in_f), module


def test_keys_round_trip_through_diffusers_converter_with_bias_and_dtype():
    """diffusers' converter for ComfyUI-style files gives back exactly the diffusers state: every key and tensor,
    a lora_B.bias (as `diff_b`) included, in its dtype."""
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_wan_lora_to_diffusers

    model = _tiny_wan(i2v=True)
    weights = model.state_dict()
    state = {}
    for name in _linear_names(model):
        out_f, in_f = weights[f"{name}.weight"].shape
        state[f"transformer.{name}.lora_A.weight"] = torch.randn(RANK, in_f).to(torch.bfloat16)
        state[f"transformer.{name}.lora_B.weight"] = torch.randn(out_f, RANK).to(torch.bfloat16)
        state[f"transformer.{name}.lora_B.bias"] = torch.randn(out_f).to(torch.bfloat16)
    comfy = comfyui_state(state)
    assert "diffusion_model.blocks.1.cross_attn.v_img.diff_b" in comfy
    assert all(v.dtype == torch.bfloat16 for v in comfy.values())
    back = _convert_non_diffusers_wan_lora_to_diffusers(dict(comfy))
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        assert torch.equal(back[key], value), key


@pytest.mark.parametrize("key", [
    "transformer.patch_embedding.lora_A.weight",  # a Conv3d dit-lora does not train; ComfyUI's map lacks it too
    "transformer.blocks.0.attn1.norm_q.lora_A.weight",
    "transformer.blocks.0.attn1.to_q.lora_magnitude_vector",  # DoRA: not a plain LoRA ComfyUI reads this way
    "text_encoder.encoder.block.0.lora_A.weight",
])
def test_an_unknown_key_is_refused_by_name(key):
    state = {"transformer.proj_out.lora_A.weight": torch.ones(2, 4), "transformer.proj_out.lora_B.weight":
             torch.ones(4, 2), key: torch.ones(2, 2)}
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        comfyui_state(state)


def test_a_layer_with_only_one_half_is_refused():
    with pytest.raises(UserError, match=r"blocks\.0\.attn1\.to_q` has only lora_A\.weight"):
        comfyui_state({"transformer.blocks.0.attn1.to_q.lora_A.weight": torch.ones(2, 4)})


def test_module_map_names():
    assert comfyui_module("blocks.12.attn1.to_out.0") == "blocks.12.self_attn.o"
    assert comfyui_module("blocks.3.attn2.add_v_proj") == "blocks.3.cross_attn.v_img"
    assert comfyui_module("condition_embedder.time_proj") == "time_projection.1"
    assert comfyui_module("blocks.0.attn1.to_out.00") is None and comfyui_module("xproj_out") is None


def _small_adapter(path, scale=1.0):
    save_file({"transformer.proj_out.lora_A.weight": torch.ones(2, 4) * scale,
               "transformer.proj_out.lora_B.weight": torch.ones(4, 2)}, str(path), metadata={"format": "pt"})


def test_two_experts_are_written_with_their_metadata_and_rewritten(tmp_path):
    _small_adapter(tmp_path / ADAPTER_FILE)
    _small_adapter(tmp_path / LOW_FILE, scale=2.0)
    files = {ADAPTER_FILE: "high", LOW_FILE: "low"}
    written = write_comfyui_files(tmp_path, files)
    assert [p.name for p in written] == [f"pytorch_lora_weights{SUFFIX}", f"pytorch_lora_weights_low_noise{SUFFIX}"]
    for path, (source, expert) in zip(written, files.items()):
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata()
        assert meta[EXPORT_MARKER] == "comfyui" and meta["dit_lora_source"] == source
        assert meta["dit_lora_expert"] == expert
    low = load_file(str(written[1]))
    assert torch.equal(low["diffusion_model.head.head.lora_A.weight"], torch.ones(2, 4) * 2.0)
    assert write_comfyui_files(tmp_path, files) == written  # its own earlier export is replaced
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_nothing_is_written_when_one_expert_is_broken_or_missing(tmp_path):
    _small_adapter(tmp_path / ADAPTER_FILE)
    _small_adapter(tmp_path / LOW_FILE, scale=float("nan"))
    with pytest.raises(UserError, match="NaN/Inf"):
        write_comfyui_files(tmp_path, {ADAPTER_FILE: "high", LOW_FILE: "low"})
    (tmp_path / LOW_FILE).unlink()
    with pytest.raises(UserError, match="low-noise expert's adapter is missing"):
        write_comfyui_files(tmp_path, {ADAPTER_FILE: "high", LOW_FILE: "low"})
    assert not list(tmp_path.glob(f"*{SUFFIX}"))


def test_a_users_file_of_that_name_is_not_replaced(tmp_path):
    _small_adapter(tmp_path / ADAPTER_FILE)
    mine = tmp_path / f"pytorch_lora_weights{SUFFIX}"
    _small_adapter(mine, scale=5.0)  # a safetensors file without dit-lora's export marker
    with pytest.raises(UserError, match="was not written by `dit-lora export`"):
        write_comfyui_files(tmp_path)
    assert torch.equal(load_file(str(mine))["transformer.proj_out.lora_A.weight"], torch.ones(2, 4) * 5.0)


#: ComfyUI's WanModel constructor arguments for :func:`_tiny_wan` (its I2V image MLP is fixed at 1280 inputs)
COMFY_WAN = dict(image_model="wan2.1", dim=16, num_heads=2, ffn_dim=32, freq_dim=16, text_dim=16, in_dim=4, out_dim=4,
                 num_layers=2)


@requires_comfyui
@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_comfyuis_own_loader_applies_every_tensor_at_the_trained_strength(i2v, tmp_path):
    """ComfyUI's LoraLoader path on its WAN21 model: the export is consumed whole, every LoRA module patches its
    weight by exactly the file's B·A (scale 1: no .alpha) = the trained (alpha/r)·B·A, and only those weights change. For I2V the plain
    diffusers-named file goes through the same loader: ComfyUI maps none of it (why the export exists)."""
    model = _tiny_wan(i2v, image_dim=1280)
    linears = _linear_names(model)
    _train_and_save(model, tmp_path)
    (comfy_file,) = write_comfyui_files(tmp_path)
    state = load_file(str(comfy_file))
    name, config = ("WAN21_I2V", "i2v") if i2v else ("WAN21_T2V", "t2v")
    result = load_in_comfyui(comfy_file, unet_config={**COMFY_WAN, "model_type": config}, model_class=name)
    assert result.unloaded == [] and result.not_patched == []
    assert len(result.targets) == len(linears) == len(state) // 2
    expected = expected_deltas(state, result)
    assert sorted(result.deltas) == sorted(expected)
    for key, want in expected.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5, msg=key)
    for linear in linears:  # the trained strength: the live (unfolded) PEFT factors times alpha/r
        layer = model.get_submodule(linear)
        trained = ALPHA / RANK * layer.lora_B["default"].weight.detach() @ layer.lora_A["default"].weight.detach()
        torch.testing.assert_close(result.deltas[f"diffusion_model.{comfyui_module(linear)}.weight"], trained,
                                   atol=1e-5, rtol=1e-5, msg=linear)
    if i2v:
        diffusers_file = tmp_path / ADAPTER_FILE
        plain = load_in_comfyui(diffusers_file, unet_config={**COMFY_WAN, "model_type": config}, model_class=name)
        assert plain.unloaded == sorted(load_file(str(diffusers_file))) and plain.deltas == {}
