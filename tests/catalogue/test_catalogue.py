"""The catalogue: every entry is consistent with its own configs, the libraries accept those configs, entries
are told apart by content (not by name), and ``dit-lora models`` lists them."""

from __future__ import annotations

import json

import pytest

from dit_lora.catalogue import by_hub_id, entries, lookup, match
from dit_lora.catalogue.table import as_json, format_table
from dit_lora.registry import available


def _reader(configs: dict):
    def read(subfolder: str, filename: str):
        return configs.get("/".join(p for p in (subfolder, filename) if p))

    return read


def test_every_entry_names_a_recipe_family_a_source_and_its_defaults_are_options():
    from dit_lora.config import config_fields

    options = {f.name for f in config_fields()}
    assert len(entries()) >= 25
    for e in entries():
        assert e.family in available(), e.hub_id
        assert e.sources.get("defaults"), e.hub_id
        assert set(e.defaults) <= options, (e.hub_id, set(e.defaults) - options)
        assert e.stored_dtype in ("fp16", "bf16", "fp32") and e.text_length > 0
        assert "/" in e.hub_id and by_hub_id(e.hub_id.upper()) is e


def test_issue_checkpoints_are_all_catalogued_and_the_nonexistent_600m_bf16_is_not():
    wanted = [f"Efficient-Large-Model/Sana_{m}_{px}_diffusers" for m in ("600M", "1600M") for px in ("512px", "1024px")]
    wanted += ["Efficient-Large-Model/Sana_1600M_2Kpx_BF16_diffusers", "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers",
               "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers", "THUDM/CogVideoX-2b", "THUDM/CogVideoX-5b",
               "THUDM/CogVideoX-5b-I2V", "THUDM/CogVideoX1.5-5B", "THUDM/CogVideoX1.5-5B-I2V", "facebook/DiT-XL-2-256",
               "facebook/DiT-XL-2-512", "llava-hf/LLaVA-NeXT-Video-7B-hf", "Qwen/Qwen2.5-VL-7B-Instruct"]
    for hub_id in wanted:
        assert by_hub_id(hub_id) is not None, hub_id
    assert by_hub_id("Efficient-Large-Model/Sana_600M_1024px_BF16_diffusers") is None


def test_every_entry_matches_its_own_configs_and_twins_share_defaults():
    """Matched by content: an entry's own configs find it (or a same-architecture twin with the same defaults),
    and the stored dtype picks the right twin (Sana 1600M 1024 px fp16 vs BF16)."""
    for e in entries():
        assert e.matches(_reader(e.configs)), e.hub_id
        found = match(e.family, _reader(e.configs), e.stored_dtype)
        assert found.signature == found.signature and found.defaults == e.defaults, (e.hub_id, found.hub_id)
        assert found.depth == e.depth and found.stored_dtype == e.stored_dtype, (e.hub_id, found.hub_id)
        if found is not e:  # only true twins (DPO variants of the same architecture) may stand in
            assert found.configs == e.configs and "same architecture" in e.notes, (e.hub_id, found.hub_id)
    bf16 = match("sana", _reader(by_hub_id("Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers").configs), "BF16")
    fp16 = match("sana", _reader(by_hub_id("Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers").configs), "F16")
    assert bf16.hub_id.endswith("BF16_diffusers") and fp16.hub_id.endswith("1600M_1024px_diffusers")


def test_a_reduced_depth_copy_matches_its_release_and_reports_the_difference():
    e = by_hub_id("Efficient-Large-Model/SANA1.5_4.8B_1024px_diffusers")
    configs = json.loads(json.dumps(e.configs))
    configs["transformer/config.json"]["num_layers"] = 2
    found = match("sana", _reader(configs))
    assert found is not None and found.family == "sana" and "1.5" in found.title
    assert found.depth_differences(_reader(configs)) == [f"num_layers 2 (published: {found.depth['transformer/config.json']['num_layers']})"]
    configs["transformer/config.json"]["num_layers"] = 60
    assert match("sana", _reader(configs)) is e  # the depth tells the 4.8B from the 1.6B
    configs["transformer/config.json"]["num_attention_heads"] = 8  # another architecture
    assert match("sana", _reader(configs)) is None


