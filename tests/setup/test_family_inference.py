"""Models no dit-lora family trains (a PixArt-Sigma and a Stable Diffusion 3 folder with their real diffusers configs): one
paragraph naming the class found and what each registered family trains; ``--family sana`` on them is refused
while parsing, before anything is built; a registered family (the toy PixArt-alpha one) makes its pipeline supported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_lora.core.errors import UserError
from dit_lora.setup.family_inference import family_for_model, found_class, pipelines_by_family


def _folder(root: Path, pipeline: str, transformer) -> Path:
    """A pipeline folder holding the real model_index.json layout and the transformer's own saved config."""
    root.mkdir(parents=True)
    index = {"_class_name": pipeline, "_diffusers_version": "0.42.1", "transformer": ["diffusers", type(transformer).__name__],
             "vae": ["diffusers", "AutoencoderKL"], "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"]}
    (root / "model_index.json").write_text(json.dumps(index))
    transformer.save_config(root / "transformer")
    return root


@pytest.fixture(scope="module")
def unsupported(tmp_path_factory) -> dict[str, Path]:
    """A tiny PixArt-Sigma and a tiny Stable Diffusion 3 folder (configs only: nothing trains them)."""
    from diffusers import PixArtTransformer2DModel, SD3Transformer2DModel

    root = tmp_path_factory.mktemp("unsupported")
    pixart = PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                      num_layers=1, cross_attention_dim=16, caption_channels=16, sample_size=8,
                                      norm_type="ada_norm_single", use_additional_conditions=False)
    sd3 = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8,
                                num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                                pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16)
    return {"PixArtSigmaPipeline": _folder(root / "pixart-sigma", "PixArtSigmaPipeline", pixart),
            "StableDiffusion3Pipeline": _folder(root / "sd3", "StableDiffusion3Pipeline", sd3)}


def _parse(argv: list[str]):
    from dit_lora.commands.recipe import parse_run

    return parse_run(argv)


def _argv(model: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out"), *extra]


@pytest.mark.parametrize("cls", ["PixArtSigmaPipeline", "StableDiffusion3Pipeline"])
def test_unsupported_model_names_its_class_and_every_family(unsupported, tmp_path, cls):
    with pytest.raises(UserError) as err:
        _parse(_argv(unsupported[cls], tmp_path))
    text = str(err.value)
    assert f"is a {cls} (model_index.json)" in text and "not supported yet" in text and "\n" not in text
    for family, classes in pipelines_by_family().items():
        assert family in text and all(c in text for c in classes)


@pytest.mark.parametrize("cls", ["PixArtSigmaPipeline", "StableDiffusion3Pipeline"])
def test_family_of_another_class_is_refused_before_anything_is_built(unsupported, tmp_path, monkeypatch, cls):
    import sys
    import types

    import diffusers.models.modeling_utils as modeling
    from dit_lora.commands.recipe import run_recipe

    def built(*a, **k):  # the refusal must come first: no training stage, no weights
        raise AssertionError("something was built")

    monkeypatch.setitem(sys.modules, "dit_lora.training.loop", types.SimpleNamespace(train=built))
    monkeypatch.setattr(modeling.ModelMixin, "from_pretrained", classmethod(built))
    with pytest.raises(UserError) as err:
        run_recipe(None, _argv(unsupported[cls], tmp_path, "--family", "sana", "--skip_doctor", "true"))
    text = str(err.value)
    assert text.startswith(f"--family sana trains SanaPipeline; `{unsupported[cls]}` is a {cls}") and "\n" not in text


def test_transformer_only_folder_and_empty_folder_say_what_was_found(tmp_path):
    from diffusers import PixArtTransformer2DModel

    PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, num_layers=1, cross_attention_dim=16,
                             caption_channels=16, sample_size=8).save_config(tmp_path / "only")
    read = lambda folder: (lambda sub, name: json.loads(p.read_text()) if (p := folder / sub / name).is_file() else None)  # noqa: E731
    assert found_class(read(tmp_path / "only")) == ("PixArtTransformer2DModel",
                                                    "config.json (a transformer-only folder, no model_index.json)")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"has no model_index.json or config.json .* SanaPipeline"):
        _parse(_argv(tmp_path / "empty", tmp_path))


