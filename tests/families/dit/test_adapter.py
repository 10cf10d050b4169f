"""families/dit/adapter.py: PEFT-format save beside the label map, a DiTPipeline fitted to the trained class
table, the model card's snippet, rows and license."""

from __future__ import annotations

import json

import torch
from dit_configs import dit_cfg
from safetensors.torch import load_file


def test_card_names_the_trained_classes_and_metas_license(tmp_path):
    from dit_lora.output.names import CLASSES_FILE
    from dit_lora.registry import get_family

    card = get_family("dit").card
    out = tmp_path / "out"
    out.mkdir()
    (out / CLASSES_FILE).write_text(json.dumps({"classes": ["circle", "square"], "num_classes": 2}))
    cfg = dit_cfg("facebook/DiT-XL-2-256", tmp_path, out, validation_prompt="square")
    snippet = card.usage_snippet(cfg, "me/adapter")
    assert 'load_adapter(pipe, "me/adapter")' in snippet and 'get_label_ids(["square"])' in snippet
    compile(snippet, "snippet", "exec")
    assert card.card_settings(cfg) == {"num_classes": 2, "classes": "circle, square",
                                       "class_embedding": "frozen (base model's)"}
    assert card.base_model_license(cfg.model) == "cc-by-nc-4.0"
    assert card.base_model_license(dit_cfg("me/other-dit", tmp_path, out).model) is None


def test_resize_save_and_load_adapter_reproduce_the_trained_model(tiny_dit, shape_classes, tmp_path):
    """In-memory trained model == fresh DiTPipeline + dit_lora.load_adapter (LoRA, resized embedding, names)."""
    from diffusers import DiTPipeline

    import dit_lora
    from dit_lora.contract.spec import configure
    from dit_lora.data.sources import load_samples
    from dit_lora.modeling import trainables
    from dit_lora.output.adapter import write_adapter
    from dit_lora.output.names import (
        BACKBONE_FILE,
        CLASSES_FILE,
        PEFT_ADAPTER_FILE,
        PEFT_CONFIG_FILE,
    )
    from dit_lora.registry import get_family

    family = get_family("dit")
    cfg = dit_cfg(tiny_dit, shape_classes, tmp_path / "out", num_classes=3)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    configure(family, comps, cfg)
    family.setup.inspect_samples(comps, cfg, load_samples(train_data_dir=shape_classes, labels_from_folders=True))
    model = comps.model
    tables = [p for n, p in model.named_parameters() if "class_embedder" in n]
    assert len(tables) == 2 and all(t.shape[0] == 4 for t in tables)  # 3 classes + the null row
    assert model.config.num_embeds_ada_norm == 3
    assert comps.state.label2id == {"circle": 0, "square": 1, "triangle": 2}

    trainables.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=family.info.default_lora_layers, seed=0)
    assert cfg.lora.train_backbone == []  # the family decides, the config is not rewritten
    names = trainables.unfreeze_backbone(model, family.trainables.backbone_patterns(cfg.lora, cfg.family_options))
    assert sorted(names) == sorted(n for n, _ in model.named_parameters() if "class_embedder" in n)
    groups = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=names,
                                         backbone_learning_rate=cfg.lora.backbone_learning_rate, weight_decay=0.0,
                                         loraplus_lr_ratio=None)
    assert groups[-1]["name"] == "backbone" and groups[-1]["lr"] == cfg.lora.backbone_learning_rate
    # "Train": move LoRA B off zero and the class rows off their init.
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or "class_embedder" in n:
                p.add_(torch.randn_like(p) * 0.3)
    lora_state, backbone = trainables.split_trainable_state(model, names)
    out = tmp_path / "out"
    write_adapter(family, out, lora_state, model.peft_config["default"].to_dict(), backbone,
                  family.trainables.backbone_patterns(cfg.lora, cfg.family_options), comps=comps, cfg=cfg)
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
    family.fitting.prepare_pipeline_for_adapter(base, out)
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
