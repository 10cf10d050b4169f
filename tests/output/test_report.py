"""The loss curve: a real matplotlib plot when the extra is installed, and nothing (said once) without it.

matplotlib is the optional ``plot`` extra. The tests that draw need it: where it is missing they skip with that reason,
unless the rest of the ``dev`` extra is installed (CI installs ``.[dev]``, which has matplotlib), where a missing
matplotlib is a broken install and fails. The no-matplotlib path hides it (``sys.modules``) and runs everywhere.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from PIL import Image

from dit_lora.output.report import plot_loss_curve


def _dev_extra_installed() -> bool:
    """Whether every package of dit-lora's ``dev`` extra other than matplotlib is installed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        requires = [Requirement(r) for r in metadata.requires("dit-lora") or []]
    except metadata.PackageNotFoundError:
        return False
    dev = [r.name for r in requires if r.marker is not None and r.marker.evaluate({"extra": "dev"})
           and not r.marker.evaluate({"extra": ""}) and r.name != "matplotlib"]

    def installed(name: str) -> bool:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            return False
        return True
    return bool(dev) and all(installed(name) for name in dev)


@pytest.fixture
def matplotlib_installed():
    """Skip (with the reason) where the optional ``plot`` extra is absent; fail where the dev extra should have it."""
    if importlib.util.find_spec("matplotlib") is not None:
        return
    if _dev_extra_installed():
        pytest.fail("matplotlib is not importable although the rest of the dev extra is installed (CI installs "
                    "`.[dev]`, which has it): reinstall with `pip install -e \".[dev]\" -c constraints.txt`.",
                    pytrace=False)
    pytest.skip("needs matplotlib (the optional `plot` extra, not installed here): `pip install -e \".[plot]\"` "
                "adds it; the dev extra, which CI installs, has it")


def test_loss_curve_is_a_plot_with_axes_and_skips_nonfinite_points(tmp_path, matplotlib_installed):
    steps = list(range(10, 210, 10))
    losses = [1.0 / (1 + i) for i in range(20)]
    losses[5], losses[6] = float("nan"), None  # a window with no finite loss leaves a gap, not a crash
    path = plot_loss_curve(steps, losses, tmp_path / "loss_curve.png", rollbacks=[70])
    assert path == tmp_path / "loss_curve.png"
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (360, 640, 3)
    # Axes, tick labels and lines: dark pixels and more than a handful of colours, not a blank canvas.
    assert (image.sum(axis=2) < 200).sum() > 1000
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20


def test_loss_curve_without_points_still_writes_a_labelled_plot(tmp_path, matplotlib_installed):
    assert plot_loss_curve([], [], tmp_path / "empty.png").is_file()


def test_without_matplotlib_no_curve_and_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    lines: list[str] = []
    assert plot_loss_curve([1, 2], [0.5, 0.4], tmp_path / "loss.png", log=lines.append) is None
    assert not (tmp_path / "loss.png").exists()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "dit-lora[plot]" in lines[0]


@pytest.mark.slow
def test_a_run_without_matplotlib_writes_no_curve_and_says_so_once(tiny_sana, shapes_data, tmp_path, monkeypatch,
                                                                   capsys):
    """A whole (tiny, in-process) run where the plot extra is absent: it finishes, writes no loss_curve.png, says why
    once, and the closing list of outputs does not name a curve."""
    from helpers import read_summary, train_in_process

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, train_batch_size=2,
                                    resolution=32, mixed_precision="no")
    assert isinstance(summary, dict), summary
    assert (out / "pytorch_lora_weights.safetensors").is_file() and read_summary(out)["applied_updates"] == 2
    assert not (out / "loss_curve.png").exists()
    printed = capsys.readouterr().out
    said = [line for line in printed.splitlines() if "loss curve: not drawn" in line]
    assert len(said) == 1 and "matplotlib is not installed" in said[0] and "dit-lora[plot]" in said[0]
    assert "loss curve " not in printed.split("finished:", 1)[1]


def test_config_dict_is_flat_with_the_familys_own_options_beside_the_common_ones():
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import config_dict

    values = config_dict(TrainConfig.for_family("dit", num_classes=7, resolution=64))
    assert values["num_classes"] == 7 and values["resolution"] == 64 and values["family"] == "dit"
    assert "family_options" not in values
    assert config_dict(TrainConfig.for_family("sana"))["weighting_scheme"] == "logit_normal"


