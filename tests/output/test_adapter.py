"""output/adapter.py: the adapter files (the LoRA scale folded into lora_B, PEFT format, backbone weights), never
written non-finite, and loaded back at the trained strength."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.output.adapter import (
    ADAPTER_FILE,
    NonFiniteWeightsError,
    adapter_folder,
    assert_finite,
    load_adapter_files,
    lora_scale,
    write_adapter,
)
from dit_lora.modeling import trainables


def _metadata(path) -> dict:
    """An adapter file's safetensors metadata (rank/alpha as diffusers stores them)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return dict(fh.metadata() or {})


def _fresh_transformer(tiny_sana):
    from diffusers import SanaTransformer2DModel

    return SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.bfloat16)


def _inputs(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    x = torch.randn(2, cfg.in_channels, 8, 8, generator=g).to(torch.bfloat16)
    text = torch.randn(2, 12, cfg.caption_channels, generator=g).to(torch.bfloat16)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 6:] = 0
    t = torch.tensor([900.0, 150.0])
    return dict(hidden_states=x, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t, return_dict=False)


def test_saved_adapter_reloads_at_trained_strength(tiny_sana, tmp_path):
    """alpha != rank: the scale is folded into lora_B, so the stock loader and a metadata-blind one (it reads no alpha
    and takes alpha = rank) both reproduce the trained model; the live model is left as trained."""
    from diffusers import SanaPipeline
    from safetensors.torch import load_file, save_file

    family = get_family("sana")
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=16, dropout=0.0, targets=family.info.default_lora_layers, seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    with torch.no_grad():  # stand-in for training: make lora_B non-zero
        g = torch.Generator().manual_seed(3)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        trained = model(**_inputs(model))[0].float()
    live = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    lora, backbone = trainables.split_trainable_state(model, [])
    write_adapter(family, tmp_path, lora, model.peft_config["default"].to_dict(), backbone, [])
    meta = json.loads(_metadata(tmp_path / ADAPTER_FILE)["lora_adapter_metadata"])
    assert meta["transformer.r"] == 4 and meta["transformer.lora_alpha"] == 4  # scale 16 / 4 is in lora_B
    saved = load_file(str(tmp_path / ADAPTER_FILE))
    for name, value in live.items():  # folded on export only: the live (checkpointed) weights are untouched
        assert torch.equal(dict(model.named_parameters())[name], value), name
        key = "transformer." + name.replace(".default.", ".")
        assert torch.equal(saved[key], value * 4 if "lora_B" in name else value), name
    # A metadata-blind consumer: the same tensors in a file without diffusers' metadata.
    blind = tmp_path / "blind"
    blind.mkdir()
    save_file(saved, str(blind / ADAPTER_FILE))
    assert "lora_adapter_metadata" not in _metadata(blind / ADAPTER_FILE)

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        base_out = _fresh_transformer(tiny_sana)(**_inputs(model))[0].float()
    change = (trained - base_out).abs().max()
    assert change > 1e-2  # the adapter does something measurable
    for folder in (tmp_path, blind):
        pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.bfloat16)
        pipe.load_lora_weights(folder)
        assert next(iter(pipe.transformer.transformer_blocks[0].attn1.to_q.scaling.values())) == 1.0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            loaded_out = pipe.transformer.eval()(**_inputs(model))[0].float()
        # bf16 LoRA weights after loading vs fp32 masters: equal up to bf16 rounding, far below the LoRA effect
        # (at the wrong strength, e.g. the unfolded file read as alpha = rank, it is off by over 0.3x the change).
        assert (loaded_out - trained).abs().max() < 0.05 * change, folder


