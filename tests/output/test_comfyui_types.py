"""The ComfyUI exports of LoRA, LoKr and LoHa adapters (output/comfyui_types.py and each family's converter), without
ComfyUI: every key written is one ComfyUI's key map has for that model (read from ComfyUI's source, stated by each
exporting family in its tests/families/<package>/cases.py, ``comfyui_export``; the registry says which) with a
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

from family_cases import case, entry_defaults

from dit_lora.core.errors import UserError
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


def _exporting() -> list[str]:
    """Each registry entry's default name whose family exports ``comfyui`` (its spec's ``exports``)."""
    from dit_lora.registry import get_spec

    exporting = []
    for name in entry_defaults():
        exports = get_spec(name).exports
        if exports is not None and "comfyui" in exports.export_formats():
            exporting.append(name)
    return exporting


FAMILIES = _exporting()


def export_case(family: str):
    """The family's ComfyUI facts (its ``comfyui_export()``, tests/support/comfyui_cases.py's ComfyUIExport): ComfyUI's
    key map for its model (comfy/lora.py ``model_lora_keys_unet``, from ComfyUI's source), its converter, its tiny
    transformer, where each layer is exported."""
    return case(family, "comfyui_export", "tests/output/test_comfyui_types.py (it exports comfyui)")()


def test_every_family_exporting_to_comfyui_is_checked_here():
    """Each registry entry whose family exports ``comfyui`` states ComfyUI's key map for it, by the entry's default
    name: a new family's export fails here until ComfyUI's key map for it is written down (in its cases.py)."""
    assert FAMILIES
    for family in FAMILIES:
        facts = export_case(family)
        assert facts.keys.pattern.startswith("^") and callable(facts.convert), family


def test_every_family_exporting_to_comfyui_is_loaded_by_comfyuis_own_loader_somewhere():
    """A family exporting ``comfyui`` states its model for tests/output/test_comfyui_types_loader.py (ComfyUI's own
    loader), or where its own folder's test loads its file there."""
    from family_cases import has_case

    for family in FAMILIES:
        if not has_case(family, "comfyui_loader"):
            assert "tests/families/" in case(family, "NO_COMFYUI_LOADER", "tests/output/test_comfyui_types_loader.py")


def _tiny(family: str) -> torch.nn.Module:
    """The family's tiny transformer on the meta device (only its module names and shapes are used)."""
    import diffusers

    name, config = export_case(family).transformer
    with torch.device("meta"):
        return getattr(diffusers, name)(**config)


@pytest.fixture(scope="module")
def linears() -> dict[str, dict[str, tuple[int, int]]]:
    """Each family's Linear layers -> (out, in)."""
    return {f: {n: tuple(m.weight.shape) for n, m in _tiny(f).named_modules() if isinstance(m, torch.nn.Linear)}
            for f in FAMILIES}


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
@pytest.mark.parametrize("family", FAMILIES)
def test_every_key_is_one_comfyuis_key_map_has(family, kind, linears):
    facts = export_case(family)
    out = facts.convert(_state(kind, linears[family]))
    modules = set()
    for key in out:
        module, tensor = next((key[: -len(t) - 1], t) for t in COMFY_TENSORS[kind] if key.endswith("." + t))
        assert facts.keys.match(module), (family, key)
        modules.add(module)
    # every layer is there: one ComfyUI module each, but the layers ComfyUI reads fused into another's (FLUX.2 LoRA:
    # the double blocks' q/k/v fused into two qkv; Lumina 2, every type: each of its 3 blocks' q/k/v into one)
    assert len(modules) == len(linears[family]) - facts.fused(kind)
    if facts.check_modules is not None:
        facts.check_modules(kind, modules)


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
@pytest.mark.parametrize("family", FAMILIES)
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
    out = export_case(family).convert({f"transformer.{k}": v for k, v in folded.items()})
    prefixes = {k.rsplit(".", 2 if k.endswith(".weight") else 1)[0] for k in out}
    # one exported module per layer, but q/k/v written as one fused .diff (Lumina 2's q and k)
    assert len(prefixes) == len({_exported_at(family, n, linears[family])[0] for n in names})
    for name in names:
        prefix, rows = _exported_at(family, name, linears[family])
        want = model.get_submodule(name).get_delta_weight("default").detach().double()
        assert want.abs().max() > 0
        torch.testing.assert_close(module_update(out, prefix)[rows], want, rtol=1e-5, atol=1e-6, msg=name)


def _exported_at(family: str, name: str, layers: dict[str, tuple[int, int]]) -> tuple[str, slice]:
    """Where a LoKr/LoHa of the diffusers module ``name`` is in the family's export: its module key and its rows of
    that module's update (Lumina 2's q/k/v: their rows of the fused qkv's ``.diff``)."""
    facts = export_case(family)
    typed = facts.typed_fused  # typed q/k/v: the fused .diff
    if typed is not None and typed.layout.fused(name) is not None:
        fused, position, _ = typed.layout.fused(name)
        block = name.rsplit(".", 1)[0]
        start = sum(layers[f"{block}.to_{p}"][0] for p in "qkv"[:position])
        return f"diffusion_model.{fused}", slice(start, start + layers[name][0])
    return facts.exported_at(name), slice(None)


@pytest.mark.parametrize("family", FAMILIES)
def test_dora_is_refused_in_one_paragraph(family, linears):
    state = _state("dora", dict(list(linears[family].items())[:1]))
    assert adapter_kind(state) == "dora"
    with pytest.raises(UserError, match=r"is a DoRA adapter \(`transformer\..*lora_magnitude_vector` .*dora_scale.*"
                                        r"Nothing was written.*--lora_type lora, lokr or loha"):
        export_case(family).convert(state)


@pytest.mark.parametrize("family", FAMILIES)
def test_damaged_and_unknown_layers_are_refused(family, linears):
    name, (out_f, in_f) = next(iter(linears[family].items()))
    with pytest.raises(UserError, match=rf"LoKr layer `{re.escape(name)}` has only lokr_w1 \("):
        export_case(family).convert({f"transformer.{name}.lokr_w1": torch.ones(1, 1)})
    with pytest.raises(UserError, match="has both LoKr and LoHa tensors"):
        export_case(family).convert({f"transformer.{name}.lokr_w1": torch.ones(1, 1), f"transformer.{name}.hada_w1_a": torch.ones(1)})
    with pytest.raises(UserError, match=r"`transformer\.pos_embed\.lokr_w1` is not a tensor of a .* layer ComfyUI"):
        export_case(family).convert({"transformer.pos_embed.lokr_w1": torch.ones(1, 1)})


@pytest.mark.parametrize("prefix", ["", "base_model.model."])
def test_peft_prefixes_are_read_too(prefix, linears):
    layers = dict(list(linears["zimage"].items())[:2])
    convert = export_case("zimage").convert
    assert sorted(convert(_state("lokr", layers, prefix))) == sorted(convert(_state("lokr", layers)))


@pytest.mark.parametrize("family", FAMILIES)
def test_dit_lora_export_writes_lokr_and_refuses_dora(family, linears, tmp_path):
    layers = dict(list(linears[family].items())[:2])
    save_file(_state("loha", layers), str(tmp_path / ADAPTER_FILE))
    (written,) = export_run(tmp_path, "comfyui", family=family)
    assert written.name == "pytorch_lora_weights_comfyui.safetensors"
    assert sorted(load_file(str(written))) == sorted(export_case(family).convert(_state("loha", layers)))
    save_file(_state("dora", layers), str(tmp_path / ADAPTER_FILE))
    with pytest.raises(UserError, match="is a DoRA adapter"):
        export_run(tmp_path, "comfyui", family=family)
    assert load_file(str(written)).keys()  # the earlier export is left as it was


@pytest.mark.parametrize("family", FAMILIES)
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
    assert sorted(load_file(str(written))) == sorted(export_case(family).convert(_state("lokr", layers)))


@pytest.mark.parametrize("kind", ["lora", "lokr", "dora"])
def test_runs_write_their_comfyui_file_for_lokr_and_say_why_not_for_dora(kind, linears, tmp_path, capsys):
    """Wan, FLUX.2 and Lumina 2 runs (every family whose file ComfyUI cannot load as it is) write the ComfyUI file for
    LoRA and LoKr; Z-Image and Qwen-Image for LoKr (their LoRA file loads in ComfyUI as it is); none for DoRA, with one
    line saying why. Each family's writer is its spec's ``adapter_extras``, as a run's end calls it."""
    from dit_lora.registry import get_spec

    for family in FAMILIES:
        folder = tmp_path / family
        folder.mkdir()
        # as the types write them: LoRA/DoRA diffusers' file, LoKr PEFT's (adapter_model.safetensors, base_model.model.)
        layers, peft = dict(list(linears[family].items())[:2]), kind == "lokr"
        save_file(_state(kind, layers, "base_model.model." if peft else "transformer."),
                  str(folder / (PEFT_ADAPTER_FILE if peft else ADAPTER_FILE)))
        get_spec(family).adapter_extras.save_adapter_extras(folder, SimpleNamespace(state=None), None)
        written = [p.name for p in folder.glob("*_comfyui.safetensors")]
        wanted = kind == "lokr" or (kind == "lora" and not export_case(family).lora_file_loads_as_is)
        assert written == ([f"{'adapter_model' if peft else 'pytorch_lora_weights'}_comfyui.safetensors"]
                           if wanted else []), family
    assert capsys.readouterr().out.count(DORA_NOT_WRITTEN) == (len(FAMILIES) if kind == "dora" else 0)