# ---- the model card's strength sentence: only loaders a test loads the file with -------------------------------------
def _card(family_name: str, tmp_path, **values) -> str:
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.output.report import write_model_card

    cfg = TrainConfig.for_family(family_name, pretrained_model_name_or_path="org/model", **values)
    path = write_model_card(get_family(family_name), cfg, tmp_path, {"steps": 2}, [])
    return " ".join(path.read_text().split())


@pytest.mark.parametrize("family_name", ["sana", "dit"])
def test_card_names_only_the_loaders_the_tests_load_with(family_name, tmp_path):
    """ComfyUI has no Sana or DiT model and other CogVideoX key names (issue 28: 0 of 32 tensors matched), so no
    card names it; a diffusers file names load_lora_weights and a metadata-blind loader as the tests check it (the
    metadata stripped), a PEFT folder load_adapter and PeftModel.from_pretrained."""
    card = _card(family_name, tmp_path, rank=4, lora_alpha=8)
    assert "Load it at scale 1.0: the trained LoRA scale alpha / rank = 2 (rank 4, alpha 8) is folded" in card
    assert "ComfyUI" not in card and "other loaders" not in card
    if family_name == "sana":
        assert ("diffusers' `load_lora_weights` applies the trained strength, and so does a loader that reads no alpha "
                "and assumes alpha = rank (checked in dit-lora's tests by loading such a file with its metadata "
                "stripped)") in card
    else:
        assert "`dit_lora.load_adapter` and PEFT's `PeftModel.from_pretrained` apply the trained strength" in card
        assert "load_lora_weights` applies" not in card


def test_card_at_alpha_equal_rank_and_with_an_export_format(tmp_path):
    """alpha = rank says so; a family declaring Exports lists each format with its own description (the Sana spec
    with a stand-in Exports, so no family's wording is asserted here)."""
    from dit_lora.contract import capabilities as caps
    from types import SimpleNamespace

    from dit_lora.registry import get_spec
    from dit_lora.output.report import _exports_note

    card = _card("sana", tmp_path, rank=8, lora_alpha=8)
    assert "Load it at scale 1.0: rank 8, alpha = rank, so diffusers' `load_lora_weights`" in card
    assert "Other formats" not in card

    class Exporting:
        capabilities = (caps.Exports,)

        def export_formats(self):
            return {"fmt": "what fmt holds and how it was checked"}

    assert _exports_note(get_spec("sana")) == ""
    note = _exports_note(SimpleNamespace(exports=Exporting()))
    assert "`dit-lora export OUTPUT_DIR --format FORMAT`" in note
    assert "- `fmt`: what fmt holds and how it was checked" in note


def test_card_gives_the_batch_that_trained_and_the_flag_when_the_data_was_smaller(tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_family

    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="x", output_dir=str(tmp_path),
                                 train_batch_size=64)
    text = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2, "train_batch_size": 4}, []).read_text()
    assert "| train_batch_size | 4 (--train_batch_size 64; the data holds fewer samples per process) |" in text
    text = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2, "train_batch_size": 64}, []).read_text()
    assert "| train_batch_size | 64 |" in text


def test_card_names_activation_offloading_only_when_on(tmp_path):
    row = "| activation offloading (--activation_offloading) | saved activations in host memory"
    assert row in _card("sana", tmp_path, activation_offloading=True)
    assert "activation offloading" not in _card("sana", tmp_path)


def test_card_names_masked_loss_and_the_samples_left_out_only_when_there_are(tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_family

    card = _card("sana", tmp_path, masked_loss=True, unmasked_weight=0.25, normalize_masked_area_loss=True)
    assert ("| masked loss (--masked_loss) | yes: per latent pixel by each image's mask, unmasked area weighted 0.25, "
            "each sample's loss divided by its mask's mean |") in card
    plain = _card("sana", tmp_path)
    assert "masked loss" not in plain and "samples left out" not in plain
    quarantine = [{"key": "a.png", "reason": "unreadable image: truncated"}, {"key": "b.png", "reason": "empty caption"},
                  {"key": "c.png", "reason": "unreadable image: not an image"}]
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="org/model")
    text = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2, "quarantine": quarantine}, []).read_text()
    assert "| samples left out (quarantine.json) | 3 (empty caption; unreadable image) |" in text


