"""``--network_weights``: a run's adapter started from an existing one, at the strength it was saved with.

The file is read as a consumer reads it: a dit-lora or diffusers LoRA file (its ``lora_adapter_metadata`` giving
alpha and rank; none: scale 1, as diffusers assumes), a PEFT folder (``adapter_config.json``), or a kohya/ComfyUI-named
file converted to diffusers' names by the family's own pipeline class (``lora_state_dict``: diffusers' converters,
which fold kohya's ``.alpha`` into the weights or hand the alphas back). The update of every layer is kept: the one
factor that is linear in the scale (:data:`~dit_lora.output.adapter._SCALED_FACTOR`: LoRA/DoRA ``lora_B``, LoKr
``lokr_w1``, LoHa ``hada_w1_a``) is multiplied by the file's scale over the run's, so the run's first forward is the
loaded adapter's whatever --lora_alpha says. PEFT's ``set_peft_model_state_dict`` puts the tensors in; what does not
fit (another model, type or rank, layers the run does not adapt) is refused first in one paragraph naming the keys.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from dit_lora.core.errors import UserError
from dit_lora.output.adapter import _ADAPTER_PART, _SCALED_FACTOR, _peft_type, lora_scale

#: prefixes a saved adapter's keys carry before the model's own names (diffusers' component, PEFT's wrapper)
_PREFIXES = ("transformer.", "base_model.model.")
#: keys in diffusers'/PEFT's naming: PEFT's tensor names under the model's own module names
_PEFT_NAMED = re.compile(r"\.(?:lora_A|lora_B|lora_magnitude_vector|lokr_w[12]|hada_w[12]_[ab]|hada_t[12]|lokr_t2)\b")
#: what marks another trainer's naming (kohya's flattened names, ComfyUI's original-model prefix, down/up, alphas),
#: converted by the family's pipeline
_FOREIGN = re.compile(
    r"^(?:diffusion_model\.|model\.diffusion_model\.|lora_unet_|lora_te\d?_|lora_transformer_)"
    r"|\.lora_(?:down|up)\.|\.alpha$"
)
_KINDS = {"LORA": "lora", "LOKR": "lokr", "LOHA": "loha"}
_SHOWN = 4


def load_start_adapter(model: torch.nn.Module, source: str, pipeline_class: Any | None, lora_type: str) -> str:
    """Put the adapter at ``source`` into ``model``'s adapter ``default`` (``lora_type``: the run's --lora_type) at
    its saved strength; returns a line for the log. ``pipeline_class``: the family's diffusers pipeline (its
    converters read kohya/ComfyUI names), None for a model without one (the video LLMs: PEFT folders only)."""
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

    state, config, form = read_adapter(Path(source), pipeline_class)
    peft_configs: Any = model.peft_config  # PEFT's mixin puts it on the model
    run_config = peft_configs["default"].to_dict()
    expected = get_peft_model_state_dict(model, adapter_name="default")
    expected = {k: v for k, v in expected.items() if _ADAPTER_PART.search(k)}  # not trained backbone weights
    _check_fits(state, expected, source, lora_type)
    state = _rescaled(state, config, run_config)
    result = set_peft_model_state_dict(model, state, adapter_name="default")
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if _ADAPTER_PART.search(k)]
    if unexpected:  # _check_fits names every key the model lacks: PEFT agreeing is the expected case
        raise UserError(f"--network_weights `{source}`: keys that did not load: {', '.join(unexpected[:_SHOWN])}.")
    modules = {_ADAPTER_PART.split(k)[0] for k in state}
    fresh = {_ADAPTER_PART.split(k)[0] for k in expected} - modules
    return f"adapter started from {source} ({form}): {len(modules)} layers at its saved strength" + (
        f"; {len(fresh)} layers the file does not adapt start fresh" if fresh else ""
    )


def read_adapter(path: Path, pipeline_class: Any | None) -> tuple[dict[str, torch.Tensor], dict | None, str]:
    """``(tensors in PEFT's saved naming without prefix, the config its scales come from or None, the form read)``
    of the adapter at ``path`` (a file or a folder)."""
    if path.is_dir():
        if (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file():
            config = json.loads((path / "adapter_config.json").read_text())
            return _unprefixed(_load(path / "adapter_model.safetensors")), config, "PEFT adapter"
        files = sorted(path.glob("*.safetensors"))
        named = [f for f in files if f.name == "pytorch_lora_weights.safetensors"]
        if len(named or files) != 1:
            raise UserError(
                f"--network_weights `{path}` is a folder without one adapter file in it (found "
                f"{', '.join(f.name for f in files) or 'no .safetensors file'}). Give the adapter file itself."
            )
        path = (named or files)[0]
    if path.suffix != ".safetensors" or not path.is_file():
        raise UserError(
            f"--network_weights `{path}` is not a .safetensors file or an adapter folder. dit-lora reads adapters "
            "from safetensors only (never pickled .bin/.pt files); convert it, or give the folder a run wrote."
        )
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        keys, metadata = list(f.keys()), f.metadata() or {}
    if any(_PEFT_NAMED.search(k) for k in keys) and not any(_FOREIGN.search(k) for k in keys):
        return _unprefixed(_load(path)), _metadata_config(metadata), "diffusers/PEFT names"
    return _converted(path, pipeline_class)


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _unprefixed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The keys without diffusers' component prefix or PEFT's wrapper (one of them, as saved)."""
    out = {}
    for key, value in state.items():
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
                break
        out[key] = value
    return out


def _metadata_config(metadata: dict[str, str]) -> dict | None:
    """The transformer's LoRA config diffusers stores in the file (``lora_adapter_metadata``), or None."""
    packed = metadata.get("lora_adapter_metadata")
    if not packed:
        return None
    values = json.loads(packed)
    own = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("transformer.")}
    return own or values


