"""The ComfyUI exports of LoRA, LoKr and LoHa adapters (output/comfyui_types.py and each family's converter), without
ComfyUI: every key written is one ComfyUI's key map has for that model (a table from ComfyUI's source below) with a
tensor name its weight adapter reads; the update each exported module carries, computed as ComfyUI's weight
adapters do (tests/support/comfyui_loader.py ``module_update``), is PEFT's ``get_delta_weight`` with the strength
folded in; DoRA, unknown layers and damaged layers are refused in one paragraph; ``dit-lora export`` and the runs
that write a ComfyUI file beside the adapter do so for LoKr/LoHa and not for DoRA. ComfyUI's own loader checks the
same files in tests/output/test_comfyui_types_loader.py (marker ``comfyui``)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from comfyui_loader import module_update
from peft import LoHaConfig, LoKrConfig, inject_adapter_in_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file

from dit_lora.core.errors import UserError
from dit_lora.families.flux2 import comfyui as flux2
from dit_lora.families.hunyuanvideo15.comfyui import EXPORT as HUNYUANVIDEO15_EXPORT
from dit_lora.families.ltx2.comfyui import EXPORTS as LTX2_EXPORTS
from dit_lora.families.lumina2.comfyui import EXPORT as LUMINA2_EXPORT
from dit_lora.families.qwenimage.comfyui import EXPORTS as QWEN_EXPORTS
from dit_lora.families.wan import comfyui as wan
from dit_lora.families.zimage.comfyui import EXPORTS as ZIMAGE_EXPORTS
from dit_lora.output.adapter import fold_lora_scale
from dit_lora.output.comfyui_types import DORA_NOT_WRITTEN, SUFFIXES, adapter_kind
from dit_lora.output.export import export_run
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE

# ---- ComfyUI's side, from its source at commit 618b803d314a525faca8f8163d85eaa9ebc1d774 (Jan 2026) ----------------
#: the tensor names ComfyUI reads for one module ``x`` (``x.<name>``): comfy/weight_adapter/lora.py
#: ``LoRAAdapter.load`` (its diffusers2 form) and comfy/lora.py ``load_lora`` (diff_b); weight_adapter/lokr.py
#: ``LoKrAdapter.load``; weight_adapter/loha.py ``LoHaAdapter.load``; and comfy/lora.py ``load_lora``'s ``diff``, a
#: weight's whole update (Lumina 2's LoKr/LoHa q/k/v, stacked into its fused qkv)
COMFY_TENSORS = {
    "lora": {"lora_A.weight", "lora_B.weight", "diff_b"},
    "lokr": {"lokr_w1", "lokr_w2", "lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b", "lokr_t2", "diff"},
    "loha": {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2", "diff"},
}
#: module names comfy/lora.py ``model_lora_keys_unet`` maps, per model. Wan: only the generic
#: ``diffusion_model.<weight>`` of comfy/ldm/wan/model.py WanModel. Flux2: generic names of comfy/ldm/flux/model.py
#: and ``transformer.<key>`` of comfy/utils.py ``flux_to_diffusers`` (q/k/v as qkv slices, norm_out with
#: swap_scale_shift). Lumina2 (Z-Image): ``transformer.<key>`` of ``z_image_to_diffusers``. QwenImage:
#: ``transformer.<weight>`` of comfy/ldm/qwen_image/model.py (diffusers' names). Lumina2 (Lumina-Image 2.0, commit
#: a125cd84): only the generic names of comfy/ldm/lumina/model.py NextDiT (q/k/v fused in ``attention.qkv``).
#: LTXAV (LTX-2; comfy/ldm/lightricks/av_model.py BasicAVTransformerBlock, model.py CrossAttention, 2026): only the
#: generic ``diffusion_model.<weight>`` of Lightricks' names (patchify_proj, adaln_single, av_ca_*_adaln_single).
#: HunyuanVideo15 (comfy/ldm/hunyuan_video/model.py, commit fe251146, Feb 2026): the generic names (and
#: diffusion-pipe's ``transformer.`` spelling of them) of Tencent's layout, q/k/v fused per stream and in the refiner.
COMFY_KEYS = {
    "hunyuanvideo15": re.compile(
        r"^diffusion_model\.(double_blocks\.\d+\.(img|txt)_(attn\.(qkv|proj)|mlp\.[02]|mod\.lin)|txt_in\."
        r"(individual_token_refiner\.blocks\.\d+\.(self_attn\.(qkv|proj)|mlp\.[02]|adaLN_modulation\.1)"
        r"|input_embedder|[tc]_embedder\.(in|out)_layer)|byt5_in\.fc[123]|vision_in\.proj\.[13]"
        r"|time_in\.(in|out)_layer|img_in\.proj|final_layer\.(linear|adaLN_modulation\.1))$"
    ),
    "ltx2": re.compile(
        r"^diffusion_model\.(transformer_blocks\.\d+\.((attn[12]|audio_attn[12]|audio_to_video_attn|video_to_audio_attn)"
        r"\.(to_[qkv]|to_out\.0|to_gate_logits)|(ff|audio_ff)\.net\.(0\.proj|2))|(audio_)?(patchify_proj|proj_out)"
        r"|(audio_)?caption_projection\.linear_[12]|((audio_)?(prompt_)?adaln_single|av_ca_(video_scale_shift|a2v_gate"
        r"|audio_scale_shift|v2a_gate)_adaln_single)\.(linear|emb\.timestep_embedder\.linear_[12]))$"
    ),
    "lumina2": re.compile(
        r"^diffusion_model\.((layers|noise_refiner|context_refiner)\.\d+\.(attention\.(qkv|out)|feed_forward\.w[123]"
        r"|adaLN_modulation\.1)|x_embedder|cap_embedder\.1|t_embedder\.mlp\.[02]|final_layer\.(adaLN_modulation\.1|linear))$"
    ),
    "wan": re.compile(
        r"^diffusion_model\.(blocks\.\d+\.(self_attn\.[qkvo]|cross_attn\.([qkvo]|k_img|v_img)|ffn\.[02])"
        r"|text_embedding\.[02]|time_embedding\.[02]|time_projection\.1|head\.head|img_emb\.proj\.[13])$"
    ),
    "flux2": re.compile(
        r"^(transformer\.(transformer_blocks\.\d+\.attn\.(to_[qkv]|add_[qkv]_proj)|norm_out\.linear)"
        r"|diffusion_model\.(double_blocks\.\d+\.((img|txt)_attn\.(qkv|proj)|(img|txt)_mlp\.[02])"
        r"|single_blocks\.\d+\.linear[12]|img_in|txt_in|(time|guidance)_in\.(in|out)_layer"
        r"|double_stream_modulation_(img|txt)\.lin|single_stream_modulation\.lin|final_layer\.linear"
        r"|final_layer\.adaLN_modulation\.1))$"
    ),
    "zimage": re.compile(
        r"^transformer\.((layers|context_refiner|noise_refiner)\.\d+\.(attention\.(to_[qkv]|to_out\.0)"
        r"|feed_forward\.w[123]|adaLN_modulation\.0)|all_final_layer\.2-1\.(linear|adaLN_modulation\.1)"
        r"|all_x_embedder\.2-1|cap_embedder\.1|t_embedder\.mlp\.[02])$"
    ),
    "qwenimage": re.compile(
        r"^transformer\.(transformer_blocks\.\d+\.(attn\.(to_[qkv]|to_out\.0|add_[qkv]_proj|to_add_out)"
        r"|(img|txt)_mlp\.net\.(0\.proj|2)|(img|txt)_mod\.1)|img_in|txt_in|proj_out|norm_out\.linear"
        r"|time_text_embed\.timestep_embedder\.linear_[12])$"
    ),
}
CONVERT = {
    "hunyuanvideo15": HUNYUANVIDEO15_EXPORT.comfyui_state,
    "ltx2": LTX2_EXPORTS.comfyui_state,
    "lumina2": LUMINA2_EXPORT.comfyui_state,
    "wan": wan.comfyui_state,
    "flux2": flux2.EXPORT.comfyui_state,
    "zimage": ZIMAGE_EXPORTS.comfyui_state,
    "qwenimage": QWEN_EXPORTS.comfyui_state,
}


def test_every_family_exporting_to_comfyui_is_checked_here():
    """COMFY_KEYS and CONVERT hold each registry entry whose family exports ``comfyui`` (its spec's ``exports``), by
    the entry's default name: a new family's export fails here until ComfyUI's key map for it is written down."""
    from dit_lora.registry import entries, get_spec

    specs = [get_spec(e.default) for e in entries()]
    exporting = {s.name for s in specs if s.exports is not None and "comfyui" in s.exports.export_formats()}
    assert set(COMFY_KEYS) == set(CONVERT) == exporting, f"add {sorted(exporting - set(COMFY_KEYS))}"


def _tiny(family: str) -> torch.nn.Module:
    """The family's tiny transformer on the meta device (only its module names and shapes are used)."""
    import diffusers

    from dit_lora.families.hunyuanvideo15.demo import DEMO as HV15_DEMO
    from dit_lora.families.ltx2.demo import DEMO as LTX2_DEMO

    hv15 = {k: v for k, v in HV15_DEMO.read().value("transformer").items() if k != "why"}
    configs = {
        "hunyuanvideo15": ("HunyuanVideo15Transformer3DModel", {**hv15, "num_layers": 1}),
        "ltx2": ("LTX2VideoTransformer3DModel", {**LTX2_DEMO.read().value("transformer"), "num_layers": 1}),
        "wan": ("WanTransformer3DModel", dict(
            patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=1, cross_attn_norm=True, rope_max_seq_len=32,
            image_dim=12, added_kv_proj_dim=16)),
        "flux2": ("Flux2Transformer2DModel", dict(
            patch_size=1, in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=16, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)),
        "zimage": ("ZImageTransformer2DModel", dict(
            in_channels=4, dim=32, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=16,
            axes_dims=[4, 6, 6], axes_lens=[64, 32, 32])),
        "lumina2": ("Lumina2Transformer2DModel", dict(  # 6 query heads over 2 key/value heads: the real 3:1
            sample_size=8, patch_size=2, in_channels=4, hidden_size=48, num_layers=1, num_refiner_layers=1,
            num_attention_heads=6, num_kv_heads=2, multiple_of=16, axes_dim_rope=[2, 2, 4], cap_feat_dim=16)),
        "qwenimage": ("QwenImageTransformer2DModel", dict(
            patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16, num_attention_heads=2,
            joint_attention_dim=32, axes_dims_rope=(4, 6, 6))),
    }
    name, config = configs[family]
    with torch.device("meta"):
        return getattr(diffusers, name)(**config)


@pytest.fixture(scope="module")
def linears() -> dict[str, dict[str, tuple[int, int]]]:
    """Each family's Linear layers -> (out, in)."""
    return {f: {n: tuple(m.weight.shape) for n, m in _tiny(f).named_modules() if isinstance(m, torch.nn.Linear)}
            for f in COMFY_KEYS}


def _state(kind: str, layers: dict[str, tuple[int, int]], prefix: str = "transformer.") -> dict[str, torch.Tensor]:
    """A saved adapter of ``kind`` on ``layers`` (shapes that multiply out; values irrelevant)."""
    state = {}
    for name, (out_f, in_f) in layers.items():
        tensors = {
            "lora": {"lora_A.weight": torch.ones(2, in_f), "lora_B.weight": torch.ones(out_f, 2)},
            "lokr": {"lokr_w1": torch.ones(1, 1), "lokr_w2_a": torch.ones(out_f, 1), "lokr_w2_b": torch.ones(1, in_f)},
            "loha": {f"hada_w{i}_{ab}": torch.ones(*((out_f, 1) if ab == "a" else (1, in_f))) for i in (1, 2)
                     for ab in "ab"},
            "dora": {"lora_A.weight": torch.ones(2, in_f), "lora_B.weight": torch.ones(out_f, 2),
                     "lora_magnitude_vector": torch.ones(out_f)},
        }[kind]
        state.update({f"{prefix}{name}.{suffix}": t for suffix, t in tensors.items()})
    return state


def test_comfyui_reads_every_tensor_name_the_exports_write():
    for peft_name, (kind, comfy_name) in SUFFIXES.items():
        if kind == "dora":
            assert comfy_name is None  # refused, never written
        else:
            assert comfy_name in COMFY_TENSORS[kind], peft_name
    # PEFT's LoKr/LoHa parameters are named as ComfyUI reads them: the export renames only modules
    assert all(p == c for p, (k, c) in SUFFIXES.items() if k in ("lokr", "loha"))


@pytest.mark.parametrize("kind", ["lora", "lokr", "loha"])
@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_every_key_is_one_comfyuis_key_map_has(family, kind, linears):
    out = CONVERT[family](_state(kind, linears[family]))
    modules = set()
    for key in out:
        module, tensor = next((key[: -len(t) - 1], t) for t in COMFY_TENSORS[kind] if key.endswith("." + t))
        assert COMFY_KEYS[family].match(module), (family, key)
        modules.add(module)
    # every layer is there: one ComfyUI module each (FLUX.2 LoRA: the double blocks' q/k/v fused into two qkv;
    # Lumina 2, every type: each of its 3 blocks' q/k/v into one)
    # HunyuanVideo 1.5, every type: its block's two streams' and its refiner block's q/k/v into one each)
    fused = {("flux2", "lora"): 2 * 2}.get((family, kind), 3 * 2 if family in ("lumina2", "hunyuanvideo15") else 0)
    assert len(modules) == len(linears[family]) - fused
    if family == "flux2" and kind != "lora":
        assert "transformer.transformer_blocks.0.attn.add_k_proj" in modules  # a slice of txt_attn.qkv
        assert "transformer.norm_out.linear" in modules  # ComfyUI swaps its halves


def _toy(layers: dict[str, tuple[int, int]]) -> torch.nn.Module:
    """A module tree with a Linear at each dotted name of ``layers``."""
    root = torch.nn.Module()
    for name, (out_f, in_f) in layers.items():
        parent = root
        for part in name.split(".")[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(name.split(".")[-1], torch.nn.Linear(in_f, out_f))
    return root


@pytest.mark.parametrize("config", [
    LoKrConfig(r=1, alpha=3, decompose_both=True, init_weights=False),  # w1 = w1_a @ w1_b, w2 = w2_a @ w2_b
    LoKrConfig(r=8, alpha=12, init_weights=False),  # w1 and w2 whole
    LoHaConfig(r=2, alpha=3, init_weights=False),
], ids=["lokr_decomposed", "lokr_full", "loha"])
@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_each_exported_module_applies_pefts_update(family, config, linears):
    """Four layers of the family (a fused q/k/v and the swapped norm_out for FLUX.2) in a toy model with PEFT's
    adapter: the update ComfyUI's weight adapter computes from each exported module is PEFT's get_delta_weight."""
    names = [n for n in linears[family] if re.search(r"(to_q|to_k|add_v_proj|norm_out\.linear|feed_forward\.w1|"
                                                      r"ffn\.net\.2|img_mlp\.net\.2|linear_1)$", n)][:4]
    model = _toy({n: linears[family][n] for n in names})
    torch.manual_seed(0)
    config.target_modules = names
    inject_adapter_in_model(config, model)
    folded, _ = fold_lora_scale(get_peft_model_state_dict(model), config.to_dict())  # as a run saves it
    out = CONVERT[family]({f"transformer.{k}": v for k, v in folded.items()})
    prefixes = {k.rsplit(".", 2 if k.endswith(".weight") else 1)[0] for k in out}
    assert len(prefixes) == len(names) - (family == "lumina2")  # Lumina 2's q and k: one fused .diff
    for name in names:
        prefix, rows = _exported_at(family, name, linears[family])
        want = model.get_submodule(name).get_delta_weight("default").detach().double()
        assert want.abs().max() > 0
        torch.testing.assert_close(module_update(out, prefix)[rows], want, rtol=1e-5, atol=1e-6, msg=name)


def _exported_at(family: str, name: str, layers: dict[str, tuple[int, int]]) -> tuple[str, slice]:
    """Where a LoKr/LoHa of the diffusers module ``name`` is in the family's export: its module key and its rows of
    that module's update (Lumina 2's q/k/v: their rows of the fused qkv's ``.diff``)."""
    diffs = {"lumina2": LUMINA2_EXPORT, "hunyuanvideo15": HUNYUANVIDEO15_EXPORT}  # typed q/k/v: the fused .diff
    if family in diffs and diffs[family].layout.fused(name) is not None:
        fused, position, _ = diffs[family].layout.fused(name)
        block = name.rsplit(".", 1)[0]
        start = sum(layers[f"{block}.to_{p}"][0] for p in "qkv"[:position])
        return f"diffusion_model.{fused}", slice(start, start + layers[name][0])
    named = {"wan": lambda n: f"diffusion_model.{wan.comfyui_module(n)}", "flux2": flux2.EXPORT.typed_layer_name,
             "lumina2": LUMINA2_EXPORT.typed_layer_name, "ltx2": LTX2_EXPORTS.layer_name,
             "hunyuanvideo15": HUNYUANVIDEO15_EXPORT.typed_layer_name}
    return named.get(family, lambda n: f"transformer.{n}")(name), slice(None)


@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_dora_is_refused_in_one_paragraph(family, linears):
    state = _state("dora", dict(list(linears[family].items())[:1]))
    assert adapter_kind(state) == "dora"
    with pytest.raises(UserError, match=r"is a DoRA adapter \(`transformer\..*lora_magnitude_vector` .*dora_scale.*"
                                        r"Nothing was written.*--lora_type lora, lokr or loha"):
        CONVERT[family](state)


@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_damaged_and_unknown_layers_are_refused(family, linears):
    name, (out_f, in_f) = next(iter(linears[family].items()))
    with pytest.raises(UserError, match=rf"LoKr layer `{re.escape(name)}` has only lokr_w1 \("):
        CONVERT[family]({f"transformer.{name}.lokr_w1": torch.ones(1, 1)})
    with pytest.raises(UserError, match="has both LoKr and LoHa tensors"):
        CONVERT[family]({f"transformer.{name}.lokr_w1": torch.ones(1, 1), f"transformer.{name}.hada_w1_a": torch.ones(1)})
    with pytest.raises(UserError, match=r"`transformer\.pos_embed\.lokr_w1` is not a tensor of a .* layer ComfyUI"):
        CONVERT[family]({"transformer.pos_embed.lokr_w1": torch.ones(1, 1)})


@pytest.mark.parametrize("prefix", ["", "base_model.model."])
def test_peft_prefixes_are_read_too(prefix, linears):
    layers = dict(list(linears["zimage"].items())[:2])
    assert sorted(CONVERT["zimage"](_state("lokr", layers, prefix))) == sorted(CONVERT["zimage"](_state("lokr", layers)))


@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_dit_lora_export_writes_lokr_and_refuses_dora(family, linears, tmp_path):
    layers = dict(list(linears[family].items())[:2])
    save_file(_state("loha", layers), str(tmp_path / ADAPTER_FILE))
    (written,) = export_run(tmp_path, "comfyui", family=family)
    assert written.name == "pytorch_lora_weights_comfyui.safetensors"
    assert sorted(load_file(str(written))) == sorted(CONVERT[family](_state("loha", layers)))
    save_file(_state("dora", layers), str(tmp_path / ADAPTER_FILE))
    with pytest.raises(UserError, match="is a DoRA adapter"):
        export_run(tmp_path, "comfyui", family=family)
    assert load_file(str(written)).keys()  # the earlier export is left as it was


@pytest.mark.parametrize("family", list(COMFY_KEYS))
def test_a_peft_format_run_file_is_exported_too(family, linears, tmp_path):
    """A LoKr/LoHa run writes PEFT's adapter_model.safetensors (``base_model.model.`` keys): the family's export
    reads it, and says it converts LoRA, LoKr and LoHa (``dit-lora export`` refuses the other types before it)."""
    from dit_lora.registry import get_spec

    layers = dict(list(linears[family].items())[:2])
    save_file(_state("lokr", layers, "base_model.model."), str(tmp_path / PEFT_ADAPTER_FILE))
    exports = get_spec(family).exports
    assert exports.export_types("comfyui") == ("lora", "lokr", "loha")
    (written,) = exports.export_adapter(tmp_path, "comfyui")
    assert written.name == "adapter_model_comfyui.safetensors"
    assert sorted(load_file(str(written))) == sorted(CONVERT[family](_state("lokr", layers)))


@pytest.mark.parametrize("kind", ["lora", "lokr", "dora"])
def test_runs_write_their_comfyui_file_for_lokr_and_say_why_not_for_dora(kind, linears, tmp_path, capsys):
    """Wan, FLUX.2 and Lumina 2 runs write the ComfyUI file for LoRA and LoKr; Z-Image and Qwen-Image for LoKr (their LoRA
    file loads in ComfyUI as it is); none for DoRA, with one line saying why."""
    from dit_lora.families.wan.adapter import save_beside_adapter

    writers = {
        "wan": lambda d: save_beside_adapter(d, SimpleNamespace(state=None)),
        "flux2": lambda d: flux2.EXPORT.save_adapter_extras(d, None, None),
        "zimage": lambda d: ZIMAGE_EXPORTS.save_adapter_extras(d, None, None),
        "qwenimage": lambda d: QWEN_EXPORTS.save_adapter_extras(d, None, None),
        "lumina2": lambda d: LUMINA2_EXPORT.save_adapter_extras(d, None, None),
    }
    for family, write in writers.items():
        folder = tmp_path / family
        folder.mkdir()
        # as the types write them: LoRA/DoRA diffusers' file, LoKr PEFT's (adapter_model.safetensors, base_model.model.)
        layers, peft = dict(list(linears[family].items())[:2]), kind == "lokr"
        save_file(_state(kind, layers, "base_model.model." if peft else "transformer."),
                  str(folder / (PEFT_ADAPTER_FILE if peft else ADAPTER_FILE)))
        write(folder)
        written = [p.name for p in folder.glob("*_comfyui.safetensors")]
        wanted = kind == "lokr" or (kind == "lora" and family in ("wan", "flux2", "lumina2"))
        assert written == ([f"{'adapter_model' if peft else 'pytorch_lora_weights'}_comfyui.safetensors"]
                           if wanted else []), family
    assert capsys.readouterr().out.count(DORA_NOT_WRITTEN) == (len(writers) if kind == "dora" else 0)
