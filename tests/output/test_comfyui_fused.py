"""output/comfyui_fused.py: a Black Forest Labs layout stated as data (``fused``, ``swapped`` in ``comfyui.json``),
here FLUX.1's single-block ``linear1`` (q, k, v and the MLP's input, the MLP four times as wide), which no family
ships yet: the LoRA's product is each part's in its rows, LoKr parts go by diffusers' name, bad data is refused."""

from __future__ import annotations

import json
import re

import pytest
import torch

from dit_lora.core.datafile import DataFileError
from dit_lora.output.comfyui_fused import FusedExport

FLUX1 = {
    "modules": [["single_transformer_blocks.N.proj_out", "single_blocks.N.linear2"],
                ["norm_out.linear", "final_layer.adaLN_modulation.1"]],
    "fused": [
        {
            "into": "single_blocks.N.linear1",
            "parts": [*(f"single_transformer_blocks.N.attn.to_{p}" for p in "qkv"), "single_transformer_blocks.N.proj_mlp"],
            "rows": [1, 1, 1, 4],
        }
    ],
    "swapped": ["norm_out.linear"],
}


def _module(tmp_path, monkeypatch, data: dict) -> str:
    """A package of its own per test holding ``comfyui.json`` (an imported package keeps its first folder)."""
    package = tmp_path / ("fusedpkg_" + re.sub(r"\W", "_", tmp_path.name))
    package.mkdir(exist_ok=True)  # a second file of the same test: the same package, the file rewritten
    (package / "__init__.py").write_text("")
    (package / "comfyui.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{package.name}.comfyui"


def test_unequal_parts_fuse_in_their_rows_and_an_untrained_part_is_zero(tmp_path, monkeypatch):
    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file")
    g = torch.Generator().manual_seed(0)
    halves = {p: (torch.randn(2, 8, generator=g), torch.randn(8, 2, generator=g)) for p in ("to_k", "to_q")}
    state = {}
    for part, (a, b) in halves.items():  # k before q: the rows follow the data's order, not the file's
        state[f"transformer.single_transformer_blocks.3.attn.{part}.lora_A.weight"] = a
        state[f"transformer.single_transformer_blocks.3.attn.{part}.lora_B.weight"] = b
    out = export.comfyui_state(state)
    product = out["diffusion_model.single_blocks.3.linear1.lora_B.weight"] @ out[
        "diffusion_model.single_blocks.3.linear1.lora_A.weight"
    ]
    assert product.shape == (8 * 7, 8)  # q, k, v and the 4x MLP rows, though only q and k were trained
    torch.testing.assert_close(product[:8], halves["to_q"][1] @ halves["to_q"][0])
    torch.testing.assert_close(product[8:16], halves["to_k"][1] @ halves["to_k"][0])
    assert not product[16:].any()
    lokr = {"transformer.single_transformer_blocks.0.proj_mlp.lokr_w1": torch.ones(2, 2),
            "transformer.single_transformer_blocks.0.proj_mlp.lokr_w2": torch.ones(16, 4)}
    assert sorted(export.comfyui_state(lokr)) == [f"transformer.single_transformer_blocks.0.proj_mlp.lokr_w{i}"
                                                  for i in (1, 2)]


def test_a_swapped_module_gets_its_halves_back_in_bfl_order(tmp_path, monkeypatch):
    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file")
    a, b = torch.randn(2, 8), torch.randn(6, 2)
    out = export.comfyui_state({"norm_out.linear.lora_A.weight": a, "norm_out.linear.lora_B.weight": b})
    assert torch.equal(out["diffusion_model.final_layer.adaLN_modulation.1.lora_B.weight"], torch.cat([b[3:], b[:3]]))
    lokr = export.comfyui_state({"norm_out.linear.lokr_w1": torch.ones(2, 2), "norm_out.linear.lokr_w2": a})
    assert sorted(lokr) == ["transformer.norm_out.linear.lokr_w1", "transformer.norm_out.linear.lokr_w2"]


def test_with_diffs_a_typed_swapped_module_is_its_exact_update_halves_swapped(tmp_path, monkeypatch):
    """typed_fused="diff" (ComfyUI maps no diffusers name: HunyuanVideo 1.5): a LoKr on the swapped module goes in
    as its update, (shift, scale) back in BFL's order, under BFL's name."""
    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file",
                         typed_fused="diff")
    w1, w2 = torch.randn(2, 2), torch.randn(3, 8)
    out = export.comfyui_state({"norm_out.linear.lokr_w1": w1, "norm_out.linear.lokr_w2": w2})
    update = torch.kron(w1, w2)
    assert list(out) == ["diffusion_model.final_layer.adaLN_modulation.1.diff"]
    torch.testing.assert_close(out["diffusion_model.final_layer.adaLN_modulation.1.diff"],
                               torch.cat([update[3:], update[:3]]))


