"""Single files: what a .safetensors given as the model folder is (one paragraph, what to pass instead), the
refusals of --transformer_file, and the transformer loaded from a Wan single file in the original and ComfyUI layouts
equal, bit for bit and dtype for dtype, to the diffusers folder's."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dit_lora.core.errors import UserError
from dit_lora.modelfiles.single_file import COMFY_PREFIX, describe_keys, load_transformer, transformer_file_record
from wan_single_file import original_key, write_original_wan_file

WAN_KEYS = ["blocks.0.self_attn.q.weight", "blocks.0.cross_attn.o.bias", "head.head.weight", "patch_embedding.weight"]


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory) -> Path:
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    return build_tiny_wan_pipeline(tmp_path_factory.mktemp("wan") / "tiny-wan", variant="2.1-t2v")


def _file(path: Path, keys: list[str]) -> Path:
    save_file({k: torch.zeros(1) for k in keys}, str(path))
    return path


def _argv(model, tmp_path: Path, *extra: str) -> list[str]:
    return ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out"), *extra]


def _parse(argv):
    from dit_lora.commands.recipe import parse_run

    return parse_run(argv)


def test_describe_keys_tells_wan_layouts_loras_and_full_checkpoints():
    assert "original Wan layout" in describe_keys(WAN_KEYS)
    assert "ComfyUI's layout" in describe_keys([COMFY_PREFIX + k for k in WAN_KEYS])
    assert describe_keys(["lora_unet_blocks_0_self_attn_q.lora_down.weight"]).startswith("a LoRA")
    assert describe_keys(["diffusion_model.blocks.0.self_attn.q.lora_A.weight"]).startswith("a LoRA")
    assert describe_keys([COMFY_PREFIX + WAN_KEYS[0], "first_stage_model.decoder.conv_in.weight"]).startswith(
        "a full single-file checkpoint")


@pytest.mark.parametrize("prefix", ["", COMFY_PREFIX])
def test_a_wan_file_as_the_model_says_what_it_is_and_to_use_transformer_file(tmp_path, prefix):
    file = _file(tmp_path / "wan2.1_t2v_1.3B_bf16.safetensors", [prefix + k for k in WAN_KEYS])
    for argv in (_argv(file, tmp_path), _argv(file, tmp_path, "--family", "wan")):
        with pytest.raises(UserError) as err:
            _parse(argv)
        text = str(err.value)
        assert "is a file, not a model folder" in text and "single-file Wan transformer" in text
        assert f"--transformer_file {file}" in text and "does not exist" not in text and "\n" not in text


def test_a_lora_file_as_the_model_is_called_a_lora(tmp_path):
    file = _file(tmp_path / "my_lora.safetensors", ["lora_unet_blocks_0_self_attn_q.lora_down.weight"])
    with pytest.raises(UserError, match="is a LoRA adapter .* pass the base model's diffusers folder"):
        _parse(_argv(file, tmp_path, "--family", "wan"))


def _configs_only(root: Path, pipeline: str, transformer) -> Path:
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    transformer.save_config(root / "transformer")
    return root


@pytest.mark.parametrize("family", ["dit", "cogvideox"])
def test_transformer_file_for_a_class_diffusers_cannot_load_from_one_file_is_refused(tmp_path, monkeypatch, family):
    from diffusers import CogVideoXTransformer3DModel, DiTTransformer2DModel

    if family == "dit":
        model = _configs_only(tmp_path / "dit", "DiTPipeline", DiTTransformer2DModel(
            num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=1, sample_size=8))
    else:
        model = _configs_only(tmp_path / "cog", "CogVideoXPipeline", CogVideoXTransformer3DModel(
            num_attention_heads=2, attention_head_dim=8, num_layers=1, text_embed_dim=16, time_embed_dim=16))
    monkeypatch.setitem(sys.modules, "dit_lora.training.loop", types.SimpleNamespace(train=None))
    file = _file(tmp_path / "transformer.safetensors", WAN_KEYS)
    with pytest.raises(UserError) as err:
        _parse(_argv(model, tmp_path, "--family", family, "--transformer_file", str(file)))
    text = str(err.value)
    cls = "DiTTransformer2DModel" if family == "dit" else "CogVideoXTransformer3DModel"
    assert f"is a {cls}, which diffusers cannot load from a single file" in text
    assert "WanTransformer3DModel" in text and "SanaTransformer2DModel" in text and "\n" not in text


def test_transformer_file_refusals_missing_pickle_and_lora(tiny_wan, tmp_path):
    cases = {tmp_path / "missing.safetensors": "does not exist",
             _file(tmp_path / "w.ckpt", WAN_KEYS): "is not a .safetensors file",
             _file(tmp_path / "l.safetensors", ["lora_unet_x.lora_up.weight"]): "is a LoRA adapter"}
    for file, said in cases.items():
        with pytest.raises(UserError, match=said):
            _parse(_argv(tiny_wan, tmp_path, "--family", "wan", "--transformer_file", str(file)))


def test_original_names_round_trip_through_diffusers_converter(tiny_wan):
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    state = load_file(str(next((tiny_wan / "transformer").glob("*.safetensors"))))
    back = convert_wan_transformer_to_diffusers({original_key(k): v for k, v in state.items()})
    assert back.keys() == state.keys() and all(back[k] is state[k] for k in state)


@pytest.mark.parametrize("prefix", ["", COMFY_PREFIX])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_single_file_transformer_equals_the_folders_bit_for_bit(tiny_wan, tmp_path, prefix, dtype):
    from diffusers import WanTransformer3DModel

    file = write_original_wan_file(tiny_wan / "transformer", tmp_path / "wan.safetensors", prefix)
    cfg = types.SimpleNamespace(pretrained_model_name_or_path=str(tiny_wan), transformer_file=str(file),
                                revision=None)
    single = load_transformer(WanTransformer3DModel, cfg, "transformer", torch_dtype=dtype).state_dict()
    folder = WanTransformer3DModel.from_pretrained(tiny_wan, subfolder="transformer", torch_dtype=dtype).state_dict()
    assert single.keys() == folder.keys()
    for k in folder:
        assert single[k].dtype == folder[k].dtype and torch.equal(single[k], folder[k]), k
    assert transformer_file_record(cfg) == {"name": "wan.safetensors", "bytes": file.stat().st_size}


def _bad_file(tiny_wan: Path, tmp_path: Path, how: str) -> Path:
    """The demo transformer as an original-layout file, spoilt: one tensor of another shape, the first block's
    feed-forward dropped, cut in half, or another model's keys."""
    good = write_original_wan_file(tiny_wan / "transformer", tmp_path / "good.safetensors")
    state = load_file(str(good))
    out = tmp_path / f"{how}.safetensors"
    if how == "shape":
        key = next(k for k in state if k.endswith("self_attn.q.weight"))
        state[key] = torch.zeros(state[key].shape[0] * 2, state[key].shape[1])
    elif how == "missing":
        state = {k: v for k, v in state.items() if not k.startswith("blocks.0.ffn.")}
    elif how == "other_model":  # Sana's diffusers key names
        state = {"transformer_blocks.0.attn1.to_q.weight": torch.zeros(8, 8), "patch_embed.proj.weight":
                 torch.zeros(8, 4, 1, 1), "caption_projection.linear_1.weight": torch.zeros(8, 8)}
    if how == "truncated":
        data = good.read_bytes()
        out.write_bytes(data[: len(data) // 2])
    else:
        save_file(state, str(out))
    return out


@pytest.mark.parametrize("how, says", [
    ("shape", ["its tensor for `blocks.0.attn1.to_q.weight` is 64x32 where the model has 32x32",
               "another model or another size"]),
    ("missing", ["lacks 4 of the model's tensors", "`blocks.0.ffn.net.0.proj.bias`", "partial file"]),
    ("truncated", ["the file is truncated", "Download it again"]),
    ("other_model", ["holds none of the model's", "its own are named like `", "another model's transformer"]),
])
def test_a_bad_transformer_file_is_named_with_what_is_wrong(tiny_wan, tmp_path, how, says):
    """The file, not the model folder, is blamed: wrong shapes, missing tensors (a raw `Cannot copy out of meta
    tensor` before), a truncated file, another model's weights (all said "the local folder is incomplete")."""
    from diffusers import WanTransformer3DModel

    file = _bad_file(tiny_wan, tmp_path, how)
    cfg = types.SimpleNamespace(pretrained_model_name_or_path=str(tiny_wan), transformer_file=str(file),
                                revision=None)
    with pytest.raises(UserError) as err:
        load_transformer(WanTransformer3DModel, cfg, "transformer", torch_dtype=torch.float32)
    text = str(err.value)
    assert text.startswith(f"--transformer_file `{file}` does not load as the WanTransformer3DModel"), text
    for part in says:
        assert part in text, (part, text)
    assert "folder is incomplete" not in text and "\n" not in text


def test_a_bad_transformer_file_is_blamed_through_the_wan_loader(tiny_wan, tmp_path):
    """The Wan loader's own wrapper (load_error: "the local folder is incomplete") leaves the file's paragraph."""
    from dit_lora.registry import get_family
    from dit_lora.families.wan.model import load_wan_components

    file = _bad_file(tiny_wan, tmp_path, "shape")
    cfg = _parse(_argv(tiny_wan, tmp_path, "--family", "wan", "--transformer_file", str(file)))
    with pytest.raises(UserError, match=r"^--transformer_file .* another model or another size"):
        load_wan_components(get_family("wan").model, cfg, torch.device("cpu"))


def test_a_comfyui_prefixed_file_is_handed_on_without_its_prefix(tmp_path):
    """Every key behind ComfyUI's ``model.diffusion_model.``: the tensors without it (diffusers 0.42.1's Lumina 2
    converter fails on the prefix itself); any other file: its path, as it is."""
    from safetensors.torch import save_file

    from dit_lora.modelfiles.single_file import COMFY_PREFIX, without_comfyui_prefix

    weight = torch.arange(6.0).view(2, 3)
    save_file({f"{COMFY_PREFIX}x_embedder.weight": weight}, str(tmp_path / "comfy.safetensors"))
    save_file({"x_embedder.weight": weight, f"{COMFY_PREFIX}y.weight": weight.clone()}, str(tmp_path / "mixed.safetensors"))
    handed = without_comfyui_prefix(tmp_path / "comfy.safetensors")
    assert list(handed) == ["x_embedder.weight"] and torch.equal(handed["x_embedder.weight"], weight)
    assert without_comfyui_prefix(tmp_path / "mixed.safetensors") == str(tmp_path / "mixed.safetensors")
