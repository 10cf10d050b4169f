"""A family that lives entirely in this folder (``pixart/``) trains through the real loop (issue 26, "Done when").

One call, ``register_family(ENTRY)``, makes the toy PixArt-alpha family available; nothing in ``dit_lora``
names it. Trained in process with default flags (only the model, data and output folders and the step count
are given), it keeps the loop's promises: a non-finite step changes nothing, a stopped run resumes bit for bit;
and the adapter it saves loads back into ``PixArtAlphaPipeline`` and changes it. The promises every family keeps
(no step syncs, a killed run resumes bitwise, the reload at the trained strength, ...) are the conformance suite's,
run on this family by test_conformance.py beside this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.contract.spec import FamilySpec
from toy_family.pixart import ENTRY
from toy_family.pixart.encoders import PixArtLoss
from toy_family.pixart.spec import pixart_spec

FAMILY = ENTRY.names[0]
#: one pytest-xdist worker runs the module: its model, cache and reference run are built once
pytestmark = pytest.mark.xdist_group("toy-family-pixart")


@pytest.fixture(scope="module")
def registered():
    """The toy family registered by one call for this module's tests, and removed again afterwards."""
    from dit_lora.registry import register_family, unregister_family

    register_family(ENTRY)
    yield ENTRY
    unregister_family(ENTRY)


@pytest.fixture(scope="module")
def tiny_pixart(tmp_path_factory) -> Path:
    """A tiny random PixArtAlphaPipeline saved like a diffusers repo."""
    from toy_family.pixart.demo import build_tiny_pixart_pipeline

    return build_tiny_pixart_pipeline(tmp_path_factory.mktemp("models") / "tiny-pixart")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One latent cache for the module's runs (same model and data: encoded once)."""
    return tmp_path_factory.mktemp("pixart-cache")


def _args(model: Path, data: Path, out: Path, cache: Path, **flags) -> list[str]:
    """Default flags, plus what a tiny offline run needs (folders, steps, no trackers, no doctor)."""
    opts = {"family": FAMILY, "pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out,
            "cache_dir": cache, "max_train_steps": 6, "report_to": "none", "skip_doctor": "true", **flags}
    return [a for k, v in opts.items() for a in (f"--{k}", str(v))]