def test_fold_lora_scale_keeps_the_function_for_rslora_patterns_and_bias():
    """alpha / sqrt(r) (rsLoRA), per-layer rank/alpha patterns and lora_B biases fold exactly as PEFT scales them."""
    import copy
    import inspect

    from peft import LoraConfig, inject_adapter_in_model

    from dit_lora.output.adapter import fold_lora_scale

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    x = torch.randn(3, 8)
    configs = [LoraConfig(r=4, lora_alpha=16, use_rslora=True, target_modules=["0", "1"]),
               LoraConfig(r=4, lora_alpha=16, rank_pattern={"1": 2}, alpha_pattern={"0": 3}, target_modules=["0", "1"],
                          lora_bias=True)]
    for config in configs:
        model = inject_adapter_in_model(config, copy.deepcopy(base))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_" in name:
                    param.copy_(torch.randn(param.shape))
            want = model(x)
        state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
        before = {k: v.clone() for k, v in state.items()}
        folded, folded_config = fold_lora_scale(state, config.to_dict())
        assert all(torch.equal(state[k], before[k]) for k in state)  # inputs untouched
        params = inspect.signature(LoraConfig).parameters
        fresh = inject_adapter_in_model(LoraConfig(**{k: v for k, v in folded_config.items() if k in params}),
                                        copy.deepcopy(base))
        assert all(m.scaling["default"] == 1.0 for m in fresh.modules() if hasattr(m, "scaling"))
        missing = fresh.load_state_dict({k.replace(".lora_A", ".lora_A.default").replace(".lora_B", ".lora_B.default"): v
                                         for k, v in folded.items()}, strict=False).missing_keys
        assert not [k for k in missing if "lora_" in k]
        with torch.no_grad():
            torch.testing.assert_close(fresh(x), want, rtol=1e-5, atol=1e-6 * want.abs().max().item())


def test_non_finite_adapter_is_never_written(tmp_path):
    family = get_family("sana")
    bad = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.tensor([[float("nan")]])}
    with pytest.raises(NonFiniteWeightsError, match="nothing was written"):
        write_adapter(family, tmp_path, bad, {"r": 1, "lora_alpha": 1}, {}, [])
    assert not (tmp_path / ADAPTER_FILE).exists()
    assert not any(tmp_path.iterdir())


def test_lora_scale_follows_peft_rules():
    config = {"r": 4, "lora_alpha": 16}
    assert lora_scale(config, "blocks.0.to_q") == 4.0
    assert lora_scale({**config, "use_rslora": True}, "blocks.0.to_q") == 8.0  # alpha / sqrt(r)
    patterned = {**config, "rank_pattern": {"to_k": 2}, "alpha_pattern": {"to_v": 2}}
    assert lora_scale(patterned, "blocks.0.to_k") == 8.0 and lora_scale(patterned, "blocks.0.to_v") == 0.5


def test_assert_finite_names_the_first_bad_tensors():
    assert_finite({"a": torch.ones(2), "ids": torch.tensor([1, 2])}, "adapter")
    with pytest.raises(NonFiniteWeightsError, match=r"adapter: 2 tensor\(s\) contain NaN/Inf \(e.g. b, c\)"):
        assert_finite({"a": torch.ones(1), "b": torch.tensor([float("inf")]), "c": torch.tensor([float("nan")])},
                      "adapter")


def test_a_missing_folder_or_a_folder_without_adapter_files_is_named(tmp_path):
    assert adapter_folder(tmp_path) == tmp_path
    with pytest.raises(UserError, match="does not exist"):
        adapter_folder(tmp_path / "nowhere")
    with pytest.raises(UserError, match="No adapter_model.safetensors and adapter_config.json in"):
        load_adapter_files(torch.nn.Linear(2, 2), tmp_path)


# ---- the adapter index (dit_lora_adapter_files.json) ------------------------------------------------------------
class _RecordingPipe:
    """A pipeline stand-in that records each ``load_lora_weights`` call (file and keyword arguments)."""

    def __init__(self):
        self.calls = []

    def load_lora_weights(self, folder, **kwargs):
        self.calls.append((folder, kwargs))


def _index_folder(tmp_path, entries, files=("a.safetensors", "b.safetensors")):
    from dit_lora.output.adapter import write_adapter_index

    for name in files:
        (tmp_path / name).write_bytes(b"stand-in")
    write_adapter_index(tmp_path, entries)
    return tmp_path


def test_a_valid_index_loads_every_file_with_its_arguments(tmp_path):
    from dit_lora.output.adapter import adapter_index

    folder = _index_folder(tmp_path, [
        {"file": "a.safetensors", "label": "high", "load_kwargs": {}},
        {"file": "b.safetensors", "label": "low noise!", "expert": "note",
         "load_kwargs": {"load_into_transformer_2": True}},
    ])
    assert adapter_index(folder) == [
        {"file": "a.safetensors", "label": "high", "load_kwargs": {}},
        {"file": "b.safetensors", "label": "low_noise_", "load_kwargs": {"load_into_transformer_2": True}}]
    pipe = _RecordingPipe()
    load_adapter_files(pipe, folder, adapter_name="style")
    assert pipe.calls == [
        (str(folder), {"weight_name": "a.safetensors", "adapter_name": "style_high", "use_safetensors": True}),
        (str(folder), {"weight_name": "b.safetensors", "adapter_name": "style_low_noise_", "use_safetensors": True,
                       "load_into_transformer_2": True})]
    pipe = _RecordingPipe()
    load_adapter_files(pipe, folder)  # no name: diffusers picks one per file
    assert [c[1]["adapter_name"] for c in pipe.calls] == [None, None]


