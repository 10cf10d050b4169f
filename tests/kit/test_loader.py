"""kit/loader.py: the kit's declarative loader owns the order every diffusion family loads its
pipeline in (a recording stand-in for each library call shows it), and every registered diffusion family loads
through it, so a new lever edits one place."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.errors import UserError
from dit_lora.kit import loader
from dit_lora.kit.components import DiffusionPrecision
from dit_lora.kit.loader import DiffusionModel
from dit_lora.registry import available, entry_for, get_family


class Recorder:
    """The events of one load, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.calls: dict[str, dict] = {}


def fake_classes(rec: Recorder, fail: str | None = None):
    """``loader.model_class``'s stand-in: each class's ``from_pretrained`` records and returns a module whose
    ``to``/``requires_grad_``/``eval`` record too (``fail``: a class name whose load raises ``OSError``)."""

    def model_class(library, name):
        class Part(torch.nn.Module):
            def __init__(self, subfolder):
                super().__init__()
                self.tag = subfolder

            @classmethod
            def from_pretrained(cls, path, subfolder=None, **kwargs):
                if name == fail:
                    raise OSError(f"{subfolder}/ is missing")
                rec.events.append(f"load {subfolder}")
                rec.calls[subfolder] = kwargs
                return cls(subfolder)

            def to(self, device):
                rec.events.append(f"to {self.tag}")
                return self

            def requires_grad_(self, requires_grad=True):
                rec.events.append(f"freeze {self.tag}")
                return self

            def eval(self):
                rec.events.append(f"eval {self.tag}")
                return self

        return Part

    return model_class


@pytest.fixture
def rec(monkeypatch) -> Recorder:
    """Every lever of :mod:`loader` recorded instead of run."""
    rec = Recorder()

    @contextlib.contextmanager
    def diffusers_loading(model):
        rec.events.append("quantize context")
        yield
        rec.events.append("quantize context end")

    monkeypatch.setattr(loader, "model_class", fake_classes(rec))
    monkeypatch.setattr(loader.quantize, "diffusers_loading", diffusers_loading)
    monkeypatch.setattr(
        loader.quantize,
        "after_loading",
        lambda model, module, skip, device: rec.events.append(f"after_loading {module.tag} skip={list(skip)}"),
    )
    monkeypatch.setattr(
        loader.quantize,
        "keep_4bit_layout",
        lambda *modules: rec.events.append("keep_4bit_layout " + " ".join(m.tag for m in modules)),
    )
    monkeypatch.setattr(
        loader.cache_parking,
        "park_for_load",
        lambda model, paths, cfg, device, wait=True: rec.events.append(f"park {model.tag} {list(paths)} wait={wait}"),
    )
    monkeypatch.setattr(loader, "read_component_config", lambda model, sub, name="config.json": {"shift": 3.0})
    return rec


class SkipEmbedder(DiffusionPrecision):
    def quantize_skip_modules(self):
        return ["t_embedder"]


PARTS = loader.PipelineParts(
    kind="Toy",
    example_id="toy/Toy",
    folder_listing="transformer/, vae/, text_encoder/",
    transformer="ToyTransformer",
    vae="ToyVae",
    text_encoders=(loader.TextEncoder("ToyEncoder"),),
    precision=SkipEmbedder(),
)


class ToyModel(loader.DiffusionModel):
    """A family stated with the kit: its parts, and its components from what was loaded."""

    def __init__(self, parts=PARTS, folders=None, extra=None) -> None:
        super().__init__(FamilyInfo(pipeline_class_name="ToyPipeline", block_lists=("blocks",)))
        self.parts, self.folders, self.extra = parts, folders, extra or {}

    def validate_config(self, cfg) -> None:
        self.check_folder(cfg)

    def pipeline_parts(self, cfg):
        return self.parts

    def transformer_folders(self, cfg):
        return self.folders or super().transformer_folders(cfg)

    def extra_encoders(self, cfg, common):
        return self.extra

    def build_components(self, cfg, loaded, device):
        return Components(model=loaded.transformer, encoders=loaded.encoders(), state=loaded.scheduler_config)


def _cfg(**values) -> TrainConfig:
    return TrainConfig.for_family("sana", pretrained_model_name_or_path="toy/Toy", **values)


def test_lora_goes_on_the_families_default_layers_unless_the_run_names_its_own():
    """DiffusionModel.lora_targets: --lora_layers wins; else info.default_lora_layers."""
    model = ToyModel()
    model.info = FamilyInfo(pipeline_class_name="ToyPipeline", default_lora_layers=("to_q", "to_k"))
    assert model.lora_targets(None, TrainConfig().lora) == ["to_q", "to_k"]
    assert model.lora_targets(None, TrainConfig.for_family("sana", lora_layers=("proj",)).lora) == ["proj"]


