"""families/wan/adapter.py: the adapter files of single-expert, one-expert (A14B) and both-expert runs, the adapter
index (the low-noise expert loads with ``load_into_transformer_2=True``, diffusers' ``WanLoraLoaderMixin``), the
ComfyUI files beside them, the reloaded pipeline, ``dit-lora export`` and the card's usage snippet.

A "trained" adapter here is the run's own path: the family loads the wan_model model, ``attach_trainables`` adds the
LoRA, ``lora_B`` gets seeded random values (a stand-in for training) and ``write_adapter`` writes it with the
run's components, as ``finish`` does.
"""

from __future__ import annotations

import ast
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.families.wan.experts import WanExperts
from dit_lora.modeling import trainables
from dit_lora.output.adapter import adapter_index, write_adapter
from dit_lora.output.names import ADAPTER_FILE, ADAPTER_INDEX_FILE
from dit_lora.registry import get_family

CPU = torch.device("cpu")
LOW_FILE = "pytorch_lora_weights_low_noise.safetensors"
TO_2 = {"load_into_transformer_2": True}


pytestmark = pytest.mark.usefixtures("wan_offline")  # the shared fixtures: conftest.py


def _cfg(path, family="wan", **values) -> TrainConfig:
    return TrainConfig.for_family(family, pretrained_model_name_or_path=str(path), train_data_dir="clips",
                                  mixed_precision="no", rank=4, lora_alpha=8, gradient_checkpointing=False,
                                  validation_prompt="a red square", **values)