def test_without_an_index_the_single_file_loads(tmp_path):
    (tmp_path / ADAPTER_FILE).write_bytes(b"stand-in")
    pipe = _RecordingPipe()
    load_adapter_files(pipe, tmp_path)
    assert pipe.calls == [(str(tmp_path), {"weight_name": ADAPTER_FILE, "adapter_name": None, "use_safetensors": True})]


@pytest.mark.parametrize("entry,says", [
    ({"file": "../a.safetensors", "label": "x"}, "file '../a.safetensors' is not a .safetensors file name inside"),
    ({"file": "sub/a.safetensors", "label": "x"}, "file 'sub/a.safetensors' is not a .safetensors file name inside"),
    ({"file": "/etc/a.safetensors", "label": "x"}, "is not a .safetensors file name inside"),
    ({"file": "..", "label": "x"}, "file '..' is not a .safetensors file name"),
    ({"file": "a.bin", "label": "x"}, "file 'a.bin' is not a .safetensors file name"),
    ({"file": "c.safetensors", "label": "x"}, "c.safetensors is missing"),
    ({"file": "a.safetensors", "label": "x", "load_kwargs": {"adapter_name": "evil"}},
     "load_kwargs {'adapter_name': 'evil'} (allowed: load_into_transformer_2)"),
    ({"file": "a.safetensors", "label": "x", "load_kwargs": {"load_into_transformer_2": "yes"}}, "allowed:"),
    ({"label": "x"}, "'file'"),
])
def test_a_damaged_index_is_refused_in_one_paragraph(tmp_path, entry, says):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.safetensors").write_bytes(b"stand-in")
    folder = _index_folder(tmp_path, [entry])
    pipe = _RecordingPipe()
    with pytest.raises(UserError) as caught:
        load_adapter_files(pipe, folder)
    text = str(caught.value)
    assert says in text, text
    assert text.startswith(f"`{folder / 'dit_lora_adapter_files.json'}` cannot be used (") and "\n" not in text
    assert "restore it from the run, or delete it" in text
    assert pipe.calls == []  # nothing loaded from a damaged index


@pytest.mark.parametrize("text", ["{not json", "[]", '{"files": 3}', '{"files": [3]}', '{"entries": []}'])
def test_an_index_that_is_not_the_format_is_refused(tmp_path, text):
    from dit_lora.output.adapter import adapter_index

    (tmp_path / "dit_lora_adapter_files.json").write_text(text)
    with pytest.raises(UserError, match=r"dit_lora_adapter_files.json` cannot be used \(") as caught:
        adapter_index(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_stale_index_is_removed_when_a_run_without_one_overwrites_the_folder(tmp_path):
    """A Wan A14B run's index left in a folder that a single-file run then writes would send the loader to the old
    files; write_adapter removes it (and keeps the index a run writes itself: tests/families/wan/test_adapter.py)."""
    from dit_lora.output.adapter import adapter_index

    _index_folder(tmp_path, [{"file": "a.safetensors", "label": "high", "load_kwargs": {}}])
    family = get_family("sana")
    lora = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.ones(1, 4),
            "transformer_blocks.0.attn1.to_q.lora_B.weight": torch.ones(4, 1)}
    written = write_adapter(family, tmp_path, lora, {"r": 1, "lora_alpha": 1}, {}, [])
    assert [p.name for p in written] == [ADAPTER_FILE]
    assert not (tmp_path / "dit_lora_adapter_files.json").exists() and adapter_index(tmp_path) is None
    pipe = _RecordingPipe()
    load_adapter_files(pipe, tmp_path)
    assert [c[1]["weight_name"] for c in pipe.calls] == [ADAPTER_FILE]