def test_a_registered_family_makes_its_pipeline_supported(unsupported, tmp_path, monkeypatch):
    from diffusers import PixArtTransformer2DModel

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # tests/: the toy family lives there
    from toy_family.pixart import ENTRY

    from dit_lora.setup.family_inference import family_for_model
    from dit_lora.registry import register_family, unregister_family

    alpha = _folder(tmp_path / "alpha", "PixArtAlphaPipeline",
                    PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, num_layers=1,
                                             cross_attention_dim=16, caption_channels=16, sample_size=8))
    cfg = type("Common", (), {"pretrained_model_name_or_path": str(alpha), "revision": None})()
    with pytest.raises(UserError, match="PixArtAlphaPipeline"):
        family_for_model(cfg)  # not registered: unsupported
    register_family(ENTRY)
    try:
        assert pipelines_by_family()["pixart_toy"] == ("PixArtAlphaPipeline",)
        assert family_for_model(cfg) == "pixart_toy"
        with pytest.raises(UserError, match=r"--family pixart_toy: PixArtAlphaPipeline"):
            _parse(_argv(unsupported["PixArtSigmaPipeline"], tmp_path))  # Sigma is still not Alpha
    finally:
        unregister_family(ENTRY)


def test_family_for_model_reads_the_catalogue_then_the_configs(tmp_path):
    from dit_lora.catalogue import entries
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError

    for entry in entries():
        assert family_for_model(TrainConfig(pretrained_model_name_or_path=entry.hub_id).model) == entry.family
    (tmp_path / "model_index.json").write_text('{"_class_name": "DiTPipeline"}')
    assert family_for_model(TrainConfig(pretrained_model_name_or_path=str(tmp_path)).model) == "dit"
    (tmp_path / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    with pytest.raises(UserError, match=r"is a StableDiffusion3Pipeline \(model_index.json\), which no dit-lora family trains.*--family sana: SanaPipeline"):
        family_for_model(TrainConfig(pretrained_model_name_or_path=str(tmp_path)).model)


def test_a_local_copy_of_every_catalogued_checkpoints_configs_is_its_familys(tmp_path):
    """Found by its configs alone (a local folder, no Hub id): two families whose transformers share a config (FLUX.1
    [dev] and Kontext) are told apart by the rest (``model_index.json``'s class)."""
    from dit_lora.catalogue import entries
    from dit_lora.config import TrainConfig

    wrong = {}
    for index, entry in enumerate(entries()):
        folder = tmp_path / str(index)
        for file, config in entry.configs.items():
            (folder / file).parent.mkdir(parents=True, exist_ok=True)
            (folder / file).write_text(json.dumps(config))
        found = family_for_model(TrainConfig(pretrained_model_name_or_path=str(folder)).model)
        if found != entry.family:
            wrong[entry.hub_id] = found
    assert not wrong


def test_a_zimage_folder_or_pipeline_is_zimage_never_its_alias(tmp_path):
    """Z-Image's alias ``z-image`` (which would sort first) is no family: a folder of its catalogued configs, one
    only its pipeline class names, and a pipeline of that class are ``zimage``."""
    from dit_lora.catalogue import by_hub_id
    from dit_lora.config import TrainConfig
    from dit_lora.setup.family_inference import family_for_pipeline

    for file, config in by_hub_id("Tongyi-MAI/Z-Image-Turbo").configs.items():
        (tmp_path / "copy" / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "copy" / file).write_text(json.dumps(config))
    assert family_for_model(TrainConfig(pretrained_model_name_or_path=str(tmp_path / "copy")).model) == "zimage"
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "model_index.json").write_text('{"_class_name": "ZImagePipeline"}')
    assert family_for_model(TrainConfig(pretrained_model_name_or_path=str(tmp_path / "bare")).model) == "zimage"

    class ZImagePipeline:
        pass

    assert family_for_pipeline(ZImagePipeline()).name == "zimage"


def _video_llm_pairs() -> list[tuple[str, str]]:
    from dit_lora.families.videollm import MODEL_CLASSES

    return [(given, folder) for given in MODEL_CLASSES for folder in MODEL_CLASSES if given != folder]


