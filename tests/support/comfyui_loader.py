"""Load a dit-lora adapter file with ComfyUI's own LoRA loader, on ComfyUI's own model class, and report what it did.

ComfyUI is not on PyPI and its code never enters this repository: the ``comfyui``-marked tests import a checkout
named by ``DIT_LORA_COMFYUI`` (extra packages in the site dir ``DIT_LORA_COMFYUI_DEPS``, optional) and skip without
it (``tools/comfyui_checkout.sh`` makes both).

ComfyUI runs in a **subprocess**: importing it parses arguments, configures logging, sets torch options and needs a
stub ``torchvision`` in ``sys.modules`` (``comfy/ldm/cosmos`` imports it; dit-lora does not depend on torchvision);
none of that may leak into the other tests of the session. The parent writes a JSON request, this same file run as a
script (:func:`_worker`) builds the model and applies the LoRA exactly as ComfyUI's ``LoraLoader`` node does
(``comfy.utils.load_torch_file`` -> ``comfy.sd.load_lora_for_models``: ``model_lora_keys_unet`` + ``convert_lora`` +
``load_lora`` + ``ModelPatcher.add_patches``), patches the weights on the CPU in fp32 (``ModelPatcher.patch_model``)
and writes back JSON plus a safetensors file of the applied deltas (patched weight minus the weight before).

Use::

    from comfyui_loader import comfyui, expected_deltas, load_in_comfyui
    pytestmark = comfyui            # the `comfyui` marker + skipped without DIT_LORA_COMFYUI (one test: @requires_comfyui)

    result = load_in_comfyui(adapter_file, unet_config={"image_model": "wan2.1", "model_type": "t2v", ...},
                             model_class="WAN21_T2V")
    assert result.unloaded == [] and result.not_patched == []   # "lora key not loaded", "NOT LOADED"
    for key, want in expected_deltas(load_file(adapter_file), result).items():  # B@A (alpha/r), by hand
        torch.testing.assert_close(result.deltas[key], want)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

CHECKOUT_ENV, DEPS_ENV = "DIT_LORA_COMFYUI", "DIT_LORA_COMFYUI_DEPS"
_PREFIX = "diffusion_model."

#: mark a test module ``pytestmark = comfyui``: the ``comfyui`` marker and a skip saying why when there is no checkout
comfyui = [
    pytest.mark.comfyui,
    pytest.mark.skipif(
        not os.environ.get(CHECKOUT_ENV),
        reason=f"needs a ComfyUI checkout: set {CHECKOUT_ENV}=<ComfyUI folder> (and {DEPS_ENV}=<site dir with einops "
        "torchsde scipy>); tools/comfyui_checkout.sh makes both",
    ),
]


def requires_comfyui(test: Any) -> Any:
    """Decorator form of :data:`comfyui` for one test function."""
    for mark in comfyui:
        test = mark(test)
    return test


@dataclass
class ComfyResult:
    """What ComfyUI did with one adapter file on one model (all keys in ComfyUI's names)."""

    model_class: str  #: the ``comfy.supported_models`` class used (``WAN21_T2V``, ``QwenImage``, ``Flux2`` ...)
    model_base: str  #: its ``comfy.model_base`` class (``WAN21``, ``QwenImage``, ``Flux2``, ``Lumina2`` ...)
    unet_config: dict[str, Any]  #: the model's ``unet_config`` after the class's own additions
    model_keys: dict[str, list[int]]  #: the model's state-dict keys (``diffusion_model.<name>``) and shapes
    unloaded: list[str]  #: file keys ComfyUI did not consume (its "lora key not loaded" warnings)
    not_patched: list[str]  #: patch targets that are not weights of the model (its "NOT LOADED" warnings)
    #: file module prefix -> (target weight key, offset ``[dim, start, length]`` or None for the whole weight, name
    #: of the function ComfyUI applies to the update first or None: Flux's ``norm_out`` swaps scale and shift)
    targets: dict[str, tuple[str, list[int] | None, str | None]]
    #: target weight key -> applied delta (weight after ``patch_model`` minus before), fp32
    deltas: dict[str, torch.Tensor] = field(repr=False)
    #: every LoRA module name ComfyUI accepts for this model (``model_lora_keys_unet``), same form as ``targets``
    key_map: dict[str, tuple[str, list[int] | None, str | None]] = field(default_factory=dict, repr=False)
    #: ComfyUI's other warnings: building the model, loading ``weights`` ("unet missing: ..."), patching (a LoRA
    #: of another shape than its weight: "ERROR lora <key> <error>", and that weight's delta stays 0)
    warnings: list[str] = field(default_factory=list)


def comfyui_checkout() -> tuple[Path, Path | None]:
    """The ComfyUI folder and the optional extra site dir from the environment; a clear error when unset."""
    root = os.environ.get(CHECKOUT_ENV)
    if not root or not (Path(root) / "comfy" / "lora.py").is_file():
        raise RuntimeError(f"{CHECKOUT_ENV}={root!r} is not a ComfyUI checkout (no comfy/lora.py)")
    deps = os.environ.get(DEPS_ENV)
    return Path(root), Path(deps) if deps else None


def load_in_comfyui(
    adapter: Path | str | dict[str, torch.Tensor],
    *,
    unet_config: dict[str, Any] | None = None,
    model_class: str | None = None,
    weights: dict[str, torch.Tensor] | None = None,
    seed: int = 0,
    strength: float = 1.0,
    timeout: float = 300.0,
) -> ComfyResult:
    """Load ``adapter`` (a safetensors file or a state dict) with ComfyUI's loader on ComfyUI's model and report.

    The model: ``model_class`` (a ``comfy.supported_models`` class name) built from ``unet_config`` (its model's
    constructor arguments, e.g. a tiny ``{"image_model": "qwen_image", "num_layers": 1, ...}``); without
    ``model_class`` ComfyUI picks the class matching ``unet_config`` (``model_detection.model_config_from_unet_config``);
    without ``unet_config`` ComfyUI detects everything from ``weights`` as for a checkpoint
    (``model_detection.model_config_from_unet``; its widths are often fixed per family, so tiny models want an
    explicit ``unet_config``). ``weights`` (ComfyUI names, with or without ``diffusion_model.``) are loaded with
    ``load_model_weights``; parameters they leave out are random normal from ``seed``. Runs in a subprocess.
    """
    root, deps = comfyui_checkout()
    with tempfile.TemporaryDirectory(prefix="comfyui_loader_") as tmp:
        work = Path(tmp)
        if not isinstance(adapter, (str, Path)):
            save_file({k: v.contiguous() for k, v in adapter.items()}, str(work / "adapter.safetensors"))
            adapter = work / "adapter.safetensors"
        if weights is not None:
            save_file({k.removeprefix(_PREFIX): v.contiguous() for k, v in weights.items()}, str(work / "w.st"))
        request = {
            "root": str(root),
            "deps": str(deps) if deps else None,
            "adapter": str(Path(adapter).resolve()),
            "unet_config": unet_config,
            "model_class": model_class,
            "seed": seed,
            "strength": strength,
            "weights": str(work / "w.st") if weights is not None else None,
            "out": str(work),
        }
        (work / "request.json").write_text(json.dumps(request))
        done = subprocess.run(
            [sys.executable, __file__, str(work / "request.json")],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": ""},
        )
        if done.returncode != 0:
            raise RuntimeError(f"the ComfyUI worker failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        out = json.loads((work / "result.json").read_text())
        for name in ("targets", "key_map"):
            out[name] = {k: (v[0], v[1], v[2]) for k, v in out[name].items()}
        return ComfyResult(**out, deltas=load_file(str(work / "deltas.safetensors")))


def _lokr_factor(state: dict[str, torch.Tensor], prefix: str, n: int) -> tuple[torch.Tensor, int | None]:
    """LoKr's factor ``w<n>`` (``lokr_w<n>`` or ``lokr_w<n>_a @ lokr_w<n>_b``) and the rank of a decomposed one."""
    full = state.get(f"{prefix}.lokr_w{n}")
    if full is not None:
        return full.double(), None
    if f"{prefix}.lokr_t{n}" in state:
        raise ValueError(f"{prefix}: a LoKr in CP form (lokr_t{n}) is not computed here")
    a, b = state[f"{prefix}.lokr_w{n}_a"].double(), state[f"{prefix}.lokr_w{n}_b"].double()
    return a @ b, b.shape[0]


def module_update(state: dict[str, torch.Tensor], prefix: str) -> torch.Tensor | None:
    """The update of one module of ``state`` at strength 1, as ComfyUI's ``weight_adapter`` computes it (float64):
    LoRA ``up @ down`` (flattened), scale ``alpha / rank`` with ``<x>.alpha`` else 1; LoKr ``kron(w1, w2)``, scale
    ``alpha / dim`` with ``.alpha`` and a decomposed factor (its rank; w2's when both) else 1; LoHa
    ``(w1_a @ w1_b) * (w2_a @ w2_b)``, scale ``alpha / rank`` with ``.alpha`` else 1; a ``.diff``: itself (the
    weight's whole update). None: no adapter there."""
    if f"{prefix}.diff" in state:
        return state[f"{prefix}.diff"].double()
    alpha = state.get(f"{prefix}.alpha")
    down = state.get(f"{prefix}.lora_A.weight", state.get(f"{prefix}.lora_down.weight"))
    up = state.get(f"{prefix}.lora_B.weight", state.get(f"{prefix}.lora_up.weight"))
    if down is not None and up is not None:
        scale = float(alpha) / down.shape[0] if alpha is not None else 1.0
        return scale * (up.flatten(1).double() @ down.flatten(1).double())
    if any(f"{prefix}.{n}" in state for n in ("lokr_w1", "lokr_w1_a")):
        (w1, dim1), (w2, dim2) = _lokr_factor(state, prefix, 1), _lokr_factor(state, prefix, 2)
        dim = dim2 if dim2 is not None else dim1
        scale = float(alpha) / dim if alpha is not None and dim is not None else 1.0
        return scale * torch.kron(w1, w2)
    if f"{prefix}.hada_w1_a" in state:
        if f"{prefix}.hada_t1" in state:
            raise ValueError(f"{prefix}: a LoHa in CP form (hada_t1) is not computed here")
        w1a, w1b, w2a, w2b = (state[f"{prefix}.hada_{n}"].double() for n in ("w1_a", "w1_b", "w2_a", "w2_b"))
        scale = float(alpha) / w1b.shape[0] if alpha is not None else 1.0
        return scale * (w1a @ w1b) * (w2a @ w2b)
    return None


def expected_deltas(
    state: dict[str, torch.Tensor], result: ComfyResult, strength: float = 1.0
) -> dict[str, torch.Tensor]:
    """The update each patched weight should get from the adapter ``state`` (the file's tensors), by hand.

    For each module ComfyUI mapped (``result.targets``): ``strength`` times the module's update (:func:`module_update`:
    LoRA ``up @ down``, LoKr ``kron(w1, w2)``, LoHa ``(w1_a w1_b) * (w2_a w2_b)``, each with ComfyUI's scale: 1
    without ``<x>.alpha``, as dit-lora writes them with the scale folded in), added into the slice of the target
    weight the offset names (ComfyUI maps diffusers' separate q/k/v onto a fused ``qkv`` weight for Flux and
    Z-Image); a ``<x>.diff_b`` is the bias's delta (not for a slice: ComfyUI cannot name that bias and reports it
    in ``not_patched``). Compare with ``result.deltas``.
    """
    shapes = result.model_keys
    out: dict[str, torch.Tensor] = {}
    for prefix, (target, offset, function) in result.targets.items():
        if function is not None:  # a reordering ComfyUI applies (Flux norm_out): compare such a module by hand
            continue
        delta = module_update(state, prefix)
        if delta is None:
            continue
        delta = strength * delta
        full = out.setdefault(target, torch.zeros(shapes[target], dtype=torch.float64))
        region = full if offset is None else full.narrow(offset[0], offset[1], offset[2])
        if delta.numel() != region.numel():
            raise ValueError(
                f"{prefix}: B@A has {tuple(delta.shape)}, ComfyUI's {target} {offset} {tuple(region.shape)}"
            )
        region += delta.reshape(region.shape)
        if f"{prefix}.diff_b" in state and offset is None:  # ComfyUI names no bias for a slice (load_lora)
            bias = target.removesuffix(".weight") + ".bias"
            out[bias] = (
                out.get(bias, torch.zeros(shapes[bias], dtype=torch.float64))
                + strength * state[f"{prefix}.diff_b"].double()
            )
    return {k: v.float() for k, v in out.items()}


def random_adapter_in_comfyui(model, family: str, targets: str, folder: Path, *, rank: int, alpha: int,
                              unet_config: dict[str, Any], model_class: str):
    """A random LoRA on ``model``'s ``targets`` (:func:`save_random_adapter`) loaded with ComfyUI's own loader into
    ``model_class`` of ``unet_config`` and checked (:func:`check_in_comfyui`); returns ``(result, expected)``."""
    path = save_random_adapter(model, family, targets, folder, rank=rank, alpha=alpha)
    return check_in_comfyui(path, unet_config=unet_config, model_class=model_class)


def save_random_adapter(model, family: str, targets: str, folder: Path, *, rank: int, alpha: int) -> Path:
    """A random LoRA (``lora_B`` drawn too, so every update is non-zero) on ``model``'s ``targets``, saved as
    ``family``'s adapter writes it (alpha/r folded into lora_B) in ``folder``; returns the file."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    from dit_lora.output.adapter import fold_lora_scale
    from dit_lora.registry import get_family

    config = {"r": rank, "lora_alpha": alpha, "target_modules": targets}
    model.add_adapter(LoraConfig(**config, init_lora_weights="gaussian"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.1)
    state, folded = fold_lora_scale(get_peft_model_state_dict(model), config)
    return Path(get_family(family).adapter.save_adapter(folder, state, folded))


def moved_adapter(model, kind: str, targets: list[str], *, rank: int, alpha: int):
    """``model`` with a ``kind`` adapter (LoRA, LoKr, LoHa, DoRA: dit-lora's ``add_adapter``) on ``targets``, every
    adapter weight moved (seeded), so every update is non-zero; returns the model."""
    from dit_lora.config import TrainConfig
    from dit_lora.modeling import trainables

    trainables.add_adapter(model, TrainConfig(lora_type=kind, rank=rank, lora_alpha=alpha).lora, targets=targets,
                           seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=g) * 0.05)
    return model


def written_export(model, out: Path, family: str, export) -> Path:
    """``model``'s adapter written in ``out`` as a run writes it (``write_adapter`` with ``family``'s saver, the
    strength folded), then ``export``'s ComfyUI file beside it; returns that file."""
    from types import SimpleNamespace

    from dit_lora.modeling import trainables
    from dit_lora.output.adapter import write_adapter
    from dit_lora.registry import get_family

    lora, backbone = trainables.split_trainable_state(model, [])
    spec = SimpleNamespace(adapter=get_family(family).adapter, adapter_extras=None)
    write_adapter(spec, out, lora, model.peft_config["default"].to_dict(), backbone, [])
    (comfy_file,) = export.write(out)
    return comfy_file


def check_in_comfyui(path: Path, *, unet_config: dict[str, Any], model_class: str):
    """Load the adapter file ``path`` with ComfyUI's own loader into ``model_class`` of ``unet_config``: checks that
    every tensor loaded, every module patched and no error, and that each patched weight's update is the file's
    (:func:`expected_deltas`); returns ``(result, expected)``."""
    result = load_in_comfyui(path, unet_config=unet_config, model_class=model_class)
    assert result.unloaded == [] and result.not_patched == [] and not any("ERROR" in w for w in result.warnings)
    expected = expected_deltas(load_file(str(path)), result)
    assert sorted(expected) == sorted(result.deltas)
    for key, want in expected.items():
        torch.testing.assert_close(result.deltas[key], want, atol=1e-5, rtol=1e-5)
    return result, expected


# ---- the worker: everything below runs only in the subprocess, with ComfyUI imported ----


def _import_comfy(root: str, deps: str | None) -> Any:
    """Import ComfyUI as its ``main.py`` would, minus argument parsing, on the CPU; returns the ``comfy`` package."""
    import importlib.machinery
    import types

    sys.path[:0] = [root] + ([deps] if deps else [])
    for name in ("torchvision", "torchvision.transforms"):  # comfy/ldm/cosmos imports it at module level
        stub = types.ModuleType(name)
        stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = stub
    import comfy.options

    comfy.options.enable_args_parsing(False)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.lora
    import comfy.model_detection
    import comfy.model_patcher
    import comfy.sd
    import comfy.supported_models
    import comfy.utils

    return comfy


def _build_model(comfy: Any, request: dict[str, Any], weights: dict[str, torch.Tensor] | None) -> Any:
    """ComfyUI's model (``model_base.*``) in fp32 on the CPU, as ``load_diffusion_model_state_dict`` builds it."""
    unet_config, name = request["unet_config"], request["model_class"]
    if name is not None:
        config = getattr(comfy.supported_models, name)(unet_config or {})
    elif unet_config is not None:
        config = comfy.model_detection.model_config_from_unet_config(unet_config, weights)
    else:
        config = comfy.model_detection.model_config_from_unet(weights, "")
    if config is None:
        raise SystemExit(f"ComfyUI has no model class for unet_config={unet_config} (class {name})")
    config.set_inference_dtype(torch.float32, None)
    model = config.get_model(weights or {}, "", device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(request["seed"])
    with torch.no_grad():  # ComfyUI's layers skip init (torch.empty): give every parameter a defined value
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator).to(param.dtype) * 0.1)
    if weights is not None:
        model.load_model_weights(dict(weights), "")
    return model


def _key_map(comfy: Any, model: Any) -> dict[str, Any]:
    """``model_lora_keys_unet``: ComfyUI's LoRA module name -> ``[target weight, offset, function name]``."""
    key_map = comfy.lora.model_lora_keys_unet(model, {})

    def entry(t: Any) -> list[Any]:
        if isinstance(t, str):
            return [t, None, None]
        return [t[0], list(t[1]) if t[1] is not None else None, t[2].__name__ if len(t) > 2 else None]

    return {k: entry(t) for k, t in sorted(key_map.items())}


def _worker(request_file: str) -> None:
    """Run one request (see :func:`load_in_comfyui`): write ``result.json`` and ``deltas.safetensors``."""
    import logging

    request = json.loads(Path(request_file).read_text())
    comfy = _import_comfy(request["root"], request["deps"])
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger().addHandler(Collect(level=logging.WARNING))
    weights = load_file(request["weights"]) if request["weights"] else None
    model = _build_model(comfy, request, weights)
    build_warnings, messages[:] = list(messages), []
    cpu = torch.device("cpu")
    patcher = comfy.model_patcher.ModelPatcher(model, load_device=cpu, offload_device=cpu)
    lora = comfy.utils.load_torch_file(request["adapter"], safe_load=True)  # what the LoraLoader node does
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    patched, _ = comfy.sd.load_lora_for_models(patcher, None, lora, request["strength"], 0.0)
    patched.patch_model(device_to=cpu)
    after = model.state_dict()
    deltas = {k: (after[k].float() - before[k].float()).contiguous() for k in patched.patches}
    key_map = _key_map(comfy, model)
    prefixes = {key.rsplit(".", n)[0] for key in comfy.lora_convert.convert_lora(lora) for n in (1, 2)}
    unloaded = sorted(m.split(": ", 1)[1] for m in messages if m.startswith("lora key not loaded: "))
    not_patched = sorted(m[len("NOT LOADED ") :] for m in messages if m.startswith("NOT LOADED "))
    others = [m for m in messages if not m.startswith(("lora key not loaded: ", "NOT LOADED "))]
    result = {
        "model_class": type(model.model_config).__name__,
        "model_base": type(model).__name__,
        "unet_config": json.loads(json.dumps(model.model_config.unet_config, default=repr)),
        "model_keys": {k: list(v.shape) for k, v in before.items()},
        "unloaded": unloaded,
        "not_patched": not_patched,
        "targets": {p: key_map[p] for p in sorted(prefixes & key_map.keys())},
        "key_map": key_map,
        "warnings": build_warnings + others,
    }
    save_file(deltas, str(Path(request["out"]) / "deltas.safetensors"))
    (Path(request["out"]) / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _worker(sys.argv[1])
