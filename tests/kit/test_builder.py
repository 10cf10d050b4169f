"""kit/builder.py: the spec builder fills every default component, wires the ones that need each
other, and a family's own component wins."""

from __future__ import annotations

import inspect
import json

import pytest
from diffusion_stand_ins import PoolingEncoding

from dit_lora.config import TrainConfig
from dit_lora.contract import capabilities as caps
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.errors import UserError
from dit_lora.kit import components as base
from dit_lora.kit.adapter import KitAdapter, KitCard
from dit_lora.kit.builder import AnyAspect, LatentGrid, PatchPoints, default_components, diffusion_spec
from dit_lora.kit.loader import DiffusionModel

INFO = FamilyInfo(pipeline_class_name="SanaPipeline")


class Encoders(PoolingEncoding, base.DiffusionEncoders):
    pass


class Model(DiffusionModel):
    def validate_config(self, cfg):
        pass

    def build_components(self, cfg, loaded, device):
        raise NotImplementedError

    def load_components(self, cfg, device):
        raise NotImplementedError


class Loss(base.DiffusionLoss):
    def compute_loss(self, comps, model, batch, generator, cfg):
        raise NotImplementedError


class Samples(base.DiffusionSamples):
    def generate(self, comps, model, cond, cfg, seed):
        raise NotImplementedError

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        raise NotImplementedError


class Plan(base.DiffusionPlan):
    def plan_components(self, cfg, read, depth=None):
        raise NotImplementedError

    def plan_conditioning(self, comps, cfg, batch_size):
        raise NotImplementedError


class Buckets:
    def bucket_stride(self, model):
        return 32

    def square_only(self):
        return False


def test_the_builder_fills_every_default_and_wires_the_components():
    encoders, buckets = Encoders(), Buckets()
    spec = diffusion_spec("toy", INFO, model=Model(INFO), encoders=encoders, loss=Loss, samples=Samples, plan=Plan,
                          image_buckets=buckets)
    assert spec.name == "toy" and spec.info is INFO and spec.encoders is encoders
    assert type(spec.data) is base.DiffusionData and type(spec.captions) is base.DiffusionCaptions
    assert type(spec.notes) is base.DiffusionNotes and type(spec.precision) is base.DiffusionPrecision
    assert type(spec.setup) is base.DiffusionSetup
    assert type(spec.adapter) is KitAdapter and spec.adapter.info is INFO and spec.adapter.fp32_vae is None
    assert spec.loss.encoders is encoders and spec.samples.encoders is encoders
    assert (spec.plan.encoders, spec.plan.loss, spec.plan.buckets) == (encoders, spec.loss, buckets)
    assert spec.image_buckets is buckets and spec.card is None and spec.demo is None and spec.kernels is None
    assert set(default_components(INFO)) == {"data", "captions", "notes", "precision", "setup", "adapter"}


def test_a_familys_own_component_wins_and_none_leaves_one_out():
    captions, adapter = base.DiffusionCaptions(caption_source="class_folders"), KitAdapter(INFO, fp32_vae="AutoencoderDC")
    spec = diffusion_spec("toy", INFO, model=Model(INFO), encoders=Encoders(), loss=Loss, captions=captions,
                          adapter=adapter, notes=None)
    assert spec.captions is captions and spec.adapter is adapter and spec.notes is None
    assert spec.samples is None and spec.plan is None  # a family without validation samples or a plan


class Exported:
    def export_formats(self):
        return {"comfyui": "ComfyUI's names"}

    def export_adapter(self, output_dir, fmt):
        return []


class ExportedBeside(Exported):
    def save_adapter_extras(self, output_dir, comps, options):
        pass


def test_exports_that_write_beside_the_adapter_are_its_extras_unless_the_family_says_otherwise():
    """A family's ComfyUI export is written beside every saved adapter too: stated once, as its exports."""
    def spec(**components):
        return diffusion_spec("toy", INFO, model=Model(INFO), encoders=Encoders(), loss=Loss, **components)

    beside = ExportedBeside()
    assert spec(exports=beside).adapter_extras is beside
    assert spec(exports=beside, adapter_extras=None).adapter_extras is None
    own = ExportedBeside()
    assert spec(exports=beside, adapter_extras=own).adapter_extras is own
    assert "adapter_extras" not in default_components(INFO, stated={"exports": Exported()})  # an export only on request