def _trained(path, out, family_name="wan", **values):
    """(family, cfg, trained model, files written) of a stand-in run on ``path``."""
    family = get_family(family_name)
    cfg = _cfg(path, family_name, **values)
    comps = family.model.load_components(cfg, CPU)
    model = comps.model
    trainables.attach_trainables(model, family, cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    lora, backbone = trainables.split_trainable_state(model, [])
    written = write_adapter(family, out, lora, model.peft_config["default"].to_dict(), backbone, [], comps=comps,
                            cfg=cfg)
    return family, cfg, model.eval(), written


def _inputs(config, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"hidden_states": torch.randn(1, config.in_channels, 3, 8, 8, generator=g),
            "encoder_hidden_states": torch.randn(1, 12, config.text_dim, generator=g),
            "timestep": torch.tensor([700.0]), "return_dict": False}


def _run(transformer, inputs) -> torch.Tensor:
    with torch.no_grad():
        return transformer(**inputs)[0]


def _has_lora(module) -> bool:
    return any("lora_A" in name for name, _ in module.named_parameters())


def _lora_file(path, expert_module, prefix="transformer."):
    """The file's tensors equal ``expert_module``'s LoRA weights (lora_B scaled by alpha / r = 2, folded)."""
    saved = load_file(str(path))
    live = {n.replace(".default", ""): p for n, p in expert_module.named_parameters() if "lora_" in n}
    assert set(saved) == {prefix + n for n in live}
    for name, value in live.items():
        assert torch.equal(saved[prefix + name], value.detach() * (2 if "lora_B" in name else 1)), name


def _comfy_expert(path) -> str:
    with safe_open(str(path), framework="pt") as fh:
        return (fh.metadata() or {})["dit_lora_expert"]


def test_single_expert_run_writes_one_file_and_no_index(wan_model, tmp_path):
    out = tmp_path / "out"
    _, _, model, written = _trained(wan_model("2.1-t2v"), out)
    names = {p.name for p in written}
    assert names == {ADAPTER_FILE, "pytorch_lora_weights_comfyui.safetensors"}
    assert adapter_index(out) is None
    _lora_file(out / ADAPTER_FILE, model)
    assert _comfy_expert(out / "pytorch_lora_weights_comfyui.safetensors") == "high"


@pytest.mark.parametrize("expert,kwargs", [("low", TO_2), ("high", {})])
def test_one_expert_run_indexes_its_file(wan_model, tmp_path, expert, kwargs):
    out = tmp_path / "out"
    _, _, model, written = _trained(wan_model("2.2-t2v-a14b"), out, wan_expert=expert)
    name = ADAPTER_FILE if expert == "high" else LOW_FILE  # the low-noise file never has the default name
    comfy = name.replace(".safetensors", "_comfyui.safetensors")
    assert {p.name for p in written} == {name, comfy, ADAPTER_INDEX_FILE}
    assert adapter_index(out) == [{"file": name, "label": expert, "load_kwargs": kwargs}]
    raw = json.loads((out / ADAPTER_INDEX_FILE).read_text())["files"][0]
    assert raw["expert"].startswith(f"{expert}-noise expert")
    _lora_file(out / name, model)
    assert _comfy_expert(out / comfy) == expert


@pytest.fixture(scope="module")
def both_run(wan_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("both") / "out"
    family, cfg, model, written = _trained(wan_model("2.2-t2v-a14b"), out)  # --wan_expert both (the default)
    return family, cfg, model, written, out


def test_both_experts_write_one_file_each_and_the_index(both_run):
    _, _, model, written, out = both_run
    assert isinstance(model, WanExperts)
    assert {p.name for p in written} == {ADAPTER_FILE, LOW_FILE, ADAPTER_INDEX_FILE,
                                         "pytorch_lora_weights_comfyui.safetensors",
                                         "pytorch_lora_weights_low_noise_comfyui.safetensors"}
    assert adapter_index(out) == [{"file": ADAPTER_FILE, "label": "high", "load_kwargs": {}},
                                  {"file": LOW_FILE, "label": "low", "load_kwargs": TO_2}]
    _lora_file(out / ADAPTER_FILE, model.high)  # the high. prefix is gone: plain transformer keys
    _lora_file(out / LOW_FILE, model.low)
    assert _comfy_expert(out / "pytorch_lora_weights_comfyui.safetensors") == "high"
    assert _comfy_expert(out / "pytorch_lora_weights_low_noise_comfyui.safetensors") == "low"


def test_reloaded_pipeline_has_each_expert_in_its_transformer(both_run):
    """WanAdapter.load_pipeline_with_adapter (the kit's): the high file in ``transformer``, the low file in
    ``transformer_2``; each reproduces the trained expert (fp32 run: exact up to float rounding) and differs from the
    base model."""
    from diffusers import WanTransformer3DModel

    family, cfg, model, _, out = both_run
    pipe = family.adapter.load_pipeline_with_adapter(cfg, out, CPU)
    assert type(pipe).__name__ == "WanPipeline" and pipe.vae.dtype == torch.float32
    path = cfg.model.pretrained_model_name_or_path
    for sub, expert in (("transformer", model.high), ("transformer_2", model.low)):
        loaded = getattr(pipe, sub)
        assert _has_lora(loaded), sub
        inputs = _inputs(loaded.config)
        base = _run(WanTransformer3DModel.from_pretrained(path, subfolder=sub), inputs)
        trained, reloaded = _run(expert, inputs), _run(loaded, inputs)
        change = (trained - base).abs().max()
        assert change > 1e-2, sub
        torch.testing.assert_close(reloaded, trained, rtol=1e-4, atol=1e-4 * float(change))


def test_low_only_run_reloads_into_transformer_2(wan_model, tmp_path):
    out = tmp_path / "out"
    family, cfg, model, _ = _trained(wan_model("2.2-t2v-a14b"), out, wan_expert="low")
    pipe = family.adapter.load_pipeline_with_adapter(cfg, out, CPU)
    assert _has_lora(pipe.transformer_2) and not _has_lora(pipe.transformer)
    inputs = _inputs(model.config)
    torch.testing.assert_close(_run(pipe.transformer_2, inputs), _run(model, inputs), rtol=1e-4, atol=1e-4)


def test_export_recreates_the_comfyui_files(both_run):
    family, _, _, _, out = both_run
    comfy = ["pytorch_lora_weights_comfyui.safetensors", "pytorch_lora_weights_low_noise_comfyui.safetensors"]
    before = {name: load_file(str(out / name)) for name in comfy}
    for name in comfy:
        (out / name).unlink()
    written = family.exports.export_adapter(out, "comfyui")
    assert sorted(p.name for p in written) == sorted(comfy)
    for name in comfy:
        after = load_file(str(out / name))
        assert after.keys() == before[name].keys() and all(torch.equal(after[k], before[name][k]) for k in after)
    with pytest.raises(UserError, match="--format kohya: Wan adapters export as `comfyui` only"):
        family.exports.export_adapter(out, "kohya")


def test_export_of_a_single_run_without_index(wan_model, tmp_path):
    out = tmp_path / "out"
    family, *_ = _trained(wan_model("2.1-t2v"), out)
    (out / "pytorch_lora_weights_comfyui.safetensors").unlink()
    assert [p.name for p in family.exports.export_adapter(out, "comfyui")] == ["pytorch_lora_weights_comfyui.safetensors"]


def _load_calls(snippet: str) -> list[dict]:
    """Each ``pipe.load_lora_weights`` call of the snippet: its keyword arguments (literal values)."""
    calls = []
    for node in ast.walk(ast.parse(snippet)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "load_lora_weights":
            calls.append({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return calls


@pytest.mark.parametrize("variant,family,expert,calls", [
    ("2.1-t2v", "wan", None, [{}]),
    ("2.1-i2v", "wan_i2v", None, [{}]),
    ("2.2-t2v-a14b", "wan", "high", [{}]),
    ("2.2-t2v-a14b", "wan", "low", [{"weight_name": LOW_FILE, **TO_2}]),
    ("2.2-t2v-a14b", "wan", "both", [{}, {"weight_name": LOW_FILE, **TO_2}]),
])
def test_usage_snippet_is_python_and_loads_each_file_where_it_belongs(wan_model, variant, family, expert, calls):
    cfg = _cfg(wan_model(variant), family, **({"wan_expert": expert} if expert else {}))
    snippet = get_family(family).card.usage_snippet(cfg, "me/my-wan-lora")
    compile(snippet, "snippet.py", "exec")
    assert _load_calls(snippet) == calls
    assert ("WanImageToVideoPipeline" in snippet) == (family == "wan_i2v") and "rate=16" in snippet


@pytest.mark.parametrize("expert", ["both", "low"])
def test_usage_snippet_loading_lines_run_against_the_written_files(wan_model, tmp_path, expert):
    """Executing the snippet up to ``pipe.to(...)`` on the wan_model model and a run's folder puts the LoRA where the
    run trained it (what a user copying the card gets)."""
    out = tmp_path / "out"
    family, cfg, _, _ = _trained(wan_model("2.2-t2v-a14b"), out, wan_expert=expert)
    snippet = family.card.usage_snippet(cfg, str(out))
    namespace: dict = {}
    exec(compile(snippet[:snippet.index("pipe.to(")], "snippet.py", "exec"), namespace)
    pipe = namespace["pipe"]
    assert _has_lora(pipe.transformer_2)
    assert _has_lora(pipe.transformer) == (expert == "both")
