"""output/comfyui_types.py's rename export: the families' rename tables as data files (``RenameTable``) and the
``RenamedExport`` every renaming family (Wan, FLUX.2) states its table to."""

from __future__ import annotations

import re

import pytest

from dit_lora.core.datafile import DataFileError
from dit_lora.output.comfyui_types import RenamedExport, RenameTable


def _package(tmp_path, monkeypatch, text: str) -> str:
    """A package of its own per test (an imported package keeps the folder it was first found in)."""
    package = tmp_path / ("renamepkg_" + re.sub(r"\W", "_", tmp_path.name))
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "comfyui.json").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{package.name}.comfyui"


def test_a_row_maps_its_block_index_and_only_whole_names():
    table = RenameTable([("blocks.N.attn1.to_out.0", "blocks.N.self_attn.o"), ("proj_out", "head.head")])
    assert table.rename("blocks.12.attn1.to_out.0") == "blocks.12.self_attn.o"
    assert table.rename("proj_out") == "head.head"
    for other in ("blocks.1.attn1.to_out.00", "blocks.x.attn1.to_out.0", "xproj_out", "proj_out.0"):
        assert table.rename(other) is None


def test_the_families_tables_read_and_every_row_renames_itself():
    for module in ("dit_lora.families.wan.comfyui", "dit_lora.families.flux2.comfyui"):
        table = RenameTable.read(module)
        for pattern, name in table.rows:
            diffusers = pattern.pattern[1:-1].replace(r"(\d+)", "3").replace("\\", "")
            assert table.rename(diffusers) == name.replace(".N.", ".3."), (module, diffusers)


@pytest.mark.parametrize("row", ['["blocks.N.q"]', '["blocks.N.q", "blocks.q"]', '["a.N.N", "b.N.N"]', '[1, "b"]'])
def test_a_damaged_row_is_refused_naming_the_file(row, tmp_path, monkeypatch):
    module = _package(tmp_path, monkeypatch, '{"modules": [["proj_out", "head.head"], %s]}' % row)
    with pytest.raises(DataFileError, match=r"renamepkg_\w+/comfyui.json: modules\[1\] is .* not a \[diffusers name, "):
        RenameTable.read(module)


def test_a_renamed_export_refuses_another_format_and_names_unknown_layers(tmp_path):
    import torch

    from dit_lora.core.errors import UserError

    export = RenamedExport("Toy", RenameTable([("proj_out", "head.head")]), "proj_out", "keys", "the file")
    assert export.export_formats() == {"comfyui": "the file"} and "dora" not in export.export_types("comfyui")
    with pytest.raises(UserError, match=r"Toy exports only `comfyui`, not `kohya` \(--format\)"):
        export.export_adapter(tmp_path, "kohya")
    a, b = torch.ones(2, 4), torch.ones(4, 2)
    state = {"transformer.proj_out.lora_A.weight": a, "transformer.proj_out.lora_B.weight": b}
    assert sorted(export.comfyui_state(state)) == ["diffusion_model.head.head.lora_A.weight",
                                                   "diffusion_model.head.head.lora_B.weight"]
    with pytest.raises(UserError, match="`transformer.norm.lora_A.weight` is not a tensor of a Toy transformer layer"):
        export.comfyui_state({**state, "transformer.norm.lora_A.weight": a, "transformer.norm.lora_B.weight": b})
