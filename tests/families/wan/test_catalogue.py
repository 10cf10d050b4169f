"""families/wan/catalogue.py: the published Wan 2.1 / 2.2 checkpoints, by content, and their Hub-layout fixtures.

(tests/catalogue/test_catalogue.py checks every registered family's entries against the libraries too; these are
Wan's own, read from the data file so they run before the family is registered.)
"""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.families.wan.catalogue import ENTRIES, IMAGE_PROCESSOR_CONFIG, TEXT_LEN

BY_ID = {e.hub_id: e for e in ENTRIES}
A14B = ("Wan-AI/Wan2.2-T2V-A14B-Diffusers", "Wan-AI/Wan2.2-I2V-A14B-Diffusers")
TWINS = {"Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers"}


def read_from(configs):
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


def _build(config: dict):
    """The config's model on the meta device (diffusers by ``_class_name``, transformers by ``model_type``)."""
    import diffusers
    import transformers
    from accelerate import init_empty_weights

    with init_empty_weights():
        if "_class_name" in config:
            return getattr(diffusers, config["_class_name"]).from_config(config)
        return getattr(transformers, config["architectures"][0])(transformers.AutoConfig.for_model(**config))


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_seven_published_ids_and_their_families():
    assert list(BY_ID) == [
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "Wan-AI/Wan2.1-T2V-14B-Diffusers", "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
        "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", *A14B]
    assert {e.hub_id for e in ENTRIES if e.family == "wan_i2v"} == TWINS | {A14B[1]}
    assert all(e.family == "wan" for e in ENTRIES if e.hub_id not in TWINS | {A14B[1]})


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_entry_is_consistent_with_its_kind(entry):
    index, transformer = entry.configs["model_index.json"], entry.configs["transformer/config.json"]
    vae = entry.configs["vae/config.json"]
    i2v = entry.family == "wan_i2v"
    assert index["_class_name"] == ("WanImageToVideoPipeline" if i2v else "WanPipeline")
    # I2V concatenates noise (z), a 4-channel first-frame mask and the image latents (z): 16 + 4 + 16
    assert transformer["in_channels"] == (2 * vae["z_dim"] + 4 if i2v else vae["z_dim"])
    assert transformer["out_channels"] == vae["z_dim"] == len(vae["latents_mean"]) == len(vae["latents_std"])
    assert entry.matches(read_from(entry.configs))
    assert entry.text_length == TEXT_LEN == 512 and entry.stored_dtype == "fp32"
    assert entry.tokenizer_files == ("special_tokens_map.json", "spiece.model", "tokenizer.json",
                                     "tokenizer_config.json")
    assert entry.configs["text_encoder/config.json"]["vocab_size"] == 256384  # umt5-xxl
    scheduler = entry.configs["scheduler/scheduler_config.json"]
    assert scheduler["prediction_type"] == "flow_prediction" and scheduler["use_flow_sigmas"] is True
    size = (121, 704, 1280) if entry.trained["fps"] == 24 else (81, 480, 832)  # the size a run trains at (TI2V: 24 fps)
    assert entry.defaults == {"rank": 32, "lora_alpha": 32, "learning_rate": 1e-4, "train_batch_size": 1,
                              **dict(zip(("max_num_frames", "height", "width"), size))}
    assert entry.sources["defaults"] and entry.sources["configs"]
    two = entry.hub_id in A14B
    assert ("transformer_2/config.json" in entry.configs) == two == ("transformer_2/config.json" in entry.depth)
    assert ("image_encoder/config.json" in entry.configs) == (entry.hub_id in TWINS)  # only 2.1 I2V has CLIP


def test_a14b_has_two_experts_and_its_boundary():
    for hub_id, boundary in zip(A14B, (0.875, 0.9)):
        entry = BY_ID[hub_id]
        index = entry.configs["model_index.json"]
        assert index["boundary_ratio"] == boundary and index["expand_timesteps"] is False
        assert index["transformer_2"] == ["diffusers", "WanTransformer3DModel"]
        assert entry.configs["transformer_2/config.json"] == entry.configs["transformer/config.json"]
        assert entry.configs["transformer/config.json"]["image_dim"] is None  # 2.2 I2V has no CLIP branch
    assert BY_ID[A14B[1]].configs["model_index.json"]["image_encoder"] == [None, None]


