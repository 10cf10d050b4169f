"""SANA-Sprint is recognised and refused (families/sana/catalogue.py ``REFUSED``, ``SPRINT_REFUSAL``): its published
configs are what diffusers builds a Sprint pipeline from, no trained entry takes them, and a Sprint folder laid out as
the Hub has it stops with the one paragraph (why, the sources, what to train instead) in every entry point, before any
weights are read."""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path

import pytest

from dit_lora.catalogue import entries, refused, refused_match
from dit_lora.core.errors import UserError
from dit_lora.families.sana.catalogue import ENTRIES, REFUSED, SPRINT_REFUSAL

SPRINT_1_6B = "Efficient-Large-Model/Sana_Sprint_1.6B_1024px_diffusers"


def reader(configs: dict):
    """Reads ``configs`` (file key -> dict) as a model folder would give them."""
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


def sprint_folder(root: Path, hub_id: str = SPRINT_1_6B, layers: int = 1) -> Path:
    """A Sprint checkpoint as the Hub lays it out (model_index.json, each component's config, the tokenizer file
    names), ``layers`` deep and without weights: the refusal must come before any are needed."""
    entry = next(e for e in REFUSED if e.hub_id == hub_id)
    folder = root / hub_id.split("/")[-1]
    for file, config in entry.configs.items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        if file == "transformer/config.json":
            config = {**config, "num_layers": layers}
        path.write_text(json.dumps(config, indent=1))
    for name in entry.tokenizer_files:
        (folder / "tokenizer" / name).parent.mkdir(exist_ok=True)
        (folder / "tokenizer" / name).write_text("{}")
    return folder


def test_sprint_entries_hold_the_published_configs_and_are_not_trained():
    from diffusers import SanaSprintPipeline, SanaTransformer2DModel, SCMScheduler

    assert [e.hub_id for e in refused() if e.family == "sana"] == [e.hub_id for e in REFUSED] == [
        SPRINT_1_6B, "Efficient-Large-Model/Sana_Sprint_0.6B_1024px_diffusers"]
    trained = {e.hub_id for e in entries()}
    accepted = set(inspect.signature(SanaTransformer2DModel.__init__).parameters)
    for entry in REFUSED:
        assert entry.hub_id not in trained and entry.refusal == SPRINT_REFUSAL and not entry.defaults
        index, transformer = entry.configs["model_index.json"], entry.configs["transformer/config.json"]
        assert index["_class_name"] == SanaSprintPipeline.__name__ and index["scheduler"][1] == "SCMScheduler"
        assert transformer["guidance_embeds"] is True and transformer["qk_norm"] == "rms_norm_across_heads"
        assert set(transformer) - {"_class_name", "_diffusers_version"} <= accepted  # diffusers takes every key
        scheduler = SCMScheduler.from_config(entry.configs["scheduler/scheduler_config.json"])
        assert scheduler.config.prediction_type == "trigflow" and scheduler.config.sigma_data == 0.5
        assert entry.matches(reader(entry.configs))
        assert refused_match(reader(entry.configs)) is entry
    # the guidance embedding tells Sprint from SANA 1.5, whose widths it shares
    for entry in ENTRIES:
        assert refused_match(reader(entry.configs)) is None
        saved = {**entry.configs, "transformer/config.json": {**entry.configs["transformer/config.json"],
                                                              "guidance_embeds": False}}
        assert refused_match(reader(saved)) is None  # save_pretrained writes the default out


def _assert_refusal(text: str, model) -> None:
    assert text.startswith(f"`{model}` is SANA-Sprint") and "\n" not in text
    for source in ("SanaSprintPipeline.__call__", "SCMScheduler.step", "train_scm_ladd.py",
                   "train_sana_sprint_diffusers.py", "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers"):
        assert source in text