class Clips:
    def video_buckets(self, cfg):
        return [(17, 64, 64)]


class ClipsAtARate(Clips):
    def model_fps(self, model):
        return 16.0


def test_a_video_task_that_says_the_frame_rate_is_the_frame_rate_unless_the_family_says_otherwise():
    """A video family's task gives both its clip buckets and the model's frame rate: stated once, as video_frames."""
    def spec(**components):
        return diffusion_spec("toy", INFO, model=Model(INFO), encoders=Encoders(), loss=Loss, **components)

    task = ClipsAtARate()
    assert spec(video_frames=task).frame_rate is task
    assert spec(video_frames=task, frame_rate=None).frame_rate is None
    assert spec(video_frames=Clips()).frame_rate is None and spec().frame_rate is None


def test_a_kit_model_stated_with_its_parts_hands_them_out_and_their_precision_is_the_specs():
    """A DiffusionModel built with its PipelineParts needs no pipeline_parts of its own, and the spec's precision is the
    parts' (stated once); a family's own precision still wins, and a model without parts says so."""
    from dit_lora.kit.loader import DiffusionModel, PipelineParts

    class Parted(DiffusionModel):
        def validate_config(self, cfg):
            pass

        def build_components(self, cfg, loaded, device):
            raise NotImplementedError

    precision = base.Fp32VaePrecision()
    parts = PipelineParts(kind="Toy", example_id="toy/Toy", transformer="T", vae="V", precision=precision)
    model = Parted(INFO, parts)
    assert model.pipeline_parts(TrainConfig.for_family("sana")) is parts
    assert diffusion_spec("toy", INFO, model=model, encoders=Encoders(), loss=Loss).precision is precision
    own = base.DiffusionPrecision()
    assert diffusion_spec("toy", INFO, model=model, encoders=Encoders(), loss=Loss, precision=own).precision is own
    with pytest.raises(TypeError, match="states no PipelineParts"):
        Parted(INFO).pipeline_parts(TrainConfig.for_family("sana"))


def test_patch_points_are_listed_on_use():
    calls = []
    kernels = PatchPoints(lambda: calls.append(1) or iter(["a", "b"]))
    assert calls == [] and kernels.kernel_patch_points() == ["a", "b"] and calls == [1]


def _cfg(path, **values) -> TrainConfig:
    return TrainConfig.for_family("sana", pretrained_model_name_or_path=str(path), **values)


def _model(path, vae_blocks: int, patch: int, sample: int | None = 4):
    for sub, config in (("vae", {"block_out_channels": [8] * vae_blocks}),
                        ("transformer", {"patch_size": patch, **({"sample_size": sample} if sample else {})})):
        (path / sub).mkdir(parents=True)
        (path / sub / "config.json").write_text(json.dumps(config))
    (path / "model_index.json").write_text("{}")
    return path


def test_the_latent_grid_reads_the_stride_and_the_native_size_from_the_configs(tmp_path):
    grid = LatentGrid()
    assert isinstance(grid, caps.ImageBuckets) and isinstance(grid, caps.ModelDefaults)
    cfg = _cfg(_model(tmp_path / "m", vae_blocks=4, patch=2), resolution=40)
    assert grid.bucket_stride(cfg.model) == 16 and grid.square_only() is None
    assert grid.generic_defaults(cfg.model, cfg.family_options) == {"resolution": (32, "transformer sample_size 4 x the VAE's 8x")}
    assert grid.generic_defaults(_cfg(_model(tmp_path / "n", 2, 1, sample=None)).model, None) == {}
    assert LatentGrid(default_stride=8).bucket_stride(TrainConfig().model) == 8  # no model
    # a transformer class's own sample_size (DiT's 32) stands in for a config that leaves it unset
    unset = _cfg(tmp_path / "n")
    assert LatentGrid(sample_size=32).generic_defaults(unset.model, unset.family_options) == {
        "resolution": (64, "transformer sample_size 32 x the VAE's 2x")}
    with pytest.raises(UserError, match=r"--resolution 40 is not a multiple of 16 .* Use 32\."):
        grid.check_resolution(cfg.model, cfg.data.resolution)
    grid.check_resolution(_cfg(cfg.model.pretrained_model_name_or_path, resolution=64).model, 64)
    # a transformer that unpatchifies only squares (DiT's) says why, on the same grid
    assert LatentGrid(square="it unpatchifies a square").square_only() == "it unpatchifies a square"


