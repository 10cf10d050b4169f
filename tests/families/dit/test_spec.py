"""families/dit/spec.py: DiT fills a FamilySpec of small components (what a run decides is its typed DiTRun); the
shipped demo end to end: trains, resizes the class table, reloads."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import ROOT, read_summary, run_recipe
from PIL import Image
from safetensors.torch import load_file

from dit_lora.contract import capabilities as caps
from dit_lora.contract.spec import FamilySpec
from dit_lora.families.dit.spec import INFO, dit_spec
from dit_lora.registry import get_family, get_spec


def test_the_registry_serves_dits_own_spec():
    spec = get_spec("dit")
    assert isinstance(spec, FamilySpec) and spec.name == "dit" and spec.info is INFO
    assert isinstance(get_family("dit"), FamilySpec)  # a converted family: get_family builds the spec too
    assert INFO.pipeline_class_name == "DiTPipeline" and INFO.adapter_weight_name == "adapter_model.safetensors"
    assert INFO.default_lora_layers == ("to_q", "to_k", "to_v", "to_out.0")
    assert INFO.repeated_block_classes == ("BasicTransformerBlock",) and INFO.text_encoder_label is None


def test_it_fills_the_capabilities_the_old_class_declared():
    """The same fourteen optional capabilities as DiTFamily declared (what `opt(applies=...)` tags read)."""
    spec = dit_spec()
    assert set(spec.capabilities) == {
        caps.Encoders, caps.Captions, caps.Demo, caps.ModelDefaults, caps.Precision, caps.RunSetup, caps.Trainables,
        caps.Samples, caps.MemoryPlan, caps.ModelCard, caps.AdapterFitting, caps.AdapterExtras, caps.FusedKernels,
        caps.ImageBuckets}
    assert spec.notes is None and spec.video_frames is None and spec.exports is None and spec.frame_rate is None
    # class-conditional: a folder without metadata gives each image its class folder's name
    assert spec.captions.caption_source == "class_folders" and spec.captions.requires_captions


def test_components_are_small_and_share_the_encoders():
    spec = dit_spec()
    parts = [getattr(spec, field) for field in ("model", "data", "loss", "adapter", "encoders", "samples", "plan",
                                                "card", "setup", "precision", "demo", "defaults", "trainables",
                                                "fitting", "adapter_extras", "image_buckets", "kernels")]
    for part in parts:
        methods = [n for n, v in inspect.getmembers(type(part), inspect.isfunction) if not n.startswith("__")]
        assert len(methods) < 20, (type(part).__name__, methods)
    assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
    assert spec.plan.loss is spec.loss and spec.plan.buckets is spec.image_buckets
    assert spec.adapter.fitting is spec.fitting  # the final samples' pipeline is fitted as dit_lora.load_adapter fits


def test_no_component_keeps_run_state_in_extras():
    """No ``extras`` anywhere in the package but the spec's ``adapter_extras`` component and its method."""
    import re

    import dit_lora.families.dit as package

    for module in Path(package.__file__).parent.glob("*.py"):
        assert not re.search(r"(?<!\w)extras\b", module.read_text()), module.name