@pytest.mark.parametrize("given,folder", _video_llm_pairs())
def test_a_video_llm_family_on_another_architecture_s_folder_is_one_paragraph(tmp_path, given, folder):
    """Every pair of the video-LLM MODEL_CLASSES table (one registry entry, five architectures): --family X on a
    folder of Y stops while parsing (it ended in a TypeError or AttributeError while loading), naming the folder's
    class and model_type, the family given and the right one."""
    import transformers

    from dit_lora.commands.recipe import parse_run
    from dit_lora.families.videollm.spec import architecture_spec

    cls = architecture_spec(folder).model_class
    model_type = getattr(transformers, cls.replace("ForConditionalGeneration", "Config")).model_type
    model = tmp_path / folder
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": [cls], "model_type": model_type}))
    with pytest.raises(UserError) as err:
        parse_run(["--family", given, "--pretrained_model_name_or_path", str(model), "--train_data_dir",
                   str(tmp_path)], None)
    text = str(err.value)
    assert "\n" not in text and f"--family {given} trains {architecture_spec(given).model_class};" in text
    article = "an" if cls[0] in "AEIOU" else "a"  # "an InternVLForConditionalGeneration", never "a InternVL..."
    assert f"is {article} {cls} (config.json, model_type `{model_type}`)" in text
    assert f"Use --family {folder} for it, or drop --family" in text


# ---------------------------------------------------------------------------------------------
# A folder of another task of the same family (text-to-image vs Edit, t2v vs i2v)
# ---------------------------------------------------------------------------------------------


def _reader(cls: str):
    return lambda sub, name: {"_class_name": cls} if (sub, name) == ("", "model_index.json") else None


def _task_pairs():
    """Every (--family, folder class, the name that trains that class) of the registry's entries with several names."""
    from dit_lora.registry import entries, get_spec

    for entry in entries():
        for name in entry.names:
            for other in entry.names:
                if other != name:
                    yield name, get_spec(other).info.pipeline_class_name, other


def test_a_folder_of_another_task_of_the_family_is_refused_or_trained_as_declared():
    """Over the registry: ``--family X`` on a folder whose model_index.json names the pipeline of a sibling name is one
    paragraph naming the class and the sibling to use, unless X declares it trains that folder too
    (``info.also_trains_folders_of``: Wan I2V on TI2V-5B's WanPipeline, SANA-Video's one checkpoint)."""
    from dit_lora.config.schema import ModelOptions
    from dit_lora.registry import get_spec
    from dit_lora.setup.family_inference import check_family_trains_model

    pairs = list(_task_pairs())
    assert {("qwenimage", "QwenImageEditPlusPipeline"), ("qwenimage_edit", "QwenImagePipeline"),
            ("cogvideox", "CogVideoXImageToVideoPipeline"), ("wan", "WanImageToVideoPipeline")} <= {
        (n, c) for n, c, _ in pairs}
    for name, cls, owner in pairs:
        model = ModelOptions(family=name, pretrained_model_name_or_path=f"/models/{cls}")
        if cls in get_spec(name).info.also_trains_folders_of:
            check_family_trains_model(model, _reader(cls))
            continue
        with pytest.raises(UserError) as err:
            check_family_trains_model(model, _reader(cls))
        text = str(err.value)
        article = "an" if cls[0] in "AEIOU" else "a"
        assert f"is {article} {cls} (model_index.json)" in text and f"Use --family {owner} for it" in text, text
        assert text.startswith(f"--family {name} trains") and "\n" not in text
    # the declared exceptions are the ones each family states in its tests (ALSO_TRAINS_FOLDERS_OF in its cases.py:
    # the folders it checks itself, Wan's kinds, or one checkpoint its names share), no other
    from family_cases import case

    declared = {(n, c) for n, c, _ in pairs if c in get_spec(n).info.also_trains_folders_of}
    for name in {n for n, _ in declared} | {n for n, _, _ in pairs}:
        stated = case(name, "ALSO_TRAINS_FOLDERS_OF", "tests/setup/test_family_inference.py", per_name=True,
                      default=frozenset())
        assert {c for n, c in declared if n == name} == set(stated), name


@pytest.mark.parametrize("family,cls,what,fix", [
    ("qwenimage", "QwenImageEditPlusPipeline", "an image-to-image model", "qwenimage_edit_plus"),
    ("qwenimage_edit", "QwenImagePipeline", "a text-to-image model", "qwenimage"),
])
def test_qwenimage_text_to_image_and_edit_mismatch_is_one_paragraph_when_parsing(tmp_path, family, cls, what, fix):
    """The issue's two runs: an Edit-2509 folder under --family qwenimage (trained as text-to-image, silently) and a
    text-to-image folder under --family qwenimage_edit ("incomplete"), each refused while parsing."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": cls, "_diffusers_version": "0.42.1"}))
    with pytest.raises(UserError) as err:
        _parse(_argv(folder, tmp_path, "--family", family))
    text = str(err.value)
    assert f"`{folder}` is a {cls} (model_index.json): {what}" in text and f"Use --family {fix} for it" in text
    assert "\n" not in text