def test_ti2v_expands_timesteps_with_the_48_channel_vae():
    entry = BY_ID["Wan-AI/Wan2.2-TI2V-5B-Diffusers"]
    index, vae = entry.configs["model_index.json"], entry.configs["vae/config.json"]
    assert index["expand_timesteps"] is True and index["boundary_ratio"] is None
    assert index["transformer_2"] == [None, None]
    assert (vae["z_dim"], vae["scale_factor_spatial"], vae["patch_size"], vae["is_residual"]) == (48, 16, 2, True)
    assert entry.configs["scheduler/scheduler_config.json"]["flow_shift"] == 5.0
    assert entry.trained == {"frames": 121, "height": 704, "width": 1280, "fps": 24}
    assert entry.trained_text() == "121 x 704 x 1280 at 24 fps"


def test_wan21_files_predate_the_22_pipeline_keys():
    for entry in ENTRIES[:4]:
        assert "boundary_ratio" not in entry.configs["model_index.json"]
        assert entry.trained["fps"] == 16 and entry.trained["frames"] == 81
    assert BY_ID["Wan-AI/Wan2.1-T2V-1.3B-Diffusers"].trained_text() == "81 x 480 x 832 at 16 fps"


def test_entries_are_told_apart_by_content_except_the_i2v_twins():
    for entry in ENTRIES:
        matching = {other.hub_id for other in ENTRIES if other.matches(read_from(entry.configs))}
        assert matching == (TWINS if entry.hub_id in TWINS else {entry.hub_id}), entry.hub_id
    a, b = (BY_ID[h] for h in sorted(TWINS))
    assert a.configs == b.configs and a.defaults == b.defaults and "same architecture" in a.notes
    assert (a.trained["height"], b.trained["height"]) == (480, 720)  # what tells them apart: the Hub id


def test_a_reduced_depth_copy_still_matches_and_reports_both_experts():
    entry = BY_ID[A14B[0]]
    configs = json.loads(json.dumps(entry.configs))
    for sub in ("transformer", "transformer_2"):
        configs[f"{sub}/config.json"]["num_layers"] = 1
    assert entry.matches(read_from(configs))
    assert entry.depth_differences(read_from(configs)) == ["num_layers 1 (published: 40)"] * 2
    configs["model_index.json"]["boundary_ratio"] = None  # a 2.1-style index: the A14B entry no longer matches
    assert not entry.matches(read_from(configs))


_BUILT: dict[str, int] = {}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_every_config_builds_its_class_on_the_meta_device(entry):
    """All of an entry's model configs build their published classes at full depth (meta tensors: no memory);
    the scheduler builds too. Each distinct config is built once."""
    import diffusers

    for file, config in entry.configs.items():
        if file == "model_index.json" or file.startswith("tokenizer"):
            continue
        if file.startswith("scheduler"):
            scheduler = getattr(diffusers, config["_class_name"]).from_config(config)
            assert scheduler.config.flow_shift == config["flow_shift"] and scheduler.config.use_flow_sigmas
            continue
        key = json.dumps(config, sort_keys=True)
        if key not in _BUILT:
            _BUILT[key] = _params(_build(config))
        assert _BUILT[key] > 0
    assert entry.configs["model_index.json"]["image_encoder"][1] == "CLIPVisionModelWithProjection" if \
        entry.hub_id in TWINS else True


#: the names' sizes; the 2.1 I2V model adds per-block image K/V projections (40 x 2 x 5120^2 = 2.1B) and its CLIP
#: MLP: 16.4B, consistent with its 14 fp32 shards on the Hub (the T2V 14B has 12)
PUBLISHED = {"Wan-AI/Wan2.1-T2V-1.3B-Diffusers": 1.3e9, "Wan-AI/Wan2.1-T2V-14B-Diffusers": 14e9,
             "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers": 16.4e9, "Wan-AI/Wan2.2-TI2V-5B-Diffusers": 5e9,
             "Wan-AI/Wan2.2-T2V-A14B-Diffusers": 14e9, "Wan-AI/Wan2.2-I2V-A14B-Diffusers": 14e9}


@pytest.mark.parametrize("hub_id", PUBLISHED)
def test_published_parameter_counts(hub_id):
    """The copied configs build models of the size the names say: within 3%, and the 1.3B within 10% (diffusers'
    transformer has 1.42B parameters, the Hub's fp32 files 5.68 GB; "1.3B" rounds down). A14B: per expert."""
    entry = BY_ID[hub_id]
    for file in ("transformer/config.json", "transformer_2/config.json"):
        if file in entry.configs:
            params = _params(_build(entry.configs[file]))
            tolerance = 0.1 if "1.3B" in hub_id else 0.03
            assert abs(params - PUBLISHED[hub_id]) / PUBLISHED[hub_id] < tolerance, (hub_id, file, params)