def test_the_kit_owns_the_lever_order(rec):
    """quantize context -> every part loaded -> after_loading -> keep_4bit_layout -> freeze -> park -> .to(), then
    the family's components: quantized before the device, parked before the device."""
    comps = ToyModel(extra={"image_encoder": torch.nn.Linear(2, 2), "processor": "not a module"}).load_components(
        _cfg(), torch.device("cpu")
    )
    image_encoder = comps.encoders["image_encoder"]  # an extra encoder (Wan 2.1 I2V's CLIP) is frozen like the rest
    assert not image_encoder.training and not any(p.requires_grad for p in image_encoder.parameters())
    assert rec.events == [
        "quantize context",
        "load transformer",
        "quantize context end",
        "load vae",
        "load text_encoder",
        "load tokenizer",
        "after_loading transformer skip=['t_embedder']",
        "keep_4bit_layout transformer text_encoder",
        "freeze transformer",
        "freeze vae",
        "eval vae",
        "freeze text_encoder",
        "eval text_encoder",
        "park transformer ['blocks'] wait=True",
        "to transformer",
        "to vae",
        "to text_encoder",
    ]
    assert list(comps.encoders) == ["vae", "text_encoder", "tokenizer", "image_encoder", "processor"]
    assert comps.state == {"shift": 3.0}  # scheduler/scheduler_config.json, read as it is


def test_dtypes_and_keywords_follow_the_description(rec):
    """The transformer and text encoder in the run's weight dtype, the VAE in fp32 or the weight dtype as the parts
    say, safetensors only; --quantize_text_encoder reaches only the encoders that take it."""
    parts = loader.PipelineParts(
        kind="Toy",
        example_id="toy/Toy",
        folder_listing="transformer/",
        transformer="ToyTransformer",
        vae="ToyVae",
        vae_dtype="weight",
        text_encoders=(loader.TextEncoder("ToyEncoder", quantized=False),),
    )
    ToyModel(parts).load_components(_cfg(mixed_precision="bf16"), torch.device("cpu"))
    dtype = lambda kw: kw.get("dtype", kw.get("torch_dtype"))  # noqa: E731  whichever keyword the library takes
    assert dtype(rec.calls["transformer"]) == dtype(rec.calls["vae"]) == torch.bfloat16
    assert dtype(rec.calls["text_encoder"]) == torch.bfloat16
    assert all(rec.calls[sub]["use_safetensors"] for sub in ("transformer", "vae", "text_encoder"))
    assert "quantization_config" not in rec.calls["text_encoder"]
    assert rec.calls["tokenizer"] == {"revision": None}
    ToyModel().load_components(_cfg(mixed_precision="bf16"), torch.device("cpu"))
    assert dtype(rec.calls["vae"]) == torch.float32  # the default policy: the latents are cached from an fp32 VAE


def test_several_transformers_are_placed_by_the_family(rec):
    """Two transformers (Wan A14B's experts): each in its own quantize context, none waiting for the cache, none
    moved by the kit (the family's build_components places them)."""
    ToyModel(folders={"high": "transformer", "low": "transformer_2"}).load_components(_cfg(), torch.device("cpu"))
    events = rec.events
    assert events[:6] == [
        "quantize context",
        "load transformer",
        "quantize context end",
        "quantize context",
        "load transformer_2",
        "quantize context end",
    ]
    assert "park transformer ['blocks'] wait=False" in events and "park transformer_2 ['blocks'] wait=False" in events
    assert not any(e in events for e in ("to transformer", "to transformer_2")) and "to vae" in events


def test_a_failed_load_is_one_paragraph_naming_the_kind(rec, monkeypatch):
    """An OSError from any part is load_error's paragraph, with the parts' display name; nothing is moved."""
    monkeypatch.setattr(loader, "model_class", fake_classes(rec, fail="ToyVae"))
    with pytest.raises(UserError, match=r"^Could not load the Toy pipeline from `toy/Toy` \(OSError: vae/ is missing"):
        ToyModel().load_components(_cfg(), torch.device("cpu"))
    assert not any(e.startswith(("to ", "park", "after_loading")) for e in rec.events)


def test_a_scheduler_class_reads_the_scheduler_config_inside_the_load(rec, monkeypatch):
    """With a scheduler class its load_config reads scheduler/ (a failure there is the load's paragraph too)."""
    base = fake_classes(rec)

    def model_class(library, name):
        cls = base(library, name)
        cls.load_config = classmethod(lambda c, path, subfolder, revision: {"from": name, "subfolder": subfolder})
        return cls

    monkeypatch.setattr(loader, "model_class", model_class)
    parts = loader.PipelineParts(
        "Toy", "toy/Toy", "ToyTransformer", "ToyVae", folder_listing="transformer/", scheduler="ToySched"
    )
    comps = ToyModel(parts).load_components(_cfg(), torch.device("cpu"))
    assert comps.state == {"from": "ToySched", "subfolder": "scheduler"}
    assert list(comps.encoders) == ["vae"]  # no text encoder: a class-conditional model


