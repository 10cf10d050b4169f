"""Writing the trained adapter (finite-checked, atomic) and loading it back into a pipeline."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from dit_lora.config.adapter_types import TYPES, type_of_peft_config
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import settle_files, write_json_atomic
from dit_lora.modeling.adapters import is_adapter_weight
from dit_lora.output.export import export_metadata, export_target, written_by_export
from dit_lora.output.names import (
    ADAPTER_FILE,
    ADAPTER_FILES,
    ADAPTER_INDEX_FILE,
    BACKBONE_FILE,
    CLASSES_FILE,
    PEFT_ADAPTER_FILE,
    PEFT_CONFIG_FILE,
)

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class NonFiniteWeightsError(RuntimeError):
    """Raised instead of writing a file that would contain NaN or Inf."""


def assert_finite(tensors: dict[str, torch.Tensor], what: str) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the first non-finite tensors."""
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise NonFiniteWeightsError(
            f"{what}: {len(bad)} tensor(s) contain NaN/Inf (e.g. {', '.join(bad[:3])}); nothing was written."
        )


def _plain_name(name: str) -> str:
    # PEFT moves a targeted layer's own weights under `.base_layer`; store the name the plain model uses.
    return name.replace(".base_layer.", ".")


_LORA_B = re.compile(r"\.lora_(?:embedding_)?B(?:\.|$)")  # lora_B.weight / .bias, lora_embedding_B

#: per adapter type (PEFT's ``peft_type``): the config key of alpha, and the one factor of each layer's update
#: that carries the scale (the update is linear in it): LoRA/DoRA ``lora_B``; LoKr ``kron(w1, w2)``: ``lokr_w1``, or
#: ``lokr_w1_a`` when w1 is decomposed (``lokr_w1_a @ lokr_w1_b``); LoHa ``(w1_a w1_b) * (w2_a w2_b)``: ``hada_w1_a``
#: (a factor of rebuild1 in the Conv CP form too)
_SCALED_FACTOR = {
    "LORA": ("lora_alpha", _LORA_B),
    "LOKR": ("alpha", re.compile(r"\.lokr_w1(?:_a)?(?:\.|$)")),
    "LOHA": ("alpha", re.compile(r"\.hada_w1_a(?:\.|$)")),
}
_ADAPTER_PART = re.compile(r"\.(?:lora|lokr|hada)_")  # where a key's module name ends


def _peft_type(lora_config: dict) -> str:
    """``LORA`` / ``LOKR`` / ``LOHA`` from a config dict (PEFT's ``to_dict`` or ``adapter_config.json``; no
    ``peft_type``: LoRA)."""
    kind = str(getattr(lora_config.get("peft_type"), "value", lora_config.get("peft_type") or "LORA")).upper()
    if kind not in _SCALED_FACTOR:
        raise UserError(f"adapter type {kind} is not one dit-lora writes (LoRA, DoRA, LoKr, LoHa).")
    return kind


def lora_scale(lora_config: dict, module: str) -> float:
    """The scale PEFT applies to ``module``'s adapter output: alpha / r, or alpha / sqrt(r) with ``use_rslora``
    (LoRA/DoRA; LoKr and LoHa scale by alpha / r).

    ``rank_pattern`` / ``alpha_pattern`` are matched as PEFT's ``LoraModel`` / ``LycorisTuner`` match them.
    """
    from peft.utils.other import get_pattern_key

    alpha_key = _SCALED_FACTOR[_peft_type(lora_config)][0]
    rank_pattern: dict[str, int] = lora_config.get("rank_pattern") or {}
    alpha_pattern: dict[str, float] = lora_config.get("alpha_pattern") or {}
    rank = rank_pattern.get(get_pattern_key(list(rank_pattern), module), lora_config["r"])
    alpha = alpha_pattern.get(get_pattern_key(list(alpha_pattern), module), lora_config[alpha_key])
    return alpha / (math.sqrt(rank) if lora_config.get("use_rslora") else rank)