def test_the_held_out_loss_is_drawn_beside_the_training_loss_with_its_best_step(tmp_path, matplotlib_installed,
                                                                                 monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read its lines
    validation = [(0, 1.2), (2, 0.9), (4, float("nan")), (6, 0.95)]
    assert plot_loss_curve([2, 4, 6], [1.0, 0.8, 0.7], tmp_path / "loss_curve.png", validation=validation).is_file()
    (figure,) = figures
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    held = lines["validation loss (held out)"]
    assert list(held.get_xdata()) == [0, 2, 6] and list(held.get_ydata()) == [1.2, 0.9, 0.95]  # the NaN left out
    assert list(lines["best: step 2"].get_xdata()) == [2]
    assert "loss (window mean)" in lines and figure.axes[0].get_title() == "training and held-out validation loss"
    close(figure)


def test_card_puts_each_validation_prompt_before_its_samples(tmp_path):
    from PIL import Image

    from dit_lora.config import TrainConfig
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_family

    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="me/model",
                                 validation_prompt=["a red circle", "a blue\nsquare"])
    (tmp_path / "samples").mkdir()
    files = []
    for name in ("final_grid.png", "final_p0_0.png", "final_p1_0.png", "final_p1_1.png"):
        Image.new("RGB", (4, 4)).save(tmp_path / "samples" / name)
        files.append(tmp_path / "samples" / name)
    text = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2}, files).read_text()
    section = text.split("## Samples", 1)[1]
    assert section.index("![final_grid]") < section.index("> a red circle") < section.index("![final_p0_0]")
    assert section.index("![final_p0_0]") < section.index("> a blue square") < section.index("![final_p1_0]")
    assert section.count("> a blue square") == 1
    one = TrainConfig.for_family("sana", pretrained_model_name_or_path="me/model", validation_prompt="a red circle")
    single = write_model_card(get_family("sana"), one, tmp_path, {"steps": 2}, files[1:2]).read_text()
    assert "> a red circle" not in single and "![final_p0_0](samples/final_p0_0.png)" in single


def test_a_local_card_names_a_relative_base_by_its_absolute_path_and_runs_from_any_folder(tmp_path, monkeypatch):
    """Issue 76: the demo card's base was `.dit_lora_demo/tiny-sana`, relative to where training ran, beside an
    absolute adapter path: run from the output folder it failed (HFValidationError)."""
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import card_base

    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="models/tiny")
    base, metadata, note = card_base(cfg.model, cfg.hub, {})
    assert base == metadata == str(tmp_path / "models" / "tiny") and note == ""
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_family

    card = write_model_card(get_family("sana"), cfg, tmp_path, {"steps": 2}, []).read_text()
    assert f'base = "{tmp_path / "models" / "tiny"}"' in card and '"models/tiny"' not in card
    pushed = TrainConfig.for_family("sana", pretrained_model_name_or_path="models/tiny", hub_model_id="me/lora")
    assert card_base(pushed.model, pushed.hub, {})[0] == "tiny"  # a Hub card names no path of this machine


@pytest.mark.parametrize("family_name", ["flux_kontext", "qwenimage_edit_plus", "wan_i2v"])
def test_an_edit_or_image_to_video_card_loads_the_input_the_run_wrote_beside_its_adapter(family_name, tmp_path):
    """Issue 76: the Kontext and Qwen-Image-Edit demo cards loaded a `before.png` that does not exist. The local card
    loads `card_input.png` from the output folder, the Hub card from the repo; the push takes the file along."""
    from dit_lora.config import TrainConfig
    from dit_lora.output.hub import select_files
    from dit_lora.output.names import CARD_INPUT_FILE
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_family

    cfg = TrainConfig.for_family(family_name, pretrained_model_name_or_path="org/model")
    card = write_model_card(get_family(family_name), cfg, tmp_path, {"steps": 2}, []).read_text()
    assert f'load_image("{tmp_path.resolve() / CARD_INPUT_FILE}")' in card
    assert "before.png" not in card and "first_frame.png" not in card
    hub = TrainConfig.for_family(family_name, pretrained_model_name_or_path="org/model", hub_model_id="me/lora")
    card = write_model_card(get_family(family_name), hub, tmp_path, {"steps": 2}, []).read_text()
    assert f'load_image(hf_hub_download("me/lora", "{CARD_INPUT_FILE}"))' in card
    assert "from huggingface_hub import hf_hub_download" in card
    (tmp_path / CARD_INPUT_FILE).write_bytes(b"png")
    assert CARD_INPUT_FILE in select_files(tmp_path)