def test_lookup_reads_dotted_keys_and_transformers_5_text_config():
    config = {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 3584}, "vision_config": {"depth": 32}}
    assert lookup(config, "hidden_size") == 3584 and lookup(config, "vision_config.depth") == 32
    assert lookup(config, "vision_config.missing") is None and lookup(config, "nope.deeper") is None


def _diffusers_class(name: str):
    """A diffusers class by its config's name: the top level's, else LTX-2's pipeline modules' (its text connectors
    and vocoders live beside the pipeline, as ``model_index.json``'s ``ltx2`` library says)."""
    import diffusers
    from diffusers.pipelines.ltx2 import connectors, vocoder

    name = {"Transformer2DModel": "DiTTransformer2DModel"}.get(name, name)
    for module in (diffusers, connectors, vocoder):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"diffusers has no class {name}")


_BUILT: set[str] = set()


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.hub_id)
def test_every_published_config_builds_its_class_on_the_meta_device(entry):
    """The configs are data the libraries accept: each builds its model (no memory: meta tensors; two layers
    deep, since width and layout are what a config can get wrong; full depth in the parameter-count test), and
    the diffusers schedulers load theirs."""
    from accelerate import init_empty_weights

    for file, config in entry.configs.items():
        if file == "model_index.json" or file.startswith("tokenizer"):
            continue
        config = _two_layers(config, entry.depth.get(file, {}))
        key = json.dumps(config, sort_keys=True)
        if key in _BUILT:  # the text encoders and VAEs many entries share are built once
            continue
        _BUILT.add(key)
        with init_empty_weights():
            if "_class_name" in config:
                model = _diffusers_class(config["_class_name"]).from_config(config)
                if file.startswith("transformer"):
                    blocks = next(getattr(model, name) for name in ("transformer_blocks", "blocks", "layers")
                                  if getattr(model, name, None) is not None)  # layers: Z-Image's main blocks
                    assert len(blocks) == 2
            else:
                import transformers

                model = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(**config))
                if entry.depth.get(file):
                    assert model.config.get_text_config().num_hidden_layers == 2
        if file.startswith("scheduler"):
            assert model.config.num_train_timesteps == 1000
        else:
            assert sum(p.numel() for p in model.parameters()) > 0


def _two_layers(config: dict, depth: dict) -> dict:
    """``config`` with each depth key (``num_layers``, ``text_config.num_hidden_layers``) set to 2."""
    config = json.loads(json.dumps(config))
    for key in depth:
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[last] = 2
    return config


def test_published_parameter_counts_are_the_model_names():
    """A check on the copied configs: they build models of the size their names say."""
    from accelerate import init_empty_weights

    expected = {"Efficient-Large-Model/Sana_600M_1024px_diffusers": 0.6e9,
                "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers": 1.6e9,
                "THUDM/CogVideoX-2b": 1.7e9, "THUDM/CogVideoX-5b": 5.6e9,
                # diffusers gives each of the 28 blocks its own class table and timestep MLP: 750M, not the
                # paper's 675M (the Hub's fp32 transformer file is 3.0 GB)
                "facebook/DiT-XL-2-256": 0.75e9,
                "Tongyi-MAI/Z-Image": 6.15e9}  # "a 6B single-stream DiT": 6.15B in its model card
    for hub_id, count in expected.items():
        config = by_hub_id(hub_id).configs["transformer/config.json"]
        with init_empty_weights():
            model = _diffusers_class(config["_class_name"]).from_config(config)
        params = sum(p.numel() for p in model.parameters())
        assert abs(params - count) / count < 0.1, (hub_id, params)