def fold_lora_scale(lora_state: dict[str, torch.Tensor], lora_config: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """The adapter rewritten to load at scale 1.0: the one factor of each layer's update that is linear in it times
    the layer's scale, and the config's alpha set to the rank (``alpha_pattern`` to ``rank_pattern``, ``use_rslora``
    off). The factor per type (``peft_type`` of the config): LoRA and DoRA ``lora_B`` (weight and bias); LoKr
    ``lokr_w1`` (``lokr_w1_a`` when w1 is decomposed); LoHa ``hada_w1_a``.

    Why: the trained strength ``alpha / r`` otherwise lives only in the config. diffusers (>= 0.34) reads it from
    the safetensors metadata and PEFT from ``adapter_config.json``, but ComfyUI, older diffusers and other
    consumers read ``*.alpha`` keys or nothing and then apply scale 1.0 (alpha = rank): the adapter loads at the
    wrong strength. With the scale inside the factor, ``B' A x = (alpha / r) B A x`` (LoKr: ``kron(s w1, w2) =
    s kron(w1, w2)``; LoHa: ``(s w1_a w1_b) * (w2_a w2_b)``) is the trained update in every consumer, whether it
    reads the stored alpha (= rank) or assumes it. Exact up to one rounding of each scaled entry (none when the
    scale is a power of two); DoRA's magnitude vector is not touched and its norm is of the same ``W + B' A``.

    Only exported adapters are folded: training checkpoints keep the unfolded weights the optimizer state
    belongs to. New tensors are returned; the inputs, which may share storage with the live parameters, are
    never modified.
    """
    alpha_key, factor = _SCALED_FACTOR[_peft_type(lora_config)]
    folded = {}
    for key, value in lora_state.items():
        scale = lora_scale(lora_config, _ADAPTER_PART.split(key)[0]) if factor.search(key) else 1.0
        folded[key] = value if scale == 1.0 else (value.double() * scale).to(value.dtype)
    config = dict(lora_config, alpha_pattern=dict(lora_config.get("rank_pattern") or {}))
    config[alpha_key] = lora_config["r"]
    if "use_rslora" in lora_config or alpha_key == "lora_alpha":
        config["use_rslora"] = False
    return folded, config


def stable_config(value: Any) -> Any:
    """``value`` (an adapter config dict, at any depth) with every set as a sorted list and every dict's keys in
    sorted order.

    Why: PEFT keeps ``target_modules`` (and ``exclude_modules``) as a set, and both diffusers' savers (the
    ``lora_adapter_metadata`` of the safetensors file) and ``PeftConfig.save_pretrained`` write it as ``list(set)``:
    an order that follows the process's string hash seed. The same adapter then had another ``sha256`` in each
    process (a resumed run's file differed from the uninterrupted one's, though every tensor was equal); sorted,
    the same adapter is the same bytes.
    """
    if isinstance(value, (set, frozenset)):
        return sorted((stable_config(v) for v in value), key=str)
    if isinstance(value, dict):
        return {k: stable_config(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return type(value)(stable_config(v) for v in value)
    return value


def adapter_file_name(spec: FamilySpec, lora_type: str) -> str:
    """The adapter file a run of ``spec`` with ``--lora_type lora_type`` writes: the family's own (diffusers' file or
    PEFT's), or PEFT's ``adapter_model.safetensors`` for a type diffusers' ``load_lora_weights`` does not read."""
    return spec.info.adapter_weight_name if TYPES[lora_type].diffusers_loads else PEFT_ADAPTER_FILE


def write_adapter(
    spec: FamilySpec,
    output_dir: Path,
    lora_state: dict,
    lora_config: dict,
    backbone: dict,
    backbone_patterns: list[str],
    *,
    comps=None,
    cfg: TrainConfig | None = None,
    named: bool = True,
) -> list[Path]:
    """Save adapter (and backbone) into ``output_dir`` atomically; every tensor is checked finite first.

    The scale is folded into one factor first (:func:`fold_lora_scale`: ``lora_B``, ``lokr_w1``, ``hada_w1_a``), so
    the files load at the trained strength in every consumer. LoRA and DoRA are written by the family's saver
    (diffusers' file, or PEFT's where the family's consumer has no LoRA loader); LoKr and LoHa in PEFT's format
    (:func:`save_peft_adapter`) for every family, since diffusers' ``load_lora_weights`` does not read them. With the run's ``cfg``, a
    PEFT-format adapter names its base model in ``adapter_config.json``; with its ``comps`` too, a family with an
    ``adapter_extras`` component adds the files that depend on the run. ``named``: with the run's ``--output_name``,
    each adapter file also as ``NAME...safetensors`` (:func:`write_named_copies`).
    """
    assert_finite(lora_state, "LoRA adapter")
    assert_finite(backbone, "backbone weights")
    lora_state, lora_config = fold_lora_scale(lora_state, stable_config(lora_config))  # sets sorted: same bytes
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-adapter-", dir=output_dir))
    stale = _previous_adapter_files(output_dir)
    written = []
    try:
        if TYPES[type_of_peft_config(lora_config)].diffusers_loads:
            spec.adapter.save_adapter(staging, lora_state, lora_config)
            if cfg is not None and (staging / PEFT_CONFIG_FILE).is_file():
                # a family whose consumer has no LoRA loader saved PEFT's format: its base model named there too
                set_peft_base_model(staging, cfg.model.pretrained_model_name_or_path)
        else:  # LoKr/LoHa: diffusers' load_lora_weights reads LoRA files only; PEFT's own format, every family
            save_peft_adapter(
                staging, lora_state, lora_config, cfg.model.pretrained_model_name_or_path if cfg else None
            )
        extras = spec.adapter_extras
        if extras is not None and comps is not None and cfg is not None:
            extras.save_adapter_extras(staging, comps, cfg.family_options)
        if backbone:
            save_file(
                {_plain_name(k): v for k, v in backbone.items()},
                str(staging / BACKBONE_FILE),
                metadata={"dit_lora_backbone_patterns": json.dumps(backbone_patterns), "format": "pt"},
            )
        for f in sorted(staging.iterdir()):
            settle_files(f)  # the umask's mode (the savers' safetensors are 0600), the metadata in sorted order
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(f, output_dir / f.name)
            written.append(output_dir / f.name)
        if named and cfg is not None and cfg.training.output_name:  # --output_name's copies (EMA: its own writer's)
            written += write_named_copies(output_dir, written, cfg.training.output_name)
        if not backbone and (output_dir / BACKBONE_FILE).exists():
            (output_dir / BACKBONE_FILE).unlink()  # a stale backbone from an overwritten run would mislead loaders
        for path in stale:  # an overwritten run's other adapter files (its index, per-expert and export files)
            if path not in written and path.exists():
                path.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


#: the stems of the adapter files a named copy replaces by ``--output_name`` (``<stem>_comfyui.safetensors`` too)
ADAPTER_STEMS = tuple(name.removesuffix(".safetensors") for name in ADAPTER_FILES)


def named_copy(name: str, output_name: str) -> str | None:
    """The file name of ``name``'s copy under ``--output_name`` (``pytorch_lora_weights_comfyui.safetensors`` ->
    ``NAME_comfyui.safetensors``), None for a file that is not an adapter's."""
    for stem in ADAPTER_STEMS:
        if name.endswith(".safetensors") and (name == stem + ".safetensors" or name.startswith(stem + "_")):
            return output_name + name[len(stem) :]
    return None


def write_named_copies(output_dir: Path, written: list[Path], output_name: str) -> list[Path]:
    """``--output_name``: each adapter file of ``written`` also as ``NAME...safetensors`` (ComfyUI users pick LoRA
    files by name), the same tensors and metadata plus the export marker (so a later run replaces or removes it, and a
    user's own file of that name is refused: :func:`~dit_lora.output.export.export_target`); atomic."""
    from safetensors import safe_open

    copies = []
    for path in written:
        target_name = named_copy(path.name, output_name)
        if target_name is None:
            continue
        target = export_target(output_dir, target_name)
        with safe_open(str(path), framework="pt") as handle:
            metadata = {**(handle.metadata() or {}), **export_metadata("named", path.name)}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 - a safe_open handle is not iterable
        staged = output_dir / f".tmp-{target_name}"
        try:
            save_file(tensors, str(staged), metadata=dict(sorted(metadata.items())))
            settle_files(staged)
            os.replace(staged, target)
        finally:  # a full disk or a signal mid-write leaves no half-written copy behind
            staged.unlink(missing_ok=True)
        copies.append(target)
    return copies


def _previous_adapter_files(output_dir: Path) -> list[Path]:
    """What an earlier run left in ``output_dir`` that a new adapter must replace or remove: its adapter index, the
    files the index lists, and export files dit-lora wrote (a user's own files are never listed)."""
    found = [output_dir / ADAPTER_INDEX_FILE] if (output_dir / ADAPTER_INDEX_FILE).exists() else []
    try:
        found += [output_dir / e["file"] for e in adapter_index(output_dir) or []]
    except UserError:
        pass  # a damaged index: the index itself goes, the files it may name stay
    found += [p for p in output_dir.glob("*.safetensors") if p not in found and written_by_export(p)]
    # the other format's adapter of an overwritten run (a LoRA's diffusers file beside a new LoKr's PEFT files, or
    # the reverse): a loader would take the stale one
    found += [output_dir / n for n in (*ADAPTER_FILES, PEFT_CONFIG_FILE) if (output_dir / n).exists()]
    return found


def save_peft_adapter(output_dir: Path, lora_state: dict, lora_config: dict, base_model: str | None) -> Path:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` as ``PeftModel.save_pretrained`` does.

    Keys get PEFT's ``base_model.model.`` prefix, so ``PeftModel.from_pretrained(base, output_dir)``
    loads the adapter as well as :func:`load_adapter` does.
    """
    import inspect

    config_class = _config_class(lora_config)
    params = inspect.signature(config_class).parameters
    config = config_class(**{k: v for k, v in lora_config.items() if k in params})
    config.base_model_name_or_path = base_model
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    _write_peft_config(output_dir, config.to_dict())
    state = {f"base_model.model.{k}": v for k, v in lora_state.items()}
    save_file(state, str(Path(output_dir) / PEFT_ADAPTER_FILE), metadata={"format": "pt"})
    return Path(output_dir) / PEFT_ADAPTER_FILE


def _config_class(lora_config: dict):
    """PEFT's config class of a config dict: ``LoraConfig`` (LoRA, DoRA), ``LoKrConfig`` or ``LoHaConfig``."""
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    return {"LORA": LoraConfig, "LOKR": LoKrConfig, "LOHA": LoHaConfig}[_peft_type(lora_config)]


def set_peft_base_model(output_dir: Path, base_model: str | None) -> None:
    """Name ``base_model`` in the ``adapter_config.json`` :func:`save_peft_adapter` wrote into ``output_dir``."""
    config = json.loads((Path(output_dir) / PEFT_CONFIG_FILE).read_text())
    config["base_model_name_or_path"] = base_model
    _write_peft_config(output_dir, config)


def _write_peft_config(output_dir: Path, config: dict) -> None:
    """``adapter_config.json`` as ``PeftConfig.save_pretrained`` writes it (indented, keys sorted), with its sets
    in sorted order (:func:`stable_config`; PEFT writes ``list(set)``, an order that changes between processes)."""
    text = json.dumps(stable_config(config), indent=2, sort_keys=True)
    (Path(output_dir) / PEFT_CONFIG_FILE).write_text(text)


def adapter_folder(output_dir: str | Path) -> Path:
    """A local output folder, or the files of a Hub repo id that holds a dit-lora adapter."""
    path = Path(output_dir)
    if path.is_dir() or path.exists():
        return path
    text = str(output_dir)
    if text.count("/") == 1 and not text.startswith((".", "/")):
        from huggingface_hub import snapshot_download

        try:
            # the index and the per-expert LoRA files it may list (pytorch_lora_weights_*.safetensors)
            return Path(
                snapshot_download(
                    text,
                    allow_patterns=[
                        *ADAPTER_FILES,
                        PEFT_CONFIG_FILE,
                        BACKBONE_FILE,
                        CLASSES_FILE,
                        ADAPTER_INDEX_FILE,
                        "pytorch_lora_weights_*.safetensors",
                    ],
                )
            )
        except Exception as err:
            raise UserError(f"Could not fetch the adapter repo `{text}` from the Hub ({type(err).__name__}: {err}).")
    raise UserError(f"`{output_dir}` does not exist. Point load_adapter at a finished dit-lora output_dir.")


def _load_peft_adapter(model, folder: Path, adapter_name: str | None) -> None:
    """Inject a PEFT-format adapter (adapter_config.json + adapter_model.safetensors) into ``model``.

    Any type (LoRA, DoRA, LoKr, LoHa: ``peft_type`` of the config picks PEFT's class). Every adapter weight of the
    file must land: a key mismatch is an error here, not a warning.
    """
    from peft import inject_adapter_in_model
    from peft.utils import set_peft_model_state_dict

    name = adapter_name or "default"
    config_file = folder / PEFT_CONFIG_FILE
    config = _config_class(json.loads(config_file.read_text())).from_pretrained(str(folder))
    state = load_file(str(folder / PEFT_ADAPTER_FILE))
    assert_finite(state, str(folder / PEFT_ADAPTER_FILE))
    prefix = "base_model.model."
    state = {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in state.items()}
    if hasattr(model, "add_adapter"):
        model.add_adapter(config, adapter_name=name)  # diffusers' PeftAdapterMixin: records peft_config
    else:
        inject_adapter_in_model(config, model, adapter_name=name)
    # torch's load_state_dict result (missing_keys, unexpected_keys); peft annotates it as the name "namedtuple"
    result: Any = set_peft_model_state_dict(model, state, adapter_name=name)
    unexpected = [k for k in result.unexpected_keys if is_adapter_weight(k)]
    missing = [k for k in result.missing_keys if is_adapter_weight(k) and (f".{name}." in k or k.endswith(f".{name}"))]
    if unexpected or missing:
        example = (unexpected or missing)[0]
        raise UserError(
            f"{folder / PEFT_ADAPTER_FILE} does not fit this pipeline's transformer ({len(unexpected)} unexpected, "
            f"{len(missing)} missing adapter weights, e.g. {example}); it was trained on a different base model."
        )


#: the keyword arguments of ``load_lora_weights`` an adapter index may set
_INDEX_KWARGS = {"load_into_transformer_2": bool}


def adapter_index(output_dir: Path) -> list[dict] | None:
    """The entries of ``dit_lora_adapter_files.json`` in ``output_dir`` (None without one): ``file`` (a plain file
    name in that folder), ``label`` and ``load_kwargs`` (only the keys of :data:`_INDEX_KWARGS`). A damaged or
    foreign index is refused in one paragraph rather than followed (never outside the folder)."""
    path = Path(output_dir) / ADAPTER_INDEX_FILE
    if not path.is_file():
        return None
    try:
        entries = json.loads(path.read_text())["files"]
        out = []
        for e in entries:
            name, label, kwargs = str(e["file"]), str(e["label"]), dict(e.get("load_kwargs") or {})
            if Path(name).name != name or name in ("", ".", "..") or not name.endswith(".safetensors"):
                raise ValueError(f"file {name!r} is not a .safetensors file name inside the folder")
            if not (Path(output_dir) / name).is_file():
                raise ValueError(f"{name} is missing")
            if any(k not in _INDEX_KWARGS or not isinstance(v, _INDEX_KWARGS[k]) for k, v in kwargs.items()):
                raise ValueError(f"load_kwargs {kwargs} (allowed: {', '.join(_INDEX_KWARGS)})")
            out.append({"file": name, "label": re.sub(r"[^A-Za-z0-9_]", "_", label), "load_kwargs": kwargs})
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(
            f"`{path}` cannot be used ({err}). It lists the adapter files of a dit-lora run; restore it "
            "from the run, or delete it to load only pytorch_lora_weights.safetensors."
        ) from None
    return out


def write_adapter_index(output_dir: Path, entries: list[dict]) -> Path:
    """Write ``dit_lora_adapter_files.json`` (entries as :func:`adapter_index` reads them), atomically."""
    path = Path(output_dir) / ADAPTER_INDEX_FILE
    write_json_atomic(path, {"files": entries})
    return path


def load_adapter_files(pipe, output_dir: str | Path, adapter_name: str | None = None):
    """Load a dit-lora output folder (or Hub repo id) into ``pipe``: the LoRA, plus backbone weights.

    ``pipe`` is a diffusers pipeline, or a model itself (a transformers video LLM: the PEFT adapter
    goes into it, and the trained projector weights from ``dit_lora_backbone.safetensors``). A
    pipeline that must be reshaped first (DiT's class embedding) is reshaped by its family:
    ``dit_lora.load_adapter`` (:mod:`dit_lora.api`) does both.

    * Pipelines with ``load_lora_weights`` (Sana, CogVideoX): exactly ``pipe.load_lora_weights(output_dir)``
      (rank and alpha = rank from the metadata, the scale folded into lora_B), then any
      ``dit_lora_backbone.safetensors``.
    * Pipelines without a LoRA loader whose transformer loads diffusers' file (``HunyuanVideo15Pipeline``):
      ``pipe.transformer.load_lora_adapter(output_dir, prefix="transformer")``.
    * Pipelines without a LoRA loader (``DiTPipeline``) and transformers models: the PEFT-format adapter
      is injected at its trained rank/alpha, then the backbone weights are copied in.
    """
    output_dir = adapter_folder(output_dir)
    index = adapter_index(output_dir)
    if hasattr(pipe, "load_lora_weights") and index:
        for entry in index:  # several files (Wan A14B: one per expert), each loaded where the run says
            name = f"{adapter_name}_{entry['label']}" if adapter_name else None
            pipe.load_lora_weights(
                str(output_dir),
                weight_name=entry["file"],
                adapter_name=name,
                use_safetensors=True,
                **entry["load_kwargs"],
            )
    elif hasattr(pipe, "load_lora_weights") and (output_dir / ADAPTER_FILE).is_file():
        pipe.load_lora_weights(
            str(output_dir), weight_name=ADAPTER_FILE, adapter_name=adapter_name, use_safetensors=True
        )
    elif hasattr(getattr(pipe, "transformer", None), "load_lora_adapter") and (output_dir / ADAPTER_FILE).is_file():
        # a pipeline without a LoRA loader (HunyuanVideo 1.5's): diffusers' file, into its transformer
        pipe.transformer.load_lora_adapter(
            str(output_dir), weight_name=ADAPTER_FILE, prefix="transformer", adapter_name=adapter_name,
            use_safetensors=True,
        )  # fmt: skip
    elif (output_dir / PEFT_ADAPTER_FILE).is_file() and (output_dir / PEFT_CONFIG_FILE).is_file():
        _load_peft_adapter(_target_model(pipe), output_dir, adapter_name)
    else:
        wanted = ADAPTER_FILE if hasattr(pipe, "load_lora_weights") else f"{PEFT_ADAPTER_FILE} and {PEFT_CONFIG_FILE}"
        raise UserError(f"No {wanted} in `{output_dir}`. Point load_adapter at a finished dit-lora output_dir.")
    backbone_file = output_dir / BACKBONE_FILE
    if backbone_file.is_file():
        state = load_file(str(backbone_file))
        assert_finite(state, str(backbone_file))
        model = _target_model(pipe)
        params = {_plain_name(n): p for n, p in model.named_parameters()}
        missing = [k for k in state if k not in params]
        if missing:
            raise UserError(
                f"{backbone_file} has weights the pipeline's transformer lacks (e.g. {missing[0]}); it was trained "
                "on a different base model."
            )
        wrong = [k for k, v in state.items() if tuple(v.shape) != tuple(params[k].shape)]
        if wrong:
            raise UserError(
                f"{backbone_file}: {wrong[0]} has shape {tuple(state[wrong[0]].shape)} but the pipeline's is "
                f"{tuple(params[wrong[0]].shape)}; it was trained on a different base model."
            )
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].dtype))
    return pipe


def attach_adapter(spec: FamilySpec | None, pipe, adapter_dir: str | Path, adapter_name: str | None = None):
    """Load a saved adapter into the consumer ``pipe``, fitted first by ``spec.fitting`` when the family has one
    (``dit_lora.load_adapter`` and each family's ``load_pipeline_with_adapter``; None: a family without fitting)."""
    folder = adapter_folder(adapter_dir)
    fitting = spec.fitting if spec is not None else None
    if fitting:
        fitting.prepare_pipeline_for_adapter(pipe, folder)
    return load_adapter_files(pipe, folder, adapter_name)


def _target_model(pipe) -> torch.nn.Module:
    """The module an adapter goes into: a pipeline's transformer, or the model itself."""
    if isinstance(pipe, torch.nn.Module):
        return pipe
    return pipe.transformer
