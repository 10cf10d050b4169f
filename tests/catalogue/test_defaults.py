"""Which defaults a run takes: the user's flags, then the catalogue entry the model's configs match, then the
family's generic defaults from the model's own configs, then the schema; and the one block that says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.catalogue.defaults import choose_defaults
from dit_lora.config.parser import parse_config
from dit_lora.registry import get_family


def _layout(root: Path, hub_id: str, **transformer) -> Path:
    """A folder with a release's configs exactly as the catalogue records them (no weights: defaults are
    decided from configs alone), optionally with some transformer values changed."""
    folder = root / hub_id.split("/")[-1]
    for file, config in by_hub_id(hub_id).configs.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps({**config, **transformer} if file.startswith("transformer") else config))
    return folder


def _resolve(folder: Path, family: str, *flags: str):
    cfg = parse_config(["--pretrained_model_name_or_path", str(folder), "--train_data_dir", str(folder),
                        "--family", family, *flags])
    chosen = choose_defaults(cfg, get_family(family))
    return chosen.config, chosen


@pytest.mark.parametrize("hub_id", [
    "Efficient-Large-Model/Sana_600M_512px_diffusers", "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers",
    "THUDM/CogVideoX-2b", "THUDM/CogVideoX1.5-5B-I2V", "facebook/DiT-XL-2-512",
])
def test_a_catalogued_layout_gets_its_entrys_defaults_with_minimal_flags(tmp_path, hub_id):
    entry = by_hub_id(hub_id)
    cfg, chosen = _resolve(_layout(tmp_path, hub_id), entry.family)
    assert chosen.entry is entry
    for name, value in entry.defaults.items():
        assert cfg.option(name) == value, name
        assert chosen.applied[name][0] == value and hub_id in chosen.applied[name][1]
    text = "\n".join(chosen.lines())
    assert text.startswith(f"defaults: `{cfg.model.pretrained_model_name_or_path}` has the published config of {hub_id}")
    assert entry.trained_text() in text and chosen.summary()["catalogue_entry"] == hub_id


def test_flags_win_and_the_block_says_what_differs_from_the_catalogue(tmp_path):
    folder = _layout(tmp_path, "THUDM/CogVideoX-5b")
    cfg, chosen = _resolve(folder, "cogvideox", "--learning_rate", "1e-4", "--rank", "32")
    assert cfg.training.learning_rate == 1e-4 and cfg.lora.rank == 32 and cfg.training.train_batch_size == 1
    # alpha keeps the published alpha / rank ratio (64 / 128) at the user's rank, not the published 64
    assert cfg.lora.lora_alpha == 16
    assert chosen.overridden == {"learning_rate": (1e-4, 2e-5), "rank": (32, 128)}
    lines = chosen.lines()
    assert any("--learning_rate" in line and "yours (the catalogue's: 2e-05)" in line for line in lines)
    assert any("--lora_alpha" in line and "ratio 0.5" in line for line in lines)
    assert chosen.summary()["user_set"] == {"learning_rate": 1e-4, "rank": 32}


def test_a_yaml_value_counts_as_set_by_the_user(tmp_path):
    folder = _layout(tmp_path, "Efficient-Large-Model/Sana_600M_1024px_diffusers")
    config = tmp_path / "run.yaml"
    config.write_text("rank: 32\nlora_alpha: 32\nresolution: 512\n")
    cfg, chosen = _resolve(folder, "sana", "--config", str(config))
    assert (cfg.lora.rank, cfg.lora.lora_alpha, cfg.data.resolution, cfg.training.learning_rate) == (32, 32, 512, 1e-4)
    assert set(chosen.overridden) == {"rank", "lora_alpha", "resolution"}


def test_a_reduced_depth_copy_gets_the_release_defaults_and_says_what_differs(tmp_path):
    folder = _layout(tmp_path, "Efficient-Large-Model/Sana_600M_1024px_diffusers", num_layers=2)
    cfg, chosen = _resolve(folder, "sana")
    assert chosen.entry.hub_id == "Efficient-Large-Model/Sana_600M_1024px_diffusers" and cfg.lora.rank == 4
    assert "num_layers 2 (published: 28)" in chosen.lines()[0]


def test_an_unknown_config_trains_with_generic_defaults_and_says_so(tmp_path):
    folder = _layout(tmp_path, "Efficient-Large-Model/Sana_600M_1024px_diffusers", num_attention_heads=4,
                     sample_size=16)
    cfg, chosen = _resolve(folder, "sana")
    assert chosen.entry is None
    assert "matches no catalogued sana checkpoint" in chosen.lines()[0] and "generic defaults" in chosen.lines()[0]
    # the generic default comes from the model's own configs: sample_size 16 x the DC-AE's 32x
    assert cfg.data.resolution == 512 and "sample_size 16" in chosen.applied["resolution"][1]
    assert cfg.lora.rank == 16 and "rank" not in chosen.applied  # the schema's own default, not reported


def test_the_defaults_header_never_ends_in_a_colon_with_nothing_after_it(tmp_path):
    """An unknown model whose generic defaults the user already set (here --resolution): one whole sentence, not
    "... generic defaults:" followed by nothing."""
    folder = _layout(tmp_path, "Efficient-Large-Model/Sana_600M_1024px_diffusers", num_attention_heads=4,
                     sample_size=16)
    cfg, chosen = _resolve(folder, "sana", "--resolution", "256")
    assert chosen.entry is None and not chosen.applied and not chosen.overridden
    lines = chosen.lines()
    assert len(lines) == 1 and not lines[0].rstrip().endswith(":")
    assert "matches no catalogued sana checkpoint" in lines[0] and "keeps your value or its documented default" \
        in lines[0]
    assert cfg.data.resolution == 256


def test_dit_takes_its_resolution_from_the_model(tmp_path, tiny_dit):
    """No --resolution: the tiny DiT's native size (sample_size x the VAE's factor), not the schema's 1024."""
    cfg, chosen = _resolve(tiny_dit, "dit")
    native = json.loads((tiny_dit / "transformer" / "config.json").read_text())["sample_size"] * 8
    assert cfg.data.resolution == native and chosen.applied["resolution"][0] == native
    get_family("dit").model.validate_config(cfg)  # and the family's check accepts it
    cfg, _ = _resolve(tiny_dit, "dit", "--resolution", "1024")
    with pytest.raises(Exception, match=f"Use --resolution {native}, or leave it unset"):
        get_family("dit").model.validate_config(cfg)