def _train(model, data, out, cache, *, on_step=None, **flags):
    """``train()`` in process; returns its summary (or raises what it raised)."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    cfg = parse_config(_args(model, data, out, cache, **flags))
    AcceleratorState._reset_state(True)
    try:
        return train(cfg, on_step=on_step)
    finally:
        AcceleratorState._reset_state(True)


class _Recorder:
    """Trainable parameters and optimizer moments after every update."""

    def __init__(self):
        self.states: dict[int, dict[str, torch.Tensor]] = {}

    def __call__(self, step, model, optimizer):
        state = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        for gi, group in enumerate(optimizer.param_groups):
            for pi, p in enumerate(group["params"]):
                state.update({f"{gi}.{pi}.{k}": v.detach().clone() for k, v in optimizer.state.get(p, {}).items()})
        self.states[step] = state


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- registration and options (quick) ----------------------------------------------------------
def test_one_registry_call_makes_the_family_available(registered):
    from dit_lora.registry import available, entry_for, get_family

    assert FAMILY in available() and entry_for(FAMILY) is ENTRY
    family = get_family(FAMILY)
    assert isinstance(family, FamilySpec) and isinstance(family.loss, PixArtLoss) and family.name == FAMILY
    with pytest.raises(AttributeError, match="immutable|cannot assign"):
        family.name = "other"  # the spec keeps no per-run state


def test_registration_checks_the_declared_capabilities():
    """A family declaring a capability it does not implement is refused when it registers, naming the method."""
    from dataclasses import replace

    from dit_lora.core.errors import UserError
    from dit_lora.registry import FamilyEntry, available, register_family

    class ClaimsVideo:
        """A video_frames component (the VideoFrames capability) without video_buckets."""

    with pytest.raises(UserError, match=r"`video_frames` component \(ClaimsVideo\) lacks video_buckets of the "
                                        r"VideoFrames protocol"):
        register_family(FamilyEntry(names=("pixart_toy_video",),
                                    factory=lambda name: replace(pixart_spec(), video_frames=ClaimsVideo())))
    assert "pixart_toy_video" not in available()


def test_unregistering_leaves_nothing_behind():
    """What a test registers is gone after it, its options too (other tests see the built-in families only)."""
    from dataclasses import replace

    from dit_lora.config.owners import owners
    from dit_lora.core.errors import UserError
    from dit_lora.registry import (
        available,
        get_family,
        register_family,
        unregister_family,
    )

    again = replace(ENTRY, names=("pixart_toy_again",))
    register_family(again)
    assert "pixart_toy_again" in owners("pixart_text_length")
    unregister_family(again)
    assert "pixart_toy_again" not in available() and "pixart_toy_again" not in owners("pixart_text_length")
    with pytest.raises(UserError, match="Unknown model family `pixart_toy_again`"):
        get_family("pixart_toy_again")


def test_its_options_are_flat_flags_owned_by_it(registered, tmp_path):
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    base = ["--pretrained_model_name_or_path", str(tmp_path), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out")]
    cfg = parse_config(["--family", FAMILY, "--pixart_text_length", "8", *base])
    assert cfg.family_options.pixart_text_length == 8
    with pytest.raises(UserError, match=r"pixart_text_length is an option of the pixart_toy family"):
        parse_config(["--family", "sana", "--pixart_text_length", "8", *base])
    with pytest.raises(UserError, match=r"num_classes is an option of the dit family"):
        parse_config(["--family", FAMILY, "--num_classes", "3", *base])


# ---- the spec: small components, typed run state (quick) -------------------------------------------
def test_its_spec_fills_the_capabilities_the_old_class_declared():
    """The ten optional capabilities the old PixArtFamily declared (what `opt(applies=...)` tags read), plus the notes
    and setup the kit's builder fills by default (nothing said, nothing set up)."""
    from dit_lora.contract import capabilities as caps

    spec = pixart_spec()
    assert set(spec.capabilities) == {
        caps.Encoders, caps.Captions, caps.Demo, caps.ModelDefaults, caps.Precision, caps.Samples, caps.MemoryPlan,
        caps.ModelCard, caps.AdapterFitting, caps.ImageBuckets, caps.RunNotes, caps.RunSetup}
    assert spec.info.pipeline_class_name == "PixArtAlphaPipeline" and spec.info.text_encoder_label == "T5"
    assert spec.info.adapter_weight_name == "adapter_model.safetensors"
    assert spec.adapter.fitting is spec.fitting  # the consumer is fitted before the adapter loads


def test_its_components_are_small_and_share_the_encoders():
    import inspect

    spec = pixart_spec()
    for field in ("model", "data", "loss", "adapter", "encoders", "samples", "plan", "card", "precision", "demo",
                  "defaults", "image_buckets", "fitting"):
        part = getattr(spec, field)
        methods = [n for n, v in inspect.getmembers(type(part), inspect.isfunction) if not n.startswith("__")]
        assert len(methods) < 20, (type(part).__name__, methods)
    assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
    assert spec.plan.loss is spec.loss and spec.plan.buckets is spec.image_buckets


def test_its_run_state_is_typed_not_extras():
    """What a run decides is a PixArtRun in comps.state (the planned components carry one too)."""
    import toy_family.pixart as package
    from dit_lora.contract.family import Components
    from toy_family.pixart.model import PixArtRun, run_state

    for module in Path(package.__file__).parent.glob("*.py"):
        assert "extras" not in module.read_text(), module.name
    comps = Components(model=torch.nn.Linear(1, 1))
    assert run_state(comps) is comps.state and comps.state == PixArtRun()


