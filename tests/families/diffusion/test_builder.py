"""families/diffusion/builder.py: the spec builder fills every default component, wires the ones that need each
other, and a family's own component wins."""

from __future__ import annotations

from diffusion_stand_ins import PoolingEncoding

from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.diffusion import components as base
from dit_lora.families.diffusion.adapter import KitAdapter
from dit_lora.families.diffusion.builder import PatchPoints, default_components, diffusion_spec

INFO = FamilyInfo(pipeline_class_name="SanaPipeline")


class Encoders(PoolingEncoding, base.DiffusionEncoders):
    pass


class Model(base.DiffusionModel):
    def validate_config(self, cfg):
        pass

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
    def bucket_stride(self, cfg):
        return 32

    def square_only(self, cfg):
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


def test_patch_points_are_listed_on_use():
    calls = []
    kernels = PatchPoints(lambda: calls.append(1) or iter(["a", "b"]))
    assert calls == [] and kernels.kernel_patch_points() == ["a", "b"] and calls == [1]