def test_overwriting_a_run_removes_its_other_adapter_files_but_not_the_users(tmp_path):
    """A run written over an A14B `both` run: the old index, the low-noise file it listed and the export files
    dit-lora wrote go (a ComfyUI user picking files by name would get another run's LoRA); a user's file stays."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    from dit_lora.output.export import export_metadata

    from types import SimpleNamespace

    class Family:
        def save_adapter(self, output_dir, lora_state, lora_config):
            save_file(lora_state, str(Path(output_dir) / "pytorch_lora_weights.safetensors"))

    low = "pytorch_lora_weights_low_noise.safetensors"
    for name in ("pytorch_lora_weights.safetensors", low, "mine.safetensors"):
        save_file({"a": torch.zeros(1)}, str(tmp_path / name))
    save_file({"a": torch.zeros(1)}, str(tmp_path / "old_comfyui.safetensors"), metadata=export_metadata("comfyui", "x"))
    (tmp_path / "dit_lora_adapter_files.json").write_text(json.dumps({"files": [
        {"file": "pytorch_lora_weights.safetensors", "label": "high", "load_kwargs": {}},
        {"file": low, "label": "low", "load_kwargs": {"load_into_transformer_2": True}}]}))
    state = {"blocks.0.to_q.lora_A.weight": torch.ones(2, 4), "blocks.0.to_q.lora_B.weight": torch.ones(4, 2)}
    write_adapter(SimpleNamespace(adapter=Family(), adapter_extras=None), tmp_path, state, {"r": 2, "lora_alpha": 2},
                  {}, [])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"pytorch_lora_weights.safetensors", "mine.safetensors"}


def test_a_peft_format_adapter_names_its_base_model(tmp_path):
    """A family whose consumer has no LoRA loader (DiT, the video LLMs) saves PEFT's files naming no base model;
    write_adapter names the run's (a diffusers-format adapter has no adapter_config.json to name it in)."""
    import json
    from types import SimpleNamespace

    from dit_lora.config import TrainConfig
    from dit_lora.output.adapter import save_peft_adapter

    class Peft:
        def save_adapter(self, output_dir, lora_state, lora_config):
            return save_peft_adapter(output_dir, lora_state, lora_config, None)

    state = {"blocks.0.to_q.lora_A.weight": torch.ones(2, 4), "blocks.0.to_q.lora_B.weight": torch.ones(4, 2)}
    config = {"r": 2, "lora_alpha": 2, "target_modules": ["to_q"]}
    cfg = TrainConfig.for_family("dit", pretrained_model_name_or_path="/models/dit")
    write_adapter(SimpleNamespace(adapter=Peft(), adapter_extras=None), tmp_path, state, config, {}, [], cfg=cfg)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["base_model_name_or_path"] == "/models/dit"


# The same adapter, written by processes with different string hash seeds: PEFT's target_modules is a set, and
# list(set) follows the seed. Eight module names give 8! orders, so two seeds agreeing by chance is rare.
_WRITE_IN_A_PROCESS = """
import hashlib, sys
from pathlib import Path
import torch
from peft import LoKrConfig, LoraConfig
from dit_lora.output.adapter import write_adapter
from dit_lora.registry import get_family

names = [f"{b}.{m}" for b in ("attn1", "attn2") for m in ("to_q", "to_k", "to_v", "to_out.0")]
out = Path(sys.argv[1])
print("string hash:", hash("target_modules"))  # first line: how this process hashes strings
lora = {f"transformer_blocks.0.{n}.{p}.weight": torch.full((2, 2), 0.5) for n in names for p in ("lora_A", "lora_B")}
config = LoraConfig(r=2, lora_alpha=4, target_modules=names).to_dict()
assert isinstance(config["target_modules"], set)
write_adapter(get_family("sana"), out / "lora", lora, config, {}, [])
lokr = {f"transformer_blocks.0.{n}.{p}": torch.full((2, 2), 0.5) for n in names for p in ("lokr_w1", "lokr_w2")}
write_adapter(get_family("sana"), out / "lokr", lokr, LoKrConfig(r=2, alpha=4, target_modules=names).to_dict(), {}, [])
for path in sorted(out.rglob("*")):
    if path.is_file():
        print(path.relative_to(out), hashlib.sha256(path.read_bytes()).hexdigest())
"""


