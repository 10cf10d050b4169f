"""Every non-LoRA adapter type (``--lora_type dora|lokr|loha``) trains every family's tiny demo: one in-process run per
(family, type) does the guard drill (a NaN loss at update 3 changes nothing) under the host-sync audit
(``DIT_LORA_SYNC_DEBUG``: no step reads the device; see AUDIT_GAP), keeps every trainable tensor in fp32 in its
checkpoint, guard snapshot and adapter file, and reloads through the family's own ``load_pipeline_with_adapter``
(diffusers' ``load_lora_weights`` for DoRA, PEFT's code for LoKr/LoHa) with every adapted layer's output equal to the
trained one's. Each type on one family (FULL_PAIR) also resumes from the reference's checkpoint-2 and ends bitwise
equal to it (weights, guard snapshot and adapter file), and runs its model card's snippet: the resume and the card's
type snippet (output/type_card.py) are shared code that differs by type, not by family (plain LoRA resumes and runs
its card on every family in tests/conformance, and each (family, type) run here reloads through the family's own
loader, the one its card calls). Each family's demo model and latent cache are built once and shared by its three
types.

AUDIT_GAP: PEFT's LoKr and LoHa layers decide their module dropout with ``torch.rand(1) > p`` on the host in every
training forward, a host tensor's read (no device sync on a GPU). On a CPU the audit tells host tensors from the
device's by watching factories with a function mode, which PyTorch does not run inside backward, so in a recomputed
checkpointed block that draw looks like a device read. The LoKr/LoHa runs of families that checkpoint by default
(wan, qwenimage, llava_next_video, ...) therefore train without the audit (with checkpointing: its recomputation of
the types' layers is what their drill and resume cover); every DoRA run and the families without checkpointing
audit every step. Plain LoRA trains every family elsewhere (tests/conformance and each family's e2e
test).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from helpers import ROOT
from snippets import card_block, check_block, check_card, user_inputs
from safetensors.torch import load_file

CONFIGS = ROOT / "recipes" / "configs"


def _demos() -> dict[str, tuple[str, str, str]]:
    """Each registry entry's default family -> (its demo config, the model folder and the data path inside the demo
    folder, as that config names them): every family is trained here, none listed by hand."""
    from family_cases import entry_defaults

    from dit_lora.registry import entry_for

    found = {}
    for family in entry_defaults():
        for config in entry_for(family).demo_configs:
            values = yaml.safe_load((CONFIGS / config).read_text())
            if values["family"] == family:
                model, data = (Path(values[k]).relative_to(".dit_lora_demo").as_posix()
                               for k in ("pretrained_model_name_or_path", "train_data_dir"))
                found[family] = (config, model, data)
    return found


#: family -> (demo config, model folder, data path inside the demo folder)
FAMILIES = _demos()
KINDS = ("dora", "lokr", "loha")
#: family -> the one type whose run also resumes and runs its card: each type once, LoKr on Sana (its card the
#: PEFT-loading one that `dit-lora push` uploads, and no gradient checkpointing: audited), LoHa on a family that
#: checkpoints (the recomputed LoKr/LoHa layers, PEFT's one LycorisLayer, resumed bit for bit), DoRA on FLUX.2 (a card
#: of diffusers' load_lora_weights)
FULL_PAIR = {"sana": "lokr", "qwenimage": "loha", "flux2": "dora"}
STEPS = 4


def test_every_registry_entry_has_its_demo_here():
    """Each registry entry's default family has a demo config training it, so it is trained here (a new family is
    never silently skipped)."""
    from family_cases import entry_defaults

    missing = sorted(set(entry_defaults()) - set(FAMILIES))
    assert not missing, f"no demo config trains the default family of {missing}: give its entry one (demo_configs)"


def test_every_type_resumes_and_runs_its_card_once():
    """FULL_PAIR names each type once, with and without gradient checkpointing among them (LoKr or LoHa, whose
    module dropout draws again in a recomputed block, on a family that checkpoints)."""
    from dit_lora.registry import get_spec

    assert set(FULL_PAIR) <= set(FAMILIES) and sorted(FULL_PAIR.values()) == sorted(KINDS)
    checkpointing = {(get_spec(f).info.gradient_checkpointing_default, k) for f, k in FULL_PAIR.items()}
    assert {c for c, _ in checkpointing} == {True, False}, FULL_PAIR
    assert {(True, "lokr"), (True, "loha")} & checkpointing, FULL_PAIR


def _args(family: str, kind: str, root: Path, out: Path, **extra) -> list[str]:
    config, model, data = FAMILIES[family]
    args = ["--config", str(CONFIGS / config), "--pretrained_model_name_or_path", str(root / family / model),
            "--train_data_dir", str(root / family / data), "--output_dir", str(out), "--lora_type", kind,
            "--max_train_steps", str(STEPS), "--checkpointing_steps", "2", "--checkpoints_total_limit", "2",
            "--report_to", "none",
            "--validation_steps", "1000", "--validation_prompt", "", "--skip_doctor", "true",
            "--demo_num_images", "4", "--train_batch_size", "2",
            "--mixed_precision", "no",  # fp32 base: the reloaded layers compare exactly (up to the fold's rounding)
            "--lr_scheduler", "constant", "--lr_warmup_steps", "0", "--inject_faults", "nan_loss@3"]
    if family != "sana":  # Sana's runs plan their memory as a user's do (each type traced); the others skip it
        args += ["--ignore_memory_plan", "true"]
    from dit_lora.registry import get_spec

    if get_spec(family).encoders is not None:  # a family without encoders (a video LLM) reads no latent cache
        args += ["--cache_dir", str(root / family / "cache")]
    for k, v in extra.items():
        args += [f"--{k}", str(v)]
    return args


def _train(args: list[str], on_step=None) -> dict:
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    AcceleratorState._reset_state(True)
    try:
        return train(parse_config(args), on_step=on_step)
    finally:
        AcceleratorState._reset_state(True)


def _adapter_tensors(out: Path) -> dict[str, torch.Tensor]:
    files = [out / "adapter_model.safetensors", out / "pytorch_lora_weights.safetensors"]
    (found,) = [f for f in files if f.is_file()]  # exactly one format: the other one is never left beside it
    return load_file(str(found))


def _saved_name(param: str) -> str:
    """A trainable parameter's key in PEFT's state dict (the adapter name dropped; DoRA's magnitude without .weight)."""
    name = re.sub(r"\.default(?=\.|$)", "", param)
    return name.replace(".lora_magnitude_vector.weight", ".lora_magnitude_vector")


def _layer_outputs_equal(trained: torch.nn.Module, reloaded: torch.nn.Module) -> int:
    """Each adapted Linear of ``trained`` and the same layer of ``reloaded`` give the same output on a random input;
    returns how many layers were compared."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = dict(reloaded.named_modules())
    compared = 0
    g = torch.Generator().manual_seed(0)
    for name, layer in trained.named_modules():
        if not isinstance(layer, BaseTunerLayer) or not isinstance(layer.get_base_layer(), torch.nn.Linear):
            continue
        other = layers[name]
        assert isinstance(other, BaseTunerLayer), name
        x = torch.randn(3, layer.get_base_layer().in_features, generator=g)
        with torch.no_grad():
            want, got = layer.eval()(x), other.eval()(x)
            base = layer.get_base_layer()(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
        compared += (want - base).abs().max() > 0  # a layer the training changed
    return compared


@pytest.fixture(scope="module")
def demo_roots(tmp_path_factory):
    """One demo folder per family (its model, data and latent cache), shared by the family's three types."""
    made: dict[str, Path] = {}

    def root(family: str) -> Path:
        if family not in made:
            made[family] = tmp_path_factory.mktemp(f"demo-{family}")
        return made[family]

    return root


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_type_trains_with_drill_fp32_masters_and_reloads(family, kind, demo_roots, tmp_path, monkeypatch):
    """One family's demo with one type (the module docstring)."""
    from dit_lora.modeling.adapters import is_adapter_weight
    from dit_lora.registry import get_spec

    demo_root = demo_roots(family)
    out = tmp_path / "out"
    states, held = {}, {}

    def record(step, model, optimizer):
        states[step] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        held["model"] = model

    if kind == "dora" or not get_spec(family).info.gradient_checkpointing_default:  # AUDIT_GAP (module docstring)
        monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")  # and no step of the type's layers waits for the device
    summary = _train(_args(family, kind, demo_root, out), on_step=record)
    monkeypatch.delenv("DIT_LORA_SYNC_DEBUG", raising=False)
    assert summary["status"] == "completed" and summary["adapter_type"] == kind
    assert summary["config"]["lora_type"] == kind and summary["skipped_steps"] == 1
    # the drill: the NaN loss at update 3 changed nothing; the others did
    assert all(torch.equal(states[3][n], states[2][n]) for n in states[2])
    assert not all(torch.equal(states[4][n], states[3][n]) for n in states[3])
    trainable = states[STEPS]
    marker = {"dora": "lora_magnitude_vector", "lokr": "lokr_", "loha": "hada_"}[kind]
    assert any(marker in n for n in trainable) and all(t.dtype == torch.float32 for t in trainable.values())
    # every trainable tensor in the checkpoint, the guard's snapshot and the adapter file
    final = out / f"checkpoint-{STEPS}"
    checkpointed = load_file(str(final / "trainable_weights.safetensors"))
    assert checkpointed.keys() == trainable.keys()
    assert all(torch.equal(checkpointed[n], trainable[n]) for n in trainable)
    snapshot = load_file(str(final / "guard_snapshot.safetensors"))
    assert {k.removeprefix("param/") for k in snapshot if k.startswith("param/")} == trainable.keys()
    moments = {k.split("/")[1] for k in snapshot if k.startswith("opt/")}  # Adam's, once a window was clean
    assert not moments or moments == trainable.keys()
    saved = _adapter_tensors(out)
    plain = {_saved_name(n) for n in trainable if is_adapter_weight(n)}
    assert {k.removeprefix("base_model.model.").removeprefix("transformer.") for k in saved} == plain
    backbone = {n for n in trainable if not is_adapter_weight(n)}  # DiT's class table, a video LLM's projector
    if backbone:
        assert set(load_file(str(out / "dit_lora_backbone.safetensors"))) == backbone
    # the reload: the family's own, PEFT's code for LoKr/LoHa (no diffusers file), every adapted layer equal
    spec = get_spec(family)
    from dit_lora.config import parse_config

    pipe = spec.adapter.load_pipeline_with_adapter(parse_config(_args(family, kind, demo_root, out)), out,
                                                   torch.device("cpu"))
    target = getattr(pipe, "transformer", None) or pipe.model
    assert _layer_outputs_equal(held["model"], target) > 0
    _family_consumer_checks(family, kind, out, held["model"])
    if FULL_PAIR.get(family) == kind:
        _resume_and_card(family, kind, demo_root, out, tmp_path)


def _resume_and_card(family: str, kind: str, demo_root: Path, out: Path, tmp_path: Path) -> None:
    """The reference ``out`` stopped after checkpoint-2 resumes bit for bit, and its card's snippet runs."""
    final = out / f"checkpoint-{STEPS}"
    # exact resume: the reference stopped after checkpoint-2 (its later files removed) continues bit for bit
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed, ignore=shutil.ignore_patterns(f"checkpoint-{STEPS}"))
    for leftover in [*resumed.glob("*.safetensors"), *resumed.glob("*.json")]:
        leftover.unlink()
    again = _train(_args(family, kind, demo_root, resumed, resume_from_checkpoint="latest"))
    assert again["steps"] == STEPS and again["steps_this_run"] == STEPS - 2 and again["skipped_steps"] == 1
    for name in ("trainable_weights.safetensors", "guard_snapshot.safetensors"):
        ref, got = load_file(str(final / name)), load_file(str(resumed / f"checkpoint-{STEPS}" / name))
        assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref), name
    ref, got = _adapter_tensors(out), _adapter_tensors(resumed)
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    # The card's whole snippet of this type runs as written (LoKr/LoHa: PEFT's loading), the adapter changing its
    # output; Sana's also as `dit-lora push` uploads it (LoKr/LoHa: the folder fetched with snapshot_download).
    data = demo_root / family / FAMILIES[family][2]
    if family == "sana":
        check_card(out, data, tmp_path / "card")
    else:
        code = card_block(out)
        check_block(code, tmp_path / "card", inputs=user_inputs(code, data, tmp_path), name=f"{family} {kind} card")


