"""output/type_card.py: the model card's adapter-type row, the consumers of each type, and the usage snippet right
for the type (PEFT's loading for LoKr/LoHa, which diffusers' load_lora_weights does not read; the snippet itself runs
in tests/e2e/test_adapter_types.py)."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig
from dit_lora.output.type_card import type_row, type_snippet
from dit_lora.registry import get_family


def test_the_row_names_the_type_and_its_own_settings():
    assert type_row(TrainConfig(lora_type="dora").lora) == "DoRA (`--lora_type dora`)"
    lokr = TrainConfig(lora_type="lokr", lokr_factor=8, lokr_decompose_both=True, module_dropout=0.1).lora
    assert type_row(lokr) == "LoKr (`--lora_type lokr`): factor 8, decompose_both on, module_dropout 0.1"


def test_a_hub_repo_snippet_downloads_the_folder_and_other_types_keep_the_familys_snippet():
    snippet = 'pipe = X.from_pretrained(base)\npipe.load_lora_weights("me/repo")\npipe.to("cuda")\n'
    loha = type_snippet(snippet, TrainConfig(lora_type="loha").lora, "me/repo")
    assert 'folder = snapshot_download("me/repo")' in loha and "LoHaConfig.from_pretrained(folder)" in loha
    assert "load_lora_weights" not in loha.split("# LoHa")[0] + loha.split("set_peft_model_state_dict(pipe")[1]
    for kind in ("lora", "dora"):
        assert type_snippet(snippet, TrainConfig(lora_type=kind).lora, "me/repo") == snippet


@pytest.mark.parametrize("kind", ["dora", "lokr"])
def test_the_card_names_the_type_its_consumers_and_the_right_snippet(kind, tmp_path):
    from dit_lora.output.report import write_model_card

    cfg = TrainConfig(family="sana", pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_512px_diffusers",
                      output_dir=str(tmp_path), lora_type=kind, rank=4, lora_alpha=8, lokr_factor=None)
    text = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2}, []).read_text()
    if kind == "dora":
        assert "| adapter type | DoRA (`--lora_type dora`) |" in text and "pipe.load_lora_weights(" in text
        assert "DoRA adapter: loaded by diffusers' `load_lora_weights`" in text
        assert "folded into the lora_B weights" in text and "tags:\n- lora\n- dit-lora\n- dora" in text
    else:
        assert "| adapter type | LoKr (`--lora_type lokr`): factor auto (near the square root), decompose_both off |" in text
        assert "load_lora_weights(" not in text and "not diffusers' `load_lora_weights`" in text
        assert "pipe.transformer.add_adapter(LoKrConfig.from_pretrained(folder))" in text
        assert "set_peft_model_state_dict(pipe.transformer, state)" in text
        assert "folded into the lokr_w1 (lokr_w1_a when decomposed) weights" in text




def test_the_card_says_what_comfyui_loads_for_the_runs_family_and_type():
    """A Sana LoKr card says Sana has no ComfyUI export (it once listed other families'); a Z-Image LoKr card names
    the ComfyUI file; a Wan DoRA card says ComfyUI does not reproduce DoRA."""
    from types import SimpleNamespace

    from dit_lora.output.type_card import type_note
    from dit_lora.registry import get_spec

    def note(family, kind):
        return type_note(SimpleNamespace(lora_type=kind), get_spec(family).exports)

    assert "this family has no ComfyUI export" in note("sana", "lokr") and "Z-Image" not in note("sana", "lokr")
    assert "ComfyUI loads its ComfyUI-named file" in note("zimage", "lokr")
    assert "not ComfyUI, whose `dora_scale`" in note("wan", "dora")
    assert note("wan", "lora") == ""