def test_text_and_image_encoders_have_the_published_widths():
    umt5 = _build(BY_ID["Wan-AI/Wan2.1-T2V-1.3B-Diffusers"].configs["text_encoder/config.json"])
    unique = {id(p): p.numel() for p in [umt5.shared.weight, *umt5.encoder.parameters()]}
    if umt5.encoder.embed_tokens.weight is not umt5.shared.weight:  # the files store the shared embedding once
        unique.pop(id(umt5.encoder.embed_tokens.weight))
    # 5.68B: the 2.2 repos' bf16 text encoder is 11.36 GB (the published shard sizes)
    assert type(umt5).__name__ == "UMT5EncoderModel" and abs(sum(unique.values()) - 5.68e9) / 5.68e9 < 0.02
    clip = _build(BY_ID["Wan-AI/Wan2.1-I2V-14B-480P-Diffusers"].configs["image_encoder/config.json"])
    assert clip.config.hidden_size == 1280 == BY_ID["Wan-AI/Wan2.1-I2V-14B-480P-Diffusers"].configs[
        "transformer/config.json"]["image_dim"]  # the transformer's image_dim is CLIP's width
    assert IMAGE_PROCESSOR_CONFIG["crop_size"] == {"height": 224, "width": 224} == {
        "height": clip.config.image_size, "width": clip.config.image_size}


def test_models_table_lists_all_seven(monkeypatch):
    """``dit-lora models`` (cli._models -> catalogue.table.format_table) lists every entry under its family. Until
    the lead registers the family, the registry is given a stand-in entry naming this data file."""
    from dit_lora import registry as families
    from dit_lora.catalogue.table import as_json, format_table

    if "wan" not in families.available():
        from dit_lora.registry import FamilyEntry

        stand_in = FamilyEntry(names=("wan", "wan_i2v"), factory=lambda name: None,
                               catalogue="dit_lora.families.wan")
        monkeypatch.setattr(families, "_ENTRIES", [*families._ENTRIES, stand_in])
    table = format_table("wan") + format_table("wan_i2v")
    assert all(e.hub_id in table for e in ENTRIES)
    assert "121 x 704 x 1280 at 24 fps" in table and "rank 32, lora_alpha 32, learning_rate 1e-4" in table
    # TI2V-5B serves both families (one entry, also_families): --family wan_i2v lists it too
    assert {d["hub_id"] for d in json.loads(as_json("wan_i2v"))} == TWINS | {A14B[1], "Wan-AI/Wan2.2-TI2V-5B-Diffusers"}


@pytest.mark.slow
@pytest.mark.parametrize("hub_id", [
    # the folders tests/e2e/test_real_layouts.py trains on (fp32, one block), built once a session: one worker each
    pytest.param("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", marks=pytest.mark.xdist_group("layout-Wan2.1-T2V-1.3B")),
    pytest.param("Wan-AI/Wan2.2-TI2V-5B-Diffusers", marks=pytest.mark.xdist_group("layout-Wan2.2-TI2V-5B"))])
def test_hub_layout_fixture_loads_and_generates(real_layouts, hub_id):
    """tests/support/real_layout.wan_pipeline writes a folder WanPipeline loads as published: the configs, the
    tokenizer file set, one block at real width; a two-step 5-frame 32 px video comes out finite."""
    from diffusers import WanPipeline
    from real_layout import wan_pipeline

    entry = BY_ID[hub_id]
    folder = real_layouts(wan_pipeline, hub_id, layers=1, dtype=torch.float32, narrow_text_encoder=True)
    assert sorted(p.name for p in (folder / "tokenizer").iterdir()) == list(entry.tokenizer_files)
    assert entry.matches(lambda sub, name: json.loads((folder / sub / name).read_text()))
    assert json.loads((folder / "model_index.json").read_text()) == entry.configs["model_index.json"]
    pipe = WanPipeline.from_pretrained(folder, torch_dtype=torch.float32)
    assert pipe.transformer.config.num_layers == 1 and pipe.config.expand_timesteps == ("TI2V" in hub_id)
    frames = pipe(prompt="a red square", num_frames=5, height=32, width=32, num_inference_steps=2,
                  output_type="pt").frames
    assert frames.shape == (1, 5, 3, 32, 32) and torch.isfinite(frames).all()