def _family_consumer_checks(family: str, kind: str, out: Path, trained: torch.nn.Module) -> None:
    """What a pair shows beyond the common checks: Sana's card names the type, and its PEFT snippet (LoKr, LoHa)
    loads every tensor; the video LLM's folder loads with ``PeftModel.from_pretrained``."""
    title = {"dora": "DoRA", "lokr": "LoKr", "loha": "LoHa"}[kind]
    if family == "sana":
        card = (out / "README.md").read_text()
        assert f"| adapter type | {title} (`--lora_type {kind}`)" in card
    if family == "sana" and kind != "dora":
        assert "pipe.load_lora_weights(" not in card and "not diffusers' `load_lora_weights`" in card
        marker = f"# {title}: loaded with PEFT"
        block = marker + card.split(marker, 1)[1].split("pipe.to(", 1)[0]
        from diffusers import SanaPipeline
        from peft.utils import get_peft_model_state_dict

        config = json.loads((out / "adapter_config.json").read_text())
        pipe = SanaPipeline.from_pretrained(config.get("base_model_name_or_path") or str(_model_of(out)))
        exec(block, {"pipe": pipe})
        loaded = get_peft_model_state_dict(pipe.transformer)
        saved = {k.removeprefix("base_model.model."): v for k, v in _adapter_tensors(out).items()}
        assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved)
    if family == "llava_next_video":
        from peft import PeftModel

        from dit_lora.registry import get_spec

        base = get_spec(family).adapter.arch.load_model(str(_model_of(out)), torch.float32)
        peft_model = PeftModel.from_pretrained(base, str(out))
        _layer_outputs_equal(trained, peft_model.base_model.model)


def _model_of(out: Path) -> Path:
    """The base model a run trained (its summary's config)."""
    return Path(json.loads((out / "train_summary.json").read_text())["config"]["pretrained_model_name_or_path"])