def test_models_table_and_json_list_every_entry():
    table = format_table()
    assert all(e.hub_id in table for e in entries())
    assert "81 x 768 x 1360 at 16 fps" in table and "rank 128, lora_alpha 64" in table
    only_dit = format_table("dit")
    assert "facebook/DiT-XL-2-256" in only_dit and "THUDM" not in only_dit
    data = json.loads(as_json("cogvideox"))
    assert {d["hub_id"] for d in data} == {"THUDM/CogVideoX-2b", "THUDM/CogVideoX-5b", "THUDM/CogVideoX1.5-5B"}
    assert data[0]["configs"]["tokenizer/tokenizer_config.json"]["model_max_length"] == 226


def test_models_command(capsys):
    from dit_lora.commands.cli import main

    with pytest.raises(SystemExit) as done:
        main(["models", "--family", "sana"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Sana_600M_1024px_diffusers" in out and "CogVideoX" not in out
    with pytest.raises(SystemExit) as done:
        main(["models", "--family", "sd3"])
    err = capsys.readouterr().err
    assert done.value.code != 0 and "sd3" in err and "sana" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as done:  # an alias `--family` accepts lists its family's checkpoints
        main(["models", "--family", "flux.2"])
    assert done.value.code == 0 and "FLUX.2-klein-base-4B" in capsys.readouterr().out


def test_a_hub_id_picks_its_own_entry_among_twins():
    """The BF16 release, named by its id, is itself even when its dtype cannot be read (a Hub id)."""
    configs = by_hub_id("Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers").configs
    assert match("sana", _reader(configs)).hub_id == "Efficient-Large-Model/Sana_1600M_1024px_diffusers"
    named = match("sana", _reader(configs), None, "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers")
    assert named.hub_id == "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"
    dpo = by_hub_id("llava-hf/LLaVA-NeXT-Video-7B-DPO-hf")
    assert match("llava_next_video", _reader(dpo.configs), None, dpo.hub_id) is dpo


def test_every_data_file_is_listed_once_and_every_family_has_entries():
    """The data files are the registry entries' catalogue packages: a family package's catalogue.json counts once
    its ENTRY names it (no list to edit elsewhere); every family gets entries."""
    import pkgutil
    from importlib import resources

    import dit_lora.families as package
    from dit_lora import registry
    from dit_lora.catalogue import data_files
    from dit_lora.catalogue.files import catalogue_of

    found = {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.ispkg}
    found = {name for name in found if resources.files(name).joinpath("catalogue.json").is_file()}
    assert sorted(data_files()) == sorted(found) and len(set(data_files())) == len(data_files())
    assert data_files() == tuple(e.catalogue for e in registry.entries() if e.catalogue)
    assert len(entries()) == sum(len(catalogue_of(n).entries) for n in data_files())
    assert {f for e in entries() for f in e.families} == set(available())


def test_every_video_checkpoints_default_size_is_what_dit_lora_models_says(tmp_path):
    """What `dit-lora models` (and the options reference, which points there) gives as a video checkpoint's default
    size, its `max_num_frames`/`height`/`width` defaults or else the size it was trained at, is the size a run of
    that checkpoint trains at without size flags (the first of its buckets), for every video family."""
    from real_layout import write_configs

    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.catalogue.table import format_table
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    checked = set()
    for e in entries():
        if "frames" not in e.trained:
            continue
        folder = write_configs(e.hub_id, tmp_path / e.hub_id.replace("/", "--"))
        spec = get_spec(e.family)
        cfg = choose_defaults(TrainConfig.for_family(e.family, pretrained_model_name_or_path=str(folder)), spec).config
        said = tuple(e.defaults.get(k, e.trained[t]) for k, t in (("max_num_frames", "frames"), ("height", "height"),
                                                                  ("width", "width")))
        assert spec.video_frames.video_buckets(cfg)[0] == said, e.hub_id
        if said != (e.trained["frames"], e.trained["height"], e.trained["width"]):  # the table shows the default
            row = next(line for line in format_table(e.family).splitlines() if line.startswith(e.hub_id + " "))
            assert f"max_num_frames {said[0]}, height {said[1]}, width {said[2]}" in row, row
        checked.add(e.family)
    assert checked >= {"cogvideox", "wan", "sanavideo"}