@pytest.mark.parametrize("family, hub_id", [("cogvideox", "THUDM/CogVideoX-5b"), ("qwen2_5_vl", None)])
def test_video_families_default_to_one_clip_per_step(tmp_path, family, hub_id):
    folder = _layout(tmp_path, hub_id) if hub_id else tmp_path / "unknown"
    folder.mkdir(exist_ok=True)
    cfg, chosen = _resolve(folder, family)
    assert cfg.training.train_batch_size == 1 and "train_batch_size" in chosen.applied
    cfg, chosen = _resolve(folder, family, "--train_batch_size", "2")
    assert cfg.training.train_batch_size == 2


def test_a_frame_buckets_run_gets_no_size_default(tmp_path):
    """--frame_buckets sets every clip's size (and refuses --height/--width/--max_num_frames beside it): the
    catalogue's size defaults (SANA-Video's, Wan's) are not applied to it."""
    from real_layout import write_configs

    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    folder = write_configs("Wan-AI/Wan2.1-T2V-14B-Diffusers", tmp_path / "wan")
    plain = choose_defaults(TrainConfig.for_family("wan", pretrained_model_name_or_path=str(folder)), get_spec("wan"))
    assert (plain.config.video.max_num_frames, plain.config.video.height, plain.config.video.width) == (81, 480, 832)
    cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path=str(folder), frame_buckets="33x256x256")
    chosen = choose_defaults(cfg, get_spec("wan"))
    assert (chosen.config.video.max_num_frames, chosen.config.video.height, chosen.config.video.width) == (None, None, None)
    assert chosen.applied["rank"][0] == 32


def test_the_reader_of_a_catalogued_id_hands_out_copies_the_catalogue_keeps(tmp_path, monkeypatch):
    """transformers' config classes edit the dict they are given (Qwen2.5-VL's rope_scaling), so a reader that
    handed out the catalogue's own dicts changed the entry for the rest of the process (CI: Qwen-Image-2512 no
    longer matched its twin)."""
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.config.schema import ModelOptions

    monkeypatch.setenv("HF_HOME", str(tmp_path))  # nothing downloaded: the catalogue's copy is read
    entry = by_hub_id("Qwen/Qwen-Image-2512")
    before = json.dumps(entry.configs, sort_keys=True)
    read = config_reader(ModelOptions(pretrained_model_name_or_path="Qwen/Qwen-Image-2512"))
    found = read("text_encoder", "config.json")
    assert found == entry.configs["text_encoder/config.json"]
    found["rope_scaling"]["rope_type"] = found["rope_scaling"].pop("type")
    found["num_hidden_layers"] = 1
    assert json.dumps(entry.configs, sort_keys=True) == before


def test_a_push_without_a_repo_id_is_named_after_the_output_folder_as_diffusers_does(tmp_path):
    from dit_lora.core.errors import UserError

    folder = _layout(tmp_path, "Efficient-Large-Model/Sana_600M_512px_diffusers")
    cfg, chosen = _resolve(folder, "sana", "--push_to_hub", "--output_dir", str(tmp_path / "trained-sana-lora/"))
    assert cfg.hub.hub_model_id == "trained-sana-lora" and "diffusers' default" in chosen.applied["hub_model_id"][1]
    cfg, _ = _resolve(folder, "sana", "--push_to_hub", "--hub_model_id", "me/x", "--output_dir", str(tmp_path / "o"))
    assert cfg.hub.hub_model_id == "me/x"
    with pytest.raises(UserError, match="`my lora` .* is no repo name"):
        _resolve(folder, "sana", "--push_to_hub", "--output_dir", str(tmp_path / "my lora"))
    cfg, chosen = _resolve(folder, "sana", "--output_dir", str(tmp_path / "o"))
    assert cfg.hub.hub_model_id is None and "hub_model_id" not in chosen.applied


def test_prodigy_without_a_learning_rate_takes_its_multiplier_of_one_over_the_catalogues(tmp_path):
    """Issue 76: --optimizer prodigy with AdamW's learning rate trained at a fraction of its step, silently."""
    folder = _layout(tmp_path, "THUDM/CogVideoX-5b")  # its entry gives AdamW's 2e-5
    cfg, chosen = _resolve(folder, "cogvideox", "--optimizer", "prodigy")
    assert cfg.training.learning_rate == 1.0
    assert any("--learning_rate" in line and "Prodigy finds its own step size" in line for line in chosen.lines())
    cfg, chosen = _resolve(folder, "cogvideox", "--optimizer", "prodigy", "--learning_rate", "0.5")
    assert cfg.training.learning_rate == 0.5  # the user's value stays
    assert "learning_rate" not in chosen.overridden  # not "yours (the catalogue's: 1)": 1.0 is Prodigy's, not the entry's
    cfg, _ = _resolve(folder, "cogvideox")
    assert cfg.training.learning_rate == 2e-5  # AdamW keeps the entry's
