"""Class-conditional DiT: class-count checks, the embedding resize, PEFT-format save/load, the demo end to end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from helpers import ROOT, base_args, read_summary, run_recipe
from dit_lora.core.errors import UserError


def _cfg(model: Path, data: Path, out: Path, **kw):
    from dit_lora.config import TrainConfig

    values = dict(family="dit", pretrained_model_name_or_path=str(model), train_data_dir=str(data),
                  output_dir=str(out), resolution=64, mixed_precision="no", rank=4, lora_alpha=8, seed=0)
    values.update(kw)
    return TrainConfig.for_family(**values)


def test_folder_labels_and_classlabel_column(shape_classes, tmp_path):
    from dit_lora.data.sources import load_samples

    samples = load_samples(train_data_dir=shape_classes, labels_from_folders=True)
    assert {s.caption for s in samples} == {"circle", "square", "triangle"}
    assert all(s.key.split("/")[0] == s.caption for s in samples)
    # Without the flag the same folder has no captions (unchanged behaviour for captioned families).
    with pytest.raises(UserError, match="no caption"):
        load_samples(train_data_dir=shape_classes)
    # Images outside a class folder are named.
    loose = tmp_path / "loose"
    (loose / "circle").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(loose / "circle" / "a.png")
    Image.new("RGB", (8, 8)).save(loose / "stray.png")
    with pytest.raises(UserError, match="stray.png"):
        load_samples(train_data_dir=loose, labels_from_folders=True)
    # A `datasets` ClassLabel column maps ints to names.
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {"image": [str(loose / "circle" / "a.png")] * 2, "label": [1, 0]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])}),
    )
    (tmp_path / "dsdir").mkdir()
    ds.to_parquet(str(tmp_path / "dsdir" / "train.parquet"))  # parquet keeps the ClassLabel feature
    rows = load_samples(dataset_name=str(tmp_path / "dsdir"), caption_column="label")
    assert [r.caption for r in rows] == ["dog", "cat"]


def test_num_classes_smaller_than_dataset_is_refused(tiny_dit, shape_classes, tmp_path):
    from dit_lora.data.sources import load_samples
    from dit_lora.registry import get_family

    family = get_family("dit")
    cfg = _cfg(tiny_dit, shape_classes, tmp_path / "o", num_classes=2)
    comps = family.load_components(cfg, torch.device("cpu"))
    samples = load_samples(train_data_dir=shape_classes, labels_from_folders=True)
    with pytest.raises(UserError, match=r"--num_classes 2 is smaller than the dataset's 3 classes"):
        family.inspect_samples(comps, cfg, samples)
    with pytest.raises(UserError, match=r"is not a class of the dataset"):
        family.inspect_samples(comps, _cfg(tiny_dit, shape_classes, tmp_path / "o", num_classes=3,
                                            validation_prompt="hexagon"), samples)


def test_resize_save_and_load_adapter_reproduce_the_trained_model(tiny_dit, shape_classes, tmp_path):
    """In-memory trained model == fresh DiTPipeline + dit_lora.load_adapter (LoRA, resized embedding, names)."""
    from diffusers import DiTPipeline

    import dit_lora
    from dit_lora.data.sources import load_samples
    from dit_lora.registry import get_family
    from dit_lora.output.adapter import write_adapter
    from dit_lora.output.names import BACKBONE_FILE, CLASSES_FILE, PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE
    from dit_lora.modeling import trainables

    family = get_family("dit")
    cfg = _cfg(tiny_dit, shape_classes, tmp_path / "out", num_classes=3)
    comps = family.load_components(cfg, torch.device("cpu"))
    family.configure(comps, cfg)
    family.inspect_samples(comps, cfg, load_samples(train_data_dir=shape_classes, labels_from_folders=True))
    model = comps.model
    tables = [p for n, p in model.named_parameters() if "class_embedder" in n]
    assert len(tables) == 2 and all(t.shape[0] == 4 for t in tables)  # 3 classes + the null row
    assert model.config.num_embeds_ada_norm == 3
    assert comps.extras["label2id"] == {"circle": 0, "square": 1, "triangle": 2}

    trainables.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=family.default_lora_layers, seed=0)
    assert cfg.train_backbone == []  # the family decides, the config is not rewritten
    names = trainables.unfreeze_backbone(model, family.backbone_patterns(cfg))
    assert sorted(names) == sorted(n for n, _ in model.named_parameters() if "class_embedder" in n)
    groups = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=names,
                                         backbone_learning_rate=cfg.backbone_learning_rate, weight_decay=0.0,
                                         loraplus_lr_ratio=None)
    assert groups[-1]["name"] == "backbone" and groups[-1]["lr"] == cfg.backbone_learning_rate
    # "Train": move LoRA B off zero and the class rows off their init.
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or "class_embedder" in n:
                p.add_(torch.randn_like(p) * 0.3)
    lora_state, backbone = trainables.split_trainable_state(model, names)
    out = tmp_path / "out"
    write_adapter(family, out, lora_state, model.peft_config["default"].to_dict(), backbone,
                  family.backbone_patterns(cfg), comps=comps, cfg=cfg)
    for f in (PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE, BACKBONE_FILE, CLASSES_FILE):
        assert (out / f).is_file(), f
    assert json.loads((out / PEFT_CONFIG_FILE).read_text())["lora_alpha"] == 4  # alpha 8 / rank 4 folded into B
    assert all(k.startswith("base_model.model.") for k in load_file(str(out / PEFT_ADAPTER_FILE)))

    torch.manual_seed(0)
    x = torch.randn(4, 4, 8, 8)
    t = torch.tensor([10, 200, 500, 900])
    labels = torch.tensor([0, 1, 2, 3])  # 3 = the resized null row
    model.eval()
    with torch.no_grad():
        want = model(x, timestep=t, class_labels=labels).sample
        want_null = model(x, timestep=t, class_labels=torch.full((4,), 3)).sample

    def fresh():
        return DiTPipeline.from_pretrained(str(tiny_dit), torch_dtype=torch.float32)

    pipe = dit_lora.load_adapter(fresh(), out)
    with torch.no_grad():
        got = pipe.transformer(x, timestep=t, class_labels=labels).sample
        # DiTPipeline feeds 1000 for the unconditional branch: it must reach the resized null row.
        got_null = pipe.transformer(x, timestep=t, class_labels=torch.full((4,), 1000)).sample
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_null, want_null, rtol=0, atol=1e-5)
    # PEFT's own loader (the adapter alone; the class tables come from the backbone file) at the trained strength.
    from peft import PeftModel

    base = fresh()
    family.prepare_pipeline_for_adapter(base, out)
    base.transformer.load_state_dict(load_file(str(out / BACKBONE_FILE)), strict=False)
    peft_model = PeftModel.from_pretrained(base.transformer, str(out)).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(x, timestep=t, class_labels=labels).sample, want, rtol=0, atol=1e-5)
    assert pipe.get_label_ids(["circle", "triangle"]) == [0, 2]
    assert list(pipe.labels) == ["circle", "square", "triangle"]
    images = pipe(class_labels=pipe.get_label_ids(["square"]), num_inference_steps=2,
                  generator=torch.manual_seed(0)).images
    assert images[0].size == (64, 64)

    # The test can fail: without the trained embedding (backbone file) the output differs.
    (out / BACKBONE_FILE).rename(tmp_path / "aside.safetensors")
    partial = dit_lora.load_adapter(fresh(), out)
    with torch.no_grad():
        assert not torch.allclose(partial.transformer(x, timestep=t, class_labels=labels).sample, want, atol=1e-3)


@pytest.mark.slow
def test_class_count_mismatch_stops_with_both_numbers(tiny_dit, shape_classes, tmp_path):
    proc = run_recipe(base_args(tiny_dit, shape_classes, tmp_path / "out", tmp_path / "cache"),
                      recipe="dit_class", timeout=300)
    text = " ".join((proc.stdout + proc.stderr).split())  # the message is wrapped to the terminal width
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    assert "The dataset has 3 classes" in text and "1000 classes" in text and "--num_classes 3" in text, text


@pytest.mark.slow
def test_dit_demo_trains_resizes_and_reloads(tmp_path):
    """The shipped demo (1000 -> 3 classes) end to end; the reloaded adapter equals the trained weights."""
    from diffusers import DiTPipeline

    import dit_lora
    from dit_lora.families.diffusion import make_peft_capable
    from dit_lora.families.dit.spec import resize_class_embeddings
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
    proc = run_recipe(args, recipe="dit_class", timeout=300)
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


def test_dit_keeps_square_images_because_its_transformer_unpatchifies_a_square():
    """diffusers' DiTTransformer2DModel takes height = width = sqrt(tokens) when unpatchifying: a non-square latent
    cannot come out in its shape, so the family keeps the --resolution square (square_only says why)."""
    from diffusers import DiTTransformer2DModel

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.families.dit.demo import get_tiny_dit_config

    family = get_family("dit")
    cfg = TrainConfig.for_family("dit")
    assert "only square" in family.square_only(cfg) and family.bucket_stride(cfg) == 16  # VAE 8 x patch 2
    torch.manual_seed(0)
    model = DiTTransformer2DModel(**get_tiny_dit_config()["transformer"]).eval()
    labels, t = torch.tensor([1]), torch.tensor([500])
    with torch.no_grad():
        square = model(torch.randn(1, 4, 8, 8), timestep=t, class_labels=labels).sample
        assert square.shape == (1, 8, 8, 8)
        # 2 x 8 patches come out as 4 x 4: the wrong shape, its pixels scrambled
        assert model(torch.randn(1, 4, 4, 16), timestep=t, class_labels=labels).sample.shape == (1, 8, 8, 8)
        with pytest.raises(RuntimeError):
            model(torch.randn(1, 4, 4, 24), timestep=t, class_labels=labels)  # 2 x 12 patches: no square root