def _converted(path: Path, pipeline_class: Any | None) -> tuple[dict[str, torch.Tensor], dict | None, str]:
    """A kohya/ComfyUI-named file in diffusers' names, by the pipeline's own ``lora_state_dict``."""
    convert = getattr(pipeline_class, "lora_state_dict", None)
    if convert is None:
        raise UserError(
            f"--network_weights `{path}` names its layers another trainer's way (kohya/ComfyUI), and this family's "
            "pipeline has no diffusers converter for that naming. Give a diffusers or PEFT adapter (a dit-lora run's "
            "output folder, or the file converted by the tool that wrote it)."
        )
    try:
        loaded = convert(str(path))
    except Exception as err:  # diffusers' converters raise anything on a file they do not know
        raise UserError(
            f"--network_weights `{path}`: {getattr(pipeline_class, '__name__', 'the pipeline')}.lora_state_dict could "
            f"not read it ({type(err).__name__}: {err}). It may be another model's adapter; give one of this model."
        ) from None
    state, alphas = (loaded[0], loaded[1] if len(loaded) > 1 else None) if isinstance(loaded, tuple) else (loaded, None)
    state = _unprefixed(dict(state))
    config = None
    if isinstance(alphas, dict) and alphas:  # kohya's alphas handed back, not folded: a scale per module
        ranks = {_ADAPTER_PART.split(k)[0]: v.shape[0] for k, v in state.items() if ".lora_A." in k}
        alpha_of = {k.removeprefix("transformer.").removesuffix(".alpha"): float(v) for k, v in alphas.items()}
        rank_pattern = {re.escape(module): rank for module, rank in ranks.items()}
        alpha_pattern = {re.escape(module): alpha_of.get(module, rank) for module, rank in ranks.items()}
        config = {"r": 1, "lora_alpha": 1, "rank_pattern": rank_pattern, "alpha_pattern": alpha_pattern}
    return state, config, "kohya/ComfyUI names, converted by diffusers"


def _kind_of(keys) -> str:
    """The adapter type the keys are of: lora, dora, lokr or loha."""
    keys = list(keys)
    if any(".lokr_" in k for k in keys):
        return "lokr"
    if any(".hada_" in k for k in keys):
        return "loha"
    return "dora" if any("lora_magnitude_vector" in k for k in keys) else "lora"


def _check_fits(state: dict, expected: dict, source: str, lora_type: str) -> None:
    """Refuse, in one paragraph, a file of another type, rank or model, or one adapting layers the run does not."""
    kind = _kind_of(state)
    if kind != lora_type:
        raise UserError(
            f"--network_weights `{source}` is a {kind} adapter and this run trains a {lora_type} one "
            f"(--lora_type). Set --lora_type {kind} to continue it."
        )
    foreign = [k for k in state if k not in expected]
    if foreign:
        raise UserError(
            f"--network_weights `{source}` adapts {len(foreign)} layer weight(s) this run does not "
            f"(e.g. {', '.join(foreign[:_SHOWN])}): it is another model's adapter, or it adapts other layers than "
            "--lora_layers. Give this model's adapter, or set --lora_layers to the layers it adapts."
        )
    shapes = [(k, tuple(v.shape), tuple(expected[k].shape)) for k, v in state.items() if v.shape != expected[k].shape]
    if shapes:
        ranks = {s[1][0] for s in shapes if ".lora_A." in s[0]}
        hint = f" Its rank is {sorted(ranks)[0]}: set --rank to it." if len(ranks) == 1 else ""
        shown = "; ".join(f"{k} {list(f)} (the run's {list(r)})" for k, f, r in shapes[:_SHOWN])
        raise UserError(
            f"--network_weights `{source}` does not fit this run's adapter: {len(shapes)} weight(s) of another "
            f"shape, e.g. {shown}.{hint or ' It is another model or rank; give an adapter of this model.'}"
        )


def _rescaled(state: dict, config: dict | None, run_config: dict) -> dict[str, torch.Tensor]:
    """The tensors with each layer's scaled factor times (the file's scale / the run's), so the update is the
    file's (a file without a config: scale 1, diffusers' reading of it)."""
    factor = _SCALED_FACTOR[_peft_type(run_config)][1]
    out = {}
    for key, value in state.items():
        if not factor.search(key):
            out[key] = value
            continue
        module = _ADAPTER_PART.split(key)[0]
        ratio = (lora_scale(config, module) if config else 1.0) / lora_scale(run_config, module)
        out[key] = value if ratio == 1.0 else (value.double() * ratio).to(value.dtype)
    return out