@pytest.mark.slow
def test_dit_demo_trains_resizes_and_reloads(tmp_path):
    """The shipped demo (1000 -> 3 classes) end to end; the reloaded adapter equals the trained weights."""
    from diffusers import DiTPipeline

    import dit_lora
    from dit_lora.kit import make_peft_capable
    from dit_lora.families.dit.embedding import resize_class_embeddings
    from dit_lora.modeling import trainables
    from dit_lora.training.checkpoint import TRAINABLE_FILE

    demo_cfg = ROOT / "recipes/configs/dit_class/demo.yaml"
    cfg = yaml.safe_load(demo_cfg.read_text())
    demo = tmp_path / "demo"
    overrides = {"pretrained_model_name_or_path": demo / "tiny-dit", "train_data_dir": demo / "classes",
                 "output_dir": demo / "output", "cache_dir": demo / "cache"}
    args = ["--config", str(demo_cfg), "--skip_doctor"]
    for k, v in overrides.items():
        args += [f"--{k}", str(v)]
    start = time.time()
    proc = run_recipe(args, recipe="dit_class", timeout=300, warm=True)
    elapsed = time.time() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "class embedding resized: 1000 -> 3 classes" in proc.stdout
    out = demo / "output"
    summary = read_summary(out)
    assert summary["steps"] == cfg["max_train_steps"] and summary["skipped_steps"] == 0
    losses = [l for _, l in summary["loss_history"]]
    assert losses and all(l is not None for l in losses)
    assert summary["adapter"].endswith("adapter_model.safetensors")
    assert {g["name"] for g in summary["param_groups"]} == {"lora", "backbone"}

    lora = load_file(str(out / "adapter_model.safetensors"))
    assert lora and all(torch.isfinite(v).all() for v in lora.values())
    backbone = load_file(str(out / "dit_lora_backbone.safetensors"))
    assert backbone and all(v.shape[0] == 4 and torch.isfinite(v).all() for v in backbone.values())
    classes = json.loads((out / "dit_lora_classes.json").read_text())
    assert classes["classes"] == ["circle", "square", "triangle"] and classes["num_classes"] == 3
    assert Image.open(out / "samples" / "final_0.png").size == (64, 64)
    assert len(list((out / "samples").glob("final_*.png"))) == 2  # "circle, triangle"

    # The trained model, rebuilt from the final checkpoint's trainable weights (the loop's in-memory state).
    base = DiTPipeline.from_pretrained(str(demo / "tiny-dit"), torch_dtype=torch.float32).transformer
    make_peft_capable(base)
    resize_class_embeddings(base, 3)
    trainables.add_lora(base, rank=cfg["rank"], alpha=cfg["lora_alpha"], dropout=0.0, targets=("to_q", "to_k", "to_v",
                      "to_out.0"), seed=0)
    trained = load_file(str(out / f"checkpoint-{cfg['max_train_steps']}" / TRAINABLE_FILE))
    params = dict(base.named_parameters())
    assert any("class_embedder" in k for k in trained) and any("lora_B" in k for k in trained)
    with torch.no_grad():
        for k, v in trained.items():
            params[k].copy_(v)
    pipe = dit_lora.load_adapter(DiTPipeline.from_pretrained(str(demo / "tiny-dit"), torch_dtype=torch.float32), out)
    torch.manual_seed(0)
    x, t = torch.randn(4, 4, 8, 8), torch.tensor([5, 250, 600, 999])
    labels = torch.tensor([0, 1, 2, 1000])
    with torch.no_grad():
        torch.testing.assert_close(pipe.transformer(x, timestep=t, class_labels=labels).sample,
                                   base(x, timestep=t, class_labels=labels).sample, rtol=0, atol=1e-5)
    assert pipe.get_label_ids(["triangle"]) == [2]

    # The model card's snippet runs as written.
    card = (out / "README.md").read_text()
    assert "load_adapter" in card and "get_label_ids" in card
    assert "pypi.org" not in card  # the card links only pages that exist (dit-lora is not on PyPI)
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    assert "num_inference_steps" in snippet
    exec(compile(snippet.replace("image.save(\"sample.png\")", "image.save(OUT)"), "card", "exec"),
         {"OUT": str(tmp_path / "card.png"), "__name__": "card"}, {})
    assert Image.open(tmp_path / "card.png").size == (64, 64)
    assert elapsed < 120, f"DiT demo took {elapsed:.0f}s"


def test_the_block_list_names_the_tiny_models_blocks(tiny_dit):
    """``--blocks_to_swap`` swaps ``transformer_blocks`` (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    assert_block_lists("dit", tiny_dit)