def test_the_folder_checks_follow_the_description(monkeypatch):
    """check_folder: the pipeline folder (kind, example, listing), safetensors in the weight folders, each
    tokenizer's packages."""
    seen = []
    monkeypatch.setattr(loader, "check_pipeline_folder", lambda *a: seen.append(("folder", *a[1:])))
    monkeypatch.setattr(loader, "check_safetensors", lambda *a: seen.append(("safetensors", *a[1:])))
    monkeypatch.setattr(loader, "check_tokenizer_packages", lambda *a: seen.append(("tokenizer", *a)))
    ToyModel().validate_config(_cfg())
    assert seen == [
        ("folder", "Toy", "toy/Toy", "transformer/, vae/, text_encoder/"),
        ("safetensors", ("transformer", "vae", "text_encoder"), "Toy"),
        ("tokenizer", "toy/Toy", "tokenizer", None),
    ]


def test_every_diffusion_family_loads_through_the_kit():
    """Each registered diffusion family's model component (every family but the video LLMs) is a DiffusionModel that
    keeps the kit's load_components and states its parts: a new lever (quantization, parking, block swap) edits the
    kit, not the families."""
    diffusion = [name for name in available() if not entry_for(name).distinct_models]
    assert len(diffusion) >= 8, diffusion
    for name in diffusion:
        model = get_family(name).model
        assert isinstance(model, DiffusionModel), name
        assert type(model).load_components is DiffusionModel.load_components, name
        parts = model.pipeline_parts(TrainConfig.for_family(name))
        assert isinstance(parts, loader.PipelineParts) and parts.kind, name


def test_no_family_source_calls_the_load_levers():
    """The load-time levers appear in no diffusion family's source: only the kit calls them."""
    levers = ("diffusers_loading(", "after_loading(", "keep_4bit_layout(", "park_for_load(", "load_error(")
    folders = {
        Path(inspect.getfile(type(get_family(name).model))).parent
        for name in available()
        if isinstance(get_family(name).model, DiffusionModel)
    }
    for folder in folders:
        for path in folder.glob("*.py"):
            text = path.read_text()
            assert not [lever for lever in levers if lever in text], path


def test_the_plan_builds_the_parts_the_loader_loads_on_the_meta_device(tiny_sana):
    """:func:`loader.plan_parts`: each part's class from the same description, on the meta device, in the load's
    dtypes (the VAE in fp32), at the planner's depth; the scheduler config as the folder holds it."""
    import json

    from dit_lora.families.sana.model import PARTS as SANA_PARTS

    def read(sub, name):
        return json.loads((tiny_sana / sub / name).read_text())

    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana), mixed_precision="bf16")
    planned = loader.plan_parts(SANA_PARTS, cfg, read, depth=3)
    transformer, vae, encoder = planned.transformer, planned.vae, planned.text_encoder
    assert type(transformer).__name__ == "SanaTransformer2DModel" and type(vae).__name__ == "AutoencoderDC"
    assert transformer.config.num_layers == 3 and len(transformer.transformer_blocks) == 3
    assert {p.device.type for p in (*transformer.parameters(), *vae.parameters(), *encoder.parameters())} == {"meta"}
    assert transformer.dtype == encoder.dtype == torch.bfloat16 and vae.dtype == torch.float32
    assert encoder.config.model_type == read("text_encoder", "config.json")["model_type"]
    assert set(planned.encoders()) == {"vae", "text_encoder"}
    assert planned.scheduler_config == read("scheduler", "scheduler_config.json")


def test_the_folder_listing_defaults_to_the_weight_folders(monkeypatch):
    """A family that leaves ``folder_listing`` out gets its weight folders listed, as the folder checks print them;
    one that states it (DiT's scheduler/) keeps its own."""
    seen = []
    monkeypatch.setattr(loader, "check_pipeline_folder", lambda *a: seen.append(a[1:]))
    monkeypatch.setattr(loader, "check_safetensors", lambda *a: None)
    monkeypatch.setattr(loader, "check_tokenizer_packages", lambda *a: None)
    parts = loader.PipelineParts("Toy", "toy/Toy", "ToyTransformer", "ToyVae", text_encoders=(loader.TextEncoder("T"),))
    loader.check_pipeline_files(parts, _cfg())
    assert seen == [("Toy", "toy/Toy", "transformer/, vae/, text_encoder/")]
    stated = loader.PipelineParts("Toy", "toy/Toy", "ToyTransformer", "ToyVae", folder_listing="transformer/, vae/")
    assert stated.listing() == "transformer/, vae/"