def test_its_loss_takes_the_epsilon_half_of_a_learned_sigma():
    """With a learned sigma only the first in_channels of the prediction are compared with the noise."""
    from diffusers import DDPMScheduler

    from dit_lora.contract.family import Components
    from toy_family.pixart.model import PixArtRun

    class Doubled(torch.nn.Module):
        def forward(self, noisy, **kwargs):  # epsilon half = the noisy latents, variance half = garbage
            return (torch.cat([noisy, torch.full_like(noisy, 1e6)], dim=1),)

    latents = torch.randn(2, 4, 4, 4)
    batch = {"latents": latents, "prompt_embeds": torch.zeros(2, 3, 8), "prompt_attention_mask": torch.ones(2, 3)}
    comps = Components(model=Doubled(), scheduler=DDPMScheduler(),
                       state=PixArtRun(learned_sigma=True, in_channels=4))
    loss = pixart_spec().loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(0), None)
    assert torch.isfinite(loss) and float(loss) < 1e3


# ---- the loop's promises, with default flags (slow: they train) -----------------------------------
@pytest.mark.slow
def test_a_non_finite_step_is_skipped_and_changes_nothing(registered, tiny_pixart, shapes_data, cache, tmp_path):
    rec = _Recorder()
    summary = _train(tiny_pixart, shapes_data, tmp_path / "out", cache, on_step=rec,
                     inject_faults="nan_loss@2,nan_grad@4")
    assert summary["status"] == "completed" and summary["family"] == FAMILY
    for bad in (2, 4):
        assert _same(rec.states[bad], rec.states[bad - 1]), f"step {bad} changed the state"
    for good in (3, 5, 6):
        assert not _same(rec.states[good], rec.states[good - 1]), f"step {good} was not applied"
    assert summary["skipped_steps"] == 2 and summary["applied_updates"] == 4
    steps = [v for k, v in rec.states[6].items() if k.endswith(".step")]
    assert steps and all(float(s) == 4 for s in steps)  # the optimizer counted applied updates only
    for name, value in load_file(str(tmp_path / "out" / "adapter_model.safetensors")).items():
        assert torch.isfinite(value).all(), name


@pytest.fixture
def audits(monkeypatch) -> list:
    """Every SyncAudit a run in this test makes (to count what it saw), with the audit switched on."""
    from dit_lora.training import drills as hooks
    from dit_lora.training.sync_audit import ENV_VAR, SyncAudit

    made = []

    class Recorded(SyncAudit):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(hooks, "SyncAudit", Recorded)
    monkeypatch.setenv(ENV_VAR, "1")
    return made


@pytest.mark.slow
def test_a_host_read_in_its_loss_fails_the_run(registered, tiny_pixart, shapes_data, cache, tmp_path, audits,
                                               monkeypatch):
    """The audit really watches this family's step: a ``.tolist()`` of its loss ends the run at step 1."""
    from torch._subclasses.fake_tensor import FakeTensor

    from dit_lora.training.sync_audit import HostSyncError

    original = PixArtLoss.compute_loss

    def leaky(self, comps, model, batch, generator, cfg):
        loss = original(self, comps, model, batch, generator, cfg)
        if not isinstance(loss, FakeTensor):  # the memory plan traces the loss on fake tensors first
            loss.detach().tolist()
        return loss

    monkeypatch.setattr(PixArtLoss, "compute_loss", leaky)
    with pytest.raises(HostSyncError, match=r"Tensor.tolist\(\)"):
        _train(tiny_pixart, shapes_data, tmp_path / "out", cache, max_train_steps=1)


# ---- bitwise resume -------------------------------------------------------------------------------
RESUME = {"max_train_steps": 8, "checkpointing_steps": 4}


@pytest.fixture(scope="module")
def reference(registered, tiny_pixart, shapes_data, cache, tmp_path_factory) -> Path:
    """The uninterrupted run the resumed ones must equal: trained by ``dit-lora train``'s code in process, without
    --family (the entry point finds the family from the model's ``model_index.json``)."""
    import json

    from accelerate.state import AcceleratorState

    from dit_lora.commands.recipe import run_recipe

    out = tmp_path_factory.mktemp("pixart-reference") / "out"
    argv = _args(tiny_pixart, shapes_data, out, cache, **RESUME)
    assert argv[:2] == ["--family", FAMILY]
    AcceleratorState._reset_state(True)
    try:
        assert run_recipe(None, argv[2:]) == 0
    finally:
        AcceleratorState._reset_state(True)
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 8 and summary["family"] == FAMILY
    return out