def test_row_shares_that_do_not_match_the_parts_are_refused_naming_the_file(tmp_path, monkeypatch):
    bad = {**FLUX1, "fused": [{**FLUX1["fused"][0], "rows": [1, 4]}]}
    with pytest.raises(DataFileError, match=r"fusedpkg_\w+/comfyui.json: fused\[0\] gives 2 row shares for 4 parts"):
        FusedExport("FLUX.1", _module(tmp_path, monkeypatch, bad), "known", "keys", "the file")
    with pytest.raises(DataFileError, match=r"fused\[0\] has the unknown key 'part'"):
        FusedExport("FLUX.1", _module(tmp_path, monkeypatch, {**FLUX1, "fused": [{"into": "x", "part": []}]}),
                    "known", "keys", "the file")


def test_parts_in_other_proportions_fuse_when_all_are_trained_and_are_refused_otherwise(tmp_path, monkeypatch, capsys):
    """A model whose q/k/v rows are not the layout's 1:1:1 (grouped-query attention of another ratio): fully trained,
    each part keeps its own rows; partly trained, the untrained part's rows cannot be placed, so the export refuses
    (a run prints that line instead of its ComfyUI file: its adapter is already written)."""
    from safetensors.torch import save_file

    from dit_lora.core.errors import UserError
    from dit_lora.output.names import ADAPTER_FILE

    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file")
    rows = {"to_q": 8, "to_k": 4, "to_v": 4, "proj_mlp": 32}
    state = {}
    for part, n in rows.items():
        state[f"transformer.single_transformer_blocks.0.{'' if part == 'proj_mlp' else 'attn.'}{part}.lora_A.weight"] = torch.ones(2, 8)
        state[f"transformer.single_transformer_blocks.0.{'' if part == 'proj_mlp' else 'attn.'}{part}.lora_B.weight"] = torch.ones(n, 2)
    out = export.comfyui_state(state)
    assert out["diffusion_model.single_blocks.0.linear1.lora_B.weight"].shape == (8 + 4 + 4 + 32, 8)
    partial = {k: v for k, v in state.items() if "to_v" not in k}
    with pytest.raises(UserError, match=r"fuses parts in the proportions 1:1:1:4, but the adapter's trained parts "
                                        r"have 8 rows, 4 rows, 32 rows.*Nothing was written"):
        export.comfyui_state(partial)
    save_file(partial, str(tmp_path / ADAPTER_FILE))
    export.save_adapter_extras(tmp_path, None, None)
    assert "no ComfyUI file beside the adapter: `single_blocks.0.linear1` fuses" in capsys.readouterr().out
    assert not list(tmp_path.glob("*_comfyui.safetensors"))


def _lokr_run(folder, export, parts, width=8):
    """A run folder whose adapter is a LoKr on ``parts`` of single block 0 (each 8 wide), as dit-lora saves it."""
    from safetensors.torch import save_file

    from dit_lora.output.names import ADAPTER_FILE

    g = torch.Generator().manual_seed(1)
    state = {}
    for part in parts:
        rows = width * (4 if part == "proj_mlp" else 1)
        prefix = f"transformer.single_transformer_blocks.0.{'attn.' if part != 'proj_mlp' else ''}{part}"
        state[f"{prefix}.lokr_w1"] = torch.randn(2, 2, generator=g)
        state[f"{prefix}.lokr_w2"] = torch.randn(rows // 2, width // 2, generator=g)
    folder.mkdir(exist_ok=True)
    save_file(state, str(folder / ADAPTER_FILE))
    return state


def test_diff_bytes_is_what_the_export_writes_as_fused_diffs(tmp_path, monkeypatch):
    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file",
                         typed_fused="diff")
    state = _lokr_run(tmp_path / "run", export, ["to_q", "to_k", "to_v", "proj_mlp"])
    written = export.comfyui_state(dict(state))
    diffs = [t for k, t in written.items() if k.endswith(".diff")]
    assert diffs and export.diff_bytes(state) == sum(t.numel() * t.element_size() for t in diffs)
    assert FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file").diff_bytes(
        state) == 0  # the slices layout writes no .diff


def test_a_run_writes_no_fused_diff_over_the_limit_and_says_how_to_export_it(tmp_path, monkeypatch, capsys):
    from dit_lora.output import comfyui_fused

    export = FusedExport("FLUX.1", _module(tmp_path, monkeypatch, FLUX1), "known", "keys", "the file",
                         typed_fused="diff")
    run = tmp_path / "run"
    _lokr_run(run, export, ["to_q", "to_k", "to_v"])
    monkeypatch.setattr(comfyui_fused, "AUTO_DIFF_BYTES", 100)
    export.save_adapter_extras(run, None, None)
    said = capsys.readouterr().out
    assert not list(run.glob("*_comfyui.safetensors"))
    assert "no ComfyUI file written beside pytorch_lora_weights.safetensors" in said
    assert f"dit-lora export {run} --format comfyui" in said
    assert export.export_adapter(run, "comfyui")  # on request it is written
    monkeypatch.setattr(comfyui_fused, "AUTO_DIFF_BYTES", 2 * 2**30)
    for path in run.glob("*_comfyui.safetensors"):
        path.unlink()
    export.save_adapter_extras(run, None, None)  # under the limit: written by the run itself
    assert len(list(run.glob("*_comfyui.safetensors"))) == 1