def test_check_divisible_says_why_and_the_nearest_sizes():
    """A multiple passes; any other size is one paragraph: the size, the multiple, the family's reason, the nearest
    sizes either side."""
    from dit_lora.kit.builder import check_divisible

    check_divisible(512, 16, "never said")
    with pytest.raises(UserError, match=r"^--resolution 520 is not divisible by 16: the VAE's 8x times 2x2\. "
                                        r"Use 512 or 528\.$"):
        check_divisible(520, 16, "the VAE's 8x times 2x2")


def test_any_aspect_takes_the_familys_stride_as_a_value():
    cfg = TrainConfig()
    assert AnyAspect().bucket_stride(cfg.model) == 16 and AnyAspect(32).bucket_stride(cfg.model) == 32
    assert AnyAspect(32).square_only() is None


def test_the_plan_builds_the_kit_models_own_components_on_the_meta_device(monkeypatch):
    """A plan that states only its conditioning plans through the model ``diffusion_spec`` wires to it: the kit
    model's ``build_components`` of ``plan_parts``, at the plan's depth key, with no device."""
    from dit_lora.kit import loader

    seen = []

    class ToyModel(loader.DiffusionModel):
        def validate_config(self, cfg):
            pass

        def build_components(self, cfg, loaded, device):
            seen.append((loaded.transformer, loaded.scheduler_config, device))
            return "components"

    class ConditioningOnly(base.DiffusionPlan):
        depth_key = ("transformer/config.json", "n_layers")

        def plan_conditioning(self, comps, cfg, batch_size):
            raise NotImplementedError

    parts = loader.PipelineParts("Toy", "toy/Toy", "T", "V")
    spec = diffusion_spec("toy", INFO, model=ToyModel(INFO, parts), encoders=Encoders(), loss=Loss,
                          plan=ConditioningOnly)
    assert spec.plan.model is spec.model
    planned = []
    monkeypatch.setattr(loader, "plan_parts", lambda p, cfg, read, depth, key: planned.append((p, depth, key)) or
                        loader.LoadedParts(transformers={"transformer": "meta transformer"}, vae=None,
                                           scheduler_config={"k": 1}))
    assert spec.plan.plan_components(TrainConfig(), read=None, depth=2) == "components"
    assert planned == [(parts, 2, "n_layers")] and seen == [("meta transformer", {"k": 1}, None)]
    with pytest.raises(TypeError, match="no model to plan"):
        ConditioningOnly(Encoders(), None).plan_components(TrainConfig(), None)


# ---- a family's spec.py passes each of its parts explicitly ---------------------------------------------------------
def test_a_familys_spec_is_its_own_classes_wired_by_diffusion_spec():
    """Chroma's spec.py names each part (no lookup by name): model.py's model with PARTS, encoders.py's encoders, the
    loss, samples and plan classes, adapter.py's card, the caption settings set up into state.py's run_state,
    model.py's DEMO; the kit wires one encoders object into the loss, the samples, the plan and the setup."""
    from dit_lora.families.chroma import model, state
    from dit_lora.families.chroma.spec import INFO, chroma_spec
    from dit_lora.kit.text_conditioned import TextSettingsSetup

    spec = chroma_spec("chroma")
    assert type(spec.model) is model.ChromaModel and spec.model.parts is model.PARTS
    assert [type(getattr(spec, r)).__name__ for r in ("encoders", "loss", "samples", "plan", "card")] == [
        "ChromaEncoders", "ChromaLoss", "ChromaSamples", "ChromaPlan", "ChromaCard"]
    assert spec.card.info is INFO and spec.demo is model.DEMO and type(spec.notes) is base.DiffusionNotes
    assert isinstance(spec.setup, TextSettingsSetup) and spec.setup.run_state is state.run_state
    assert spec.setup.encoders is spec.encoders and spec.loss.encoders is spec.encoders
    assert spec.samples.encoders is spec.encoders and spec.plan.encoders is spec.encoders


def test_the_kit_looks_up_no_part_by_name():
    """The builder has no folder convention to search (no role table, no lookup of "the one class ending in Loss")."""
    from dit_lora.kit import builder

    assert not [name for name in ("ROLES", "role_class", "folder_spec") if hasattr(builder, name)]
    assert "import_module" not in inspect.getsource(builder)