def _assert_same_run(reference: Path, out: Path) -> None:
    import json

    a, b = (load_file(str(p / "adapter_model.safetensors")) for p in (reference, out))
    assert a.keys() == b.keys() and a
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    s_ref, s = (json.loads((p / "train_summary.json").read_text()) for p in (reference, out))
    for key in ("steps", "samples_seen", "skipped_steps", "applied_updates", "loss_history"):
        assert s[key] == s_ref[key], key


@pytest.mark.slow
def test_a_stopped_run_resumes_bitwise(registered, tiny_pixart, shapes_data, cache, reference, tmp_path,
                                       monkeypatch):
    """SIGTERM during micro-batch 6 (as a scheduler's preemption): the run saves checkpoint-6 and stops; resumed,
    it ends as the reference did."""
    from dit_lora.core.errors import Interrupted
    from dit_lora.training.drills import SIGNAL_VAR

    out = tmp_path / "out"
    monkeypatch.setenv(SIGNAL_VAR, "micro_batch:6")
    with pytest.raises(Interrupted):
        _train(tiny_pixart, shapes_data, out, cache, **RESUME)
    monkeypatch.delenv(SIGNAL_VAR)
    assert (out / "checkpoint-6").is_dir() and not (out / "adapter_model.safetensors").exists()
    _train(tiny_pixart, shapes_data, out, cache, resume_from_checkpoint="latest", **RESUME)
    _assert_same_run(reference, out)


# ---- samples and the saved adapter in the real consumer ----------------------------------------------
@pytest.mark.slow
def test_demo_run_samples_during_training_and_from_the_reloaded_adapter(registered, tmp_path):
    """``--demo`` builds the tiny model and data (Demo); with --validation_prompt the loop samples the in-memory
    model (Samples.generate) and, at the end, the pipeline reloaded with the saved adapter
    (load_pipeline_with_adapter, Samples.generate_with_pipeline)."""
    out = tmp_path / "out"
    summary = _train(tmp_path / "model", tmp_path / "data", out, tmp_path / "cache", demo="true", max_train_steps=2,
                     validation_steps=1, validation_prompt="a yellow triangle on a blue background",
                     validation_inference_steps=2)
    assert summary["status"] == "completed" and (tmp_path / "model" / "model_index.json").is_file()
    assert sorted(p.name for p in (out / "samples").glob("*.png")) == [
        "final_0.png", "final_1.png", "step1_0.png", "step1_1.png"]  # --num_validation_images 2 (the default)


def _images(pipe) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        return pipe("a red circle on a blue background", height=32, width=32, num_inference_steps=2,
                    use_resolution_binning=False, clean_caption=False, max_sequence_length=16, generator=generator,
                    output_type="pt").images


@pytest.mark.slow
def test_the_saved_adapter_loads_back_and_changes_the_output(registered, tiny_pixart, reference):
    from diffusers import PixArtAlphaPipeline

    from dit_lora import load_adapter
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family

    cfg = TrainConfig(family=FAMILY, pretrained_model_name_or_path=str(tiny_pixart), mixed_precision="no")
    pipe = get_family(FAMILY).adapter.load_pipeline_with_adapter(cfg, reference, torch.device("cpu"))
    lora = {n: p for n, p in pipe.transformer.named_parameters() if "lora_" in n}
    saved = load_file(str(reference / "adapter_model.safetensors"))
    assert len(lora) == len(saved) > 0  # every saved LoRA weight landed in the transformer
    base = PixArtAlphaPipeline.from_pretrained(tiny_pixart)
    base.set_progress_bar_config(disable=True)
    plain = _images(base)
    adapted = _images(pipe)
    assert not torch.equal(plain, adapted)
    # The public loader finds the family from the pipeline's class and gives the same result.
    load_adapter(base, reference)
    assert torch.equal(_images(base), adapted)