def test_loaded_parts_make_the_run_components():
    """``LoadedParts.components``: the transformer, the family's scheduler and state, the encoders in their order."""
    transformer, vae, encoder, tokenizer = object(), object(), object(), object()
    loaded = loader.LoadedParts(
        transformers={"transformer": transformer},
        vae=vae,
        text_encoders={"text_encoder": encoder},
        tokenizers={"tokenizer": tokenizer},
    )
    comps = loaded.components("scheduler", {"state": 1})
    assert comps.model is transformer and comps.scheduler == "scheduler" and comps.state == {"state": 1}
    assert list(comps.encoders) == ["vae", "text_encoder", "tokenizer"] and comps.encoders["tokenizer"] is tokenizer


def test_model_configs_read_the_named_model_and_stand_empty_without_one(tmp_path):
    """The small configs of the named model's folders; ``{}`` for a folder without one, and for every folder when no
    model is named (``check-data``)."""
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text('{"patch_size": 2}')
    named = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tmp_path))
    assert loader.model_configs(named.model, "transformer", "vae") == ({"patch_size": 2}, {})
    assert loader.model_configs(TrainConfig().model, "transformer", "vae") == ({}, {})


def test_a_folders_pipeline_is_read_only_for_a_family_of_several(monkeypatch):
    """index_pipeline: model_index.json's _class_name among the family's pipelines, else the first; folder_pipeline
    reads nothing for a family of one pipeline."""
    pipelines = ("APipeline", "BPipeline")
    assert loader.index_pipeline({"_class_name": "BPipeline"}, pipelines) == "BPipeline"
    assert loader.index_pipeline({"_class_name": "CPipeline"}, pipelines) == loader.index_pipeline({}, pipelines)
    assert loader.index_pipeline({}, pipelines) == "APipeline"
    reads = []
    monkeypatch.setattr(loader, "read_component_config", lambda *a: reads.append(a) or {"_class_name": "BPipeline"})
    assert loader.folder_pipeline("model", ("APipeline",)) == "APipeline" and reads == []
    assert loader.folder_pipeline("model", pipelines) == "BPipeline" and reads == [("model", "", "model_index.json")]


def test_a_block_mix_plans_units_of_both_lists_by_the_keys_a_family_states():
    """FLUX.1's and Chroma's 19 double + 38 single blocks: a unit is 1 + 2; a config without the keys takes the
    stated lengths; the swap reads both lists' lengths."""
    mix = loader.BlockMix(defaults=(19, 38))
    assert mix.at_depth({}, 3) == {"num_layers": 3, "num_single_layers": 6} and mix.at_depth({"x": 1}, None) == {"x": 1}
    assert loader.BlockMix("depth", "depth_single", (1, 1)).at_depth({"depth": 4, "depth_single": 9}, 2) == {
        "depth": 2,
        "depth_single": 6,
    }
    assert mix.swap_depth_keys == (("transformer/config.json", "num_layers"), ("transformer/config.json", "num_single_layers"))


def test_published_parts_read_the_catalogued_model_index():
    """A pipeline's parts from its catalogued ``model_index.json``: transformer and VAE classes, each numbered text
    encoder with its tokenizer (not Krea 2's ``text_encoder_select_layers``, a list of layer numbers), an encoder
    class given for every checkpoint of the family; an uncatalogued id is refused."""
    precision = DiffusionPrecision()
    flux = loader.published_parts("black-forest-labs/FLUX.1-dev", kind="FLUX.1", precision=precision)
    assert (flux.kind, flux.transformer, flux.vae, flux.precision) == (
        "FLUX.1", "FluxTransformer2DModel", "AutoencoderKL", precision)
    assert flux.text_encoders == (
        loader.TextEncoder("CLIPTextModel"),
        loader.TextEncoder("T5EncoderModel", subfolder="text_encoder_2", tokenizer="tokenizer_2"),
    )
    krea = loader.published_parts("krea/Krea-2-Raw", kind="Krea 2", folder_listing="transformer/")
    assert krea.text_encoders == (loader.TextEncoder("Qwen3VLModel"),) and krea.folder_listing == "transformer/"
    sana = loader.published_parts("Efficient-Large-Model/Sana_600M_1024px_diffusers", kind="Sana",
                                  text_encoder_class="AutoModel")
    assert sana.text_encoders == (loader.TextEncoder("AutoModel"),) and sana.vae == "AutoencoderDC"
    with pytest.raises(KeyError, match="not catalogued"):
        loader.published_parts("someone/unknown", kind="X")