@pytest.mark.parametrize("how", ["dit-lora train", "--family sana", "sana recipe", "hub id"])
def test_a_sprint_layout_is_refused_before_any_weights_load(tmp_path, monkeypatch, how):
    import diffusers.models.modeling_utils as modeling
    import transformers

    from dit_lora.commands.recipe import run_recipe

    def built(*a, **k):  # the refusal must come first: no training stage, no weights
        raise AssertionError("something was built")

    monkeypatch.setitem(sys.modules, "dit_lora.training.loop", types.SimpleNamespace(train=built))
    monkeypatch.setattr(modeling.ModelMixin, "from_pretrained", classmethod(built))
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(built))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = SPRINT_1_6B if how == "hub id" else sprint_folder(tmp_path / "models")
    argv = ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out"), "--skip_doctor", "true"]
    family = "sana" if how == "sana recipe" else None
    with pytest.raises(UserError) as err:
        run_recipe(family, argv + (["--family", "sana"] if how == "--family sana" else []))
    _assert_refusal(str(err.value), model)


def test_a_sprint_transformer_in_a_sana_folder_is_refused_by_the_family(tmp_path):
    """The family's own check, for a folder whose model_index.json says SanaPipeline (the catalogue's refusal reads
    the same transformer config; this one holds when the run's checks are reached another way)."""
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    folder = sprint_folder(tmp_path)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "_class_name": "SanaPipeline"}))
    with pytest.raises(UserError) as err:
        get_spec("sana").model.validate_config(TrainConfig(pretrained_model_name_or_path=str(folder)))
    _assert_refusal(str(err.value), folder)


def test_the_refusal_states_what_the_sprint_sampler_does():
    """The paragraph's claims, read off diffusers' own SanaSprintPipeline and SCMScheduler (a two-step run of a tiny
    Sprint transformer, prompt embeddings given): the transformer gets flow time s = sin t / (sin t + cos t) in
    [0, 1] at the scheduler's TrigFlow times and the guidance embedding, while the rectified-flow loss of
    ``--family sana`` feeds it timesteps up to 1000."""
    import math

    import torch
    from diffusers import SanaSprintPipeline, SanaTransformer2DModel, SCMScheduler

    from dit_lora.modeling.flow_matching import flow_tables, training_scheduler

    transformer = SanaTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=4, num_layers=1,
        num_cross_attention_heads=2, cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=8,
        sample_size=2, guidance_embeds=True, qk_norm="rms_norm_across_heads",
    )  # fmt: skip
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    forward = transformer.forward

    def record(*args, timestep, guidance=None, **kwargs):
        seen.append((timestep.clone(), guidance.clone()))
        return forward(*args, timestep=timestep, guidance=guidance, **kwargs)

    transformer.forward = record
    pipe = SanaSprintPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                              scheduler=SCMScheduler())  # fmt: skip
    pipe(prompt_embeds=torch.randn(1, 3, 8), prompt_attention_mask=torch.ones(1, 3), num_inference_steps=2,
         height=64, width=64, output_type="latent", use_resolution_binning=False, guidance_scale=4.5,
         generator=torch.Generator().manual_seed(0))  # fmt: skip
    trig = [1.57080, 1.3]  # the scheduler's max_timesteps and intermediate_timesteps (its defaults)
    flow = [math.sin(t) / (math.sin(t) + math.cos(t)) for t in trig]
    assert [round(float(t), 4) for t, _ in seen] == [round(s, 4) for s in flow]
    assert all(0.0 <= float(t) <= 1.0 + 1e-4 for t, _ in seen)  # 1.57080 is pi/2 rounded: cos < 0 by 4e-6
    assert all(torch.allclose(g, torch.tensor([0.45])) for _, g in seen)  # 4.5 x guidance_embeds_scale 0.1
    _, timesteps = flow_tables(training_scheduler(REFUSED[0].configs["scheduler/scheduler_config.json"]), "cpu")
    assert float(timesteps.max()) == 1000.0  # dit-lora's loss: 0-1000, the Sprint sampler's: 0-1