@pytest.mark.slow  # a subprocess
def test_the_same_adapter_is_the_same_bytes_whatever_the_hash_seed(tmp_path, monkeypatch):
    """Diffusers' file (the config in its safetensors metadata) and PEFT's adapter_config.json list target_modules
    in sorted order, so two processes (another string hash seed each) write byte-identical files: this one, and a
    fresh one whose seed hashes strings otherwise."""
    import contextlib
    import io
    import os
    import subprocess
    import sys

    from helpers import ROOT

    here = io.StringIO()
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "here")])
    with contextlib.redirect_stdout(here):
        exec(compile(_WRITE_IN_A_PROCESS, "<write adapters>", "exec"), {"__name__": "__main__"})
    ours = here.getvalue().split("\n", 1)[0]
    for seed in ("1", "2"):  # a seed other than this process's (set by PYTHONHASHSEED, or random)
        path = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path}
        done = subprocess.run([sys.executable, "-c", _WRITE_IN_A_PROCESS, str(tmp_path / "there")], capture_output=True,
                              text=True, env=env, timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        if done.stdout.split("\n", 1)[0] != ours:
            break
    (seed_line, digests), (other_seed, other) = (out.split("\n", 1) for out in (here.getvalue(), done.stdout))
    assert seed_line != other_seed  # the two processes hash strings differently
    assert "lora/pytorch_lora_weights.safetensors" in digests and "lokr/adapter_config.json" in digests
    assert digests == other
    meta = json.loads(_metadata(tmp_path / "here" / "lora" / ADAPTER_FILE)["lora_adapter_metadata"])
    names = meta["transformer.target_modules"]
    assert names == sorted(names) and len(names) == 8
    peft = json.loads((tmp_path / "here" / "lokr" / "adapter_config.json").read_text())
    assert peft["target_modules"] == sorted(names) and peft["peft_type"] == "LOKR"


def test_stable_config_sorts_sets_at_any_depth():
    from dit_lora.output.adapter import stable_config

    config = {"b": {"x", "a"}, "a": [frozenset({3, 1}), {"z": {"q", "p"}, "y": 1}], "c": ("k",)}
    assert stable_config(config) == {"a": [[1, 3], {"y": 1, "z": ["p", "q"]}], "b": ["a", "x"], "c": ("k",)}
    assert list(stable_config(config)) == ["a", "b", "c"]


def test_adapter_files_get_the_umasks_mode(tmp_path, umask):
    """safetensors creates its files 0600; the adapter (diffusers' file, PEFT's pair, the backbone) gets what the
    umask gives any new file, as the run's other outputs do."""
    from peft import LoKrConfig

    family = get_family("sana")
    lora = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.ones(2, 2),
            "transformer_blocks.0.attn1.to_q.lora_B.weight": torch.ones(2, 2)}
    backbone = {"proj_out.weight": torch.ones(2, 2)}
    written = write_adapter(family, tmp_path / "lora", lora, {"r": 2, "lora_alpha": 2}, backbone, ["proj_out"])
    lokr = {"transformer_blocks.0.attn1.to_q.lokr_w1": torch.ones(2, 2),
            "transformer_blocks.0.attn1.to_q.lokr_w2": torch.ones(2, 2)}
    config = LoKrConfig(r=2, alpha=2, target_modules=["to_q"]).to_dict()
    written += write_adapter(family, tmp_path / "lokr", lokr, config, {}, [])
    assert sorted(p.name for p in written) == sorted(
        [ADAPTER_FILE, "dit_lora_backbone.safetensors", "adapter_config.json", "adapter_model.safetensors"])
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, (path.name, oct(path.stat().st_mode))


def test_named_copy_renames_only_the_adapters_files():
    from dit_lora.output.adapter import named_copy

    assert named_copy("pytorch_lora_weights.safetensors", "style") == "style.safetensors"
    assert named_copy("pytorch_lora_weights_comfyui.safetensors", "style") == "style_comfyui.safetensors"
    assert named_copy("pytorch_lora_weights_ema.safetensors", "style") == "style_ema.safetensors"
    assert named_copy("adapter_model.safetensors", "style") == "style.safetensors"
    assert named_copy("dit_lora_backbone.safetensors", "style") is None
    assert named_copy("adapter_config.json", "style") is None and named_copy("pytorch_lora_weightsX.safetensors", "s") is None


def test_a_named_copy_that_fails_to_write_leaves_nothing_half_written(tmp_path, monkeypatch):
    from safetensors.torch import save_file as real_save

    from dit_lora.output import adapter as module

    source = tmp_path / "pytorch_lora_weights.safetensors"
    real_save({"a.lora_A.weight": torch.ones(2, 2)}, str(source))

    def full_disk(tensors, path, metadata=None):
        open(path, "wb").write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        module.write_named_copies(tmp_path, [source], "style")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytorch_lora_weights.safetensors"]
    monkeypatch.setattr(module, "save_file", real_save)
    assert [p.name for p in module.write_named_copies(tmp_path, [source], "style")] == ["style.safetensors"]
