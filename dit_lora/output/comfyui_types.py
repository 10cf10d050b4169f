"""Which adapter types ComfyUI's LoRA loader reproduces, and the tensors it reads for each (no family named here).

The families' ComfyUI exports (Wan's and FLUX.2's through :class:`RenamedExport` and a table of names, their
``comfyui.json``; Z-Image's and Qwen-Image's through :class:`PrefixedExports`) rename each adapter *layer* to
ComfyUI's name for the model weight; this module says what the tensors of one layer are called on either side, and
writes the file. Checked against
ComfyUI's source at commit 618b803d314a525faca8f8163d85eaa9ebc1d774 (Jan 2026; ``comfy/lora.py`` ``load_lora``,
``comfy/weight_adapter/{lora,lokr,loha,base}.py``):

* **LoRA** (``lora.py``): ``<x>.lora_A.weight`` / ``<x>.lora_B.weight`` (``up @ down``), ``<x>.diff_b`` a bias
  difference; scale ``alpha / rank`` with an ``<x>.alpha`` tensor, else 1.0.
* **LoKr** (``lokr.py``): ``<x>.lokr_w1`` or ``lokr_w1_a @ lokr_w1_b``, ``<x>.lokr_w2`` or ``lokr_w2_a @
  lokr_w2_b`` (``lokr_t2``: the CP form of a convolution), update ``kron(w1, w2)``; scale ``alpha / dim`` only when
  ``.alpha`` exists *and* a factor is decomposed (``dim`` = that factor's rank), else 1.0. PEFT's ``LoKrLayer``
  names its parameters exactly so (``get_peft_model_state_dict``: ``<x>.lokr_w1`` ...) and applies
  ``kron(w1, w2) * alpha / r`` (``peft/tuners/lokr/layer.py`` ``get_delta_weight``, ``make_kron``).
* **LoHa** (``loha.py``): ``<x>.hada_w1_a/_b``, ``<x>.hada_w2_a/_b`` (``hada_t1/_t2``: CP), update ``(w1_a @ w1_b) *
  (w2_a @ w2_b)``; scale ``alpha / rank`` with ``.alpha``, else 1.0. PEFT's ``LoHaLayer``: the same names and
  product, times ``alpha / r``.

dit-lora folds ``alpha / r`` into one factor of every layer (``fold_lora_scale``: ``lora_B``, ``lokr_w1`` or
``lokr_w1_a``, ``hada_w1_a``) and writes no ``.alpha``, so ComfyUI's scale is 1.0 and its update is PEFT's.

**DoRA is not reproduced** (:func:`dora_refusal`). ComfyUI reads a magnitude only as ``<x>.dora_scale`` and applies
``weight_decompose`` (``base.py``): for a ``dora_scale`` of shape ``(out, 1)`` it divides ``W + dW`` by the row norms
of the *base* weight ``W`` (ComfyUI PR 15458, open, calls this a bug), for ``(1, in)`` by the column norms of
``W + dW``; a 1-D ``dora_scale`` broadcasts wrongly (issue 12938). PEFT's DoRA (``LoraConfig(use_dora=True)``,
``peft/tuners/lora/dora.py``) scales the rows of ``W + dW`` by ``m / ||W + dW||_row``. No ``dora_scale`` makes the
first equal to the last without the base model's weights (``m * ||W|| / ||W + dW||``), and a file holding that
would be wrong again once ComfyUI fixes its norm; PEFT's ``lora_magnitude_vector`` under any name is simply left
out by ComfyUI ("lora key not loaded") and the rest loads as a plain LoRA of the wrong strength per row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from dit_lora.core.datafile import DataFileError, path_of, read
from dit_lora.core.errors import UserError
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions

LORA, DORA, LOKR, LOHA = "lora", "dora", "lokr", "loha"
#: the types a ComfyUI export reproduces (an ``Exports``' ``export_types``: ``dit-lora export`` refuses the others)
EXPORTED_TYPES = (LORA, LOKR, LOHA)
#: where ComfyUI's reading of each type was checked (the module docstring)
COMFYUI_COMMIT = "618b803d314a525faca8f8163d85eaa9ebc1d774"

#: PEFT's tensor suffix (``get_peft_model_state_dict`` and diffusers' savers) -> (type, ComfyUI's suffix); DoRA's
#: magnitude has none (module docstring)
SUFFIXES: dict[str, tuple[str, str | None]] = {
    "lora_A.weight": (LORA, "lora_A.weight"),
    "lora_B.weight": (LORA, "lora_B.weight"),
    "lora_B.bias": (LORA, "diff_b"),
    "lora_magnitude_vector": (DORA, None),
    "lora_magnitude_vector.weight": (DORA, None),
    **{f"lokr_{n}": (LOKR, f"lokr_{n}") for n in ("w1", "w1_a", "w1_b", "w2", "w2_a", "w2_b", "t2")},
    **{f"hada_{n}": (LOHA, f"hada_{n}") for n in ("w1_a", "w1_b", "w2_a", "w2_b", "t1", "t2")},
}
#: per type, the sets of tensors one complete layer has (any one of them; PEFT writes exactly one)
_COMPLETE: dict[str, tuple[frozenset[str], ...]] = {
    LORA: (frozenset({"lora_A.weight", "lora_B.weight"}), frozenset({"lora_A.weight", "lora_B.weight", "lora_B.bias"})),
    LOKR: tuple(
        frozenset(w1 + w2)
        for w1 in (("lokr_w1",), ("lokr_w1_a", "lokr_w1_b"))
        for w2 in (("lokr_w2",), ("lokr_w2_a", "lokr_w2_b"), ("lokr_w2_a", "lokr_w2_b", "lokr_t2"))
    ),
    LOHA: (
        frozenset({"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}),
        frozenset({"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2"}),
    ),
}
#: the prefixes a saved adapter's keys may carry before the transformer's module name: diffusers' savers,
#: ``PeftModel.save_pretrained``; none (``get_peft_model_state_dict`` itself)
PREFIXES = ("transformer.", "base_model.model.")
_NAMES = {LORA: "LoRA", DORA: "DoRA", LOKR: "LoKr", LOHA: "LoHa"}


@dataclass
class Layer:
    """One adapter layer of a saved file: its type and its tensors by PEFT suffix."""

    kind: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def split_key(key: str) -> tuple[str, str] | None:
    """``[prefix]<module>.<suffix>`` -> ``(module, suffix)`` for a suffix of :data:`SUFFIXES` (None otherwise)."""
    for prefix in PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    for suffix in sorted(SUFFIXES, key=len, reverse=True):  # lora_magnitude_vector.weight before its stem
        if key.endswith("." + suffix):
            return key[: -len(suffix) - 1], suffix
    return None


def dora_refusal(source: str, family: str, key: str) -> UserError:
    """The one paragraph refusing a DoRA adapter's ComfyUI export (``source``: the file; ``key``: a magnitude)."""
    return UserError(
        f"{source} is a DoRA adapter (`{key}` is a DoRA magnitude), and no ComfyUI file reproduces PEFT's DoRA "
        f"for {family}: ComfyUI applies a magnitude (`dora_scale`) with another norm (the base weight's rows, or "
        "the columns; comfy/weight_adapter/base.py weight_decompose), so the file would load at the wrong strength "
        "per output row, and a magnitude under PEFT's name is skipped (`lora key not loaded`). Nothing was "
        "written. Load the run's adapter in diffusers (`pipe.load_lora_weights`, which applies DoRA exactly), or "
        "train with --lora_type lora, lokr or loha for ComfyUI."
    )


def adapter_layers(
    state: dict[str, torch.Tensor], source: str, family: str, accepts: Callable[[str], bool], known: str
) -> dict[str, Layer]:
    """The adapter layers of a saved file (``state``), keyed by the transformer's module name (prefix removed).

    Refused with one paragraph each: a key that is no adapter tensor or whose module ``accepts`` rejects (a layer
    ComfyUI has no name for; ``known`` lists those it has), any DoRA layer (:func:`dora_refusal`), and a layer
    mixing types or missing a tensor its type needs (the file is damaged). ``family`` names the model.
    """
    layers: dict[str, Layer] = {}
    for key, tensor in state.items():
        parts = split_key(key)
        if parts is not None and SUFFIXES[parts[1]][0] == DORA:
            raise dora_refusal(source, family, key)
        if parts is None or not accepts(parts[0]):
            raise UserError(
                f"{source}: `{key}` is not a tensor of a {family} transformer layer ComfyUI can load (known: "
                f"{known}; tensors `<layer>.lora_A.weight`/`lora_B.weight`, a LoKr's `lokr_w1`..., a LoHa's "
                "`hada_w1_a`...). Nothing was written: train on those layers (--lora_layers), or load the "
                "diffusers file itself."
            )
        module, suffix = parts
        kind = SUFFIXES[suffix][0]
        layer = layers.setdefault(module, Layer(kind))
        if layer.kind != kind:
            raise UserError(
                f"{source}: the layer `{module}` has both {_NAMES[layer.kind]} and {_NAMES[kind]} tensors; the file "
                "is damaged. Nothing was written: export the adapter of a finished run again."
            )
        layer.tensors[suffix] = tensor
    for module, layer in sorted(layers.items()):
        if frozenset(layer.tensors) not in _COMPLETE[layer.kind]:
            raise UserError(
                f"{source}: the {_NAMES[layer.kind]} layer `{module}` has only {', '.join(sorted(layer.tensors))} "
                f"(not all the tensors a {_NAMES[layer.kind]} layer needs); the file is damaged. Nothing was "
                "written: export the adapter of a finished run again."
            )
    return layers


def adapter_kind(keys: Iterable[str]) -> str | None:
    """The type of a saved adapter from its keys (``lora``/``dora``/``lokr``/``loha``; DoRA wins over LoRA, whose
    tensors it shares), None when there is no single one."""
    kinds = {SUFFIXES[p[1]][0] for p in map(split_key, keys) if p is not None}
    if DORA in kinds:
        return DORA
    return next(iter(kinds)) if len(kinds) == 1 else None


def is_dora_file(path: Path) -> bool:
    """Whether the safetensors adapter at ``path`` is a DoRA (only its header is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return adapter_kind(handle.keys()) == DORA


#: what a run that writes a ComfyUI file beside its adapter prints instead for a DoRA adapter
DORA_NOT_WRITTEN = (
    "DoRA adapter: no ComfyUI file is written beside it (ComfyUI's dora_scale is another normalisation than "
    "PEFT's DoRA, so it would load at the wrong strength; `dit-lora export --format comfyui` says more). Load the "
    "adapter in diffusers."
)


def comfyui_tensors(name: str, layer: Layer) -> dict[str, torch.Tensor]:
    """The layer's tensors under ComfyUI's key ``name`` (``<name>.<ComfyUI suffix>``), contiguous, dtype kept."""
    return {f"{name}.{SUFFIXES[suffix][1]}": t.contiguous() for suffix, t in layer.tensors.items()}


FORMAT = "comfyui"
SUFFIX = "_comfyui.safetensors"


def run_adapter_file(adapter_dir: Path, family: str) -> Path:
    """The adapter file of the run in ``adapter_dir``: diffusers' ``pytorch_lora_weights.safetensors``, else
    PEFT's ``adapter_model.safetensors``; one paragraph when neither is there."""
    for name in (ADAPTER_FILE, PEFT_ADAPTER_FILE):
        if (Path(adapter_dir) / name).is_file():
            return Path(adapter_dir) / name
    raise UserError(
        f"{adapter_dir} has no {ADAPTER_FILE} (or {PEFT_ADAPTER_FILE}): export the --output_dir of a finished "
        f"{family} run."
    )


def plan_export(
    adapter_dir: Path,
    name: str,
    convert: Callable[[dict[str, torch.Tensor], str], dict],
    keys: str,
    advice: str = "re-train or export an earlier checkpoint.",
    **extra: str,
) -> tuple[Path, dict[str, torch.Tensor], dict[str, str]]:
    """What :func:`write_planned` writes for the adapter file ``name`` of ``adapter_dir``: the target
    ``<stem>_comfyui.safetensors`` (a user's own file of that name is refused: ``export_target``), the tensors
    ``convert(state, source)`` gives (checked finite; ``advice`` ends the refusal) and the export metadata (``extra``,
    then ``keys`` describing the keys)."""
    from safetensors.torch import load_file

    from dit_lora.output.adapter import NonFiniteWeightsError, assert_finite
    from dit_lora.output.export import export_metadata, export_target

    source = Path(adapter_dir) / name
    target = export_target(adapter_dir, name[: -len(".safetensors")] + SUFFIX)
    state = convert(load_file(str(source)), str(source))
    try:
        assert_finite(state, str(source))
    except NonFiniteWeightsError as err:
        raise UserError(f"{err} A broken adapter is not exported: {advice}") from None
    return target, state, export_metadata(FORMAT, name, **extra, dit_lora_keys=keys)


def write_planned(planned: Iterable[tuple[Path, dict[str, torch.Tensor], dict[str, str]]]) -> list[Path]:
    """Write each :func:`plan_export` (all planned first: a refusal leaves nothing written), atomically."""
    from dit_lora.core.fileio import save_safetensors_atomic

    return [save_safetensors_atomic(state, target, metadata=metadata) for target, state, metadata in planned]


def write_comfyui_export(
    adapter_dir: Path, family: str, convert: Callable[[dict[str, torch.Tensor], str], dict], keys: str
) -> Path:
    """Write ``<adapter stem>_comfyui.safetensors`` beside the run's adapter: ``convert(state, source)`` gives
    ComfyUI's keys; checked finite before anything is written, written atomically with the export metadata
    (``keys`` describes them); a user's own file of that name is refused (``export_target``)."""
    source = run_adapter_file(adapter_dir, family)
    return write_planned([plan_export(Path(adapter_dir), source.name, convert, keys)])[0]


class RenameTable:
    """A family's ComfyUI names for diffusers' modules: a data file beside its module, ``{"why": ..., "modules":
    [[diffusers name, ComfyUI name], ...]}``, each name dotted with ``N`` standing for a block index
    (``["blocks.N.attn1.to_q", "blocks.N.self_attn.q"]``). A row that is not such a pair (one ``N`` at most, the same
    on both sides) is refused naming the file."""

    def __init__(self, rows: Iterable[tuple[str, str]]) -> None:
        def pattern(name: str) -> re.Pattern:
            return re.compile("^" + r"\.".join(r"(\d+)" if p == "N" else re.escape(p) for p in name.split(".")) + "$")

        self.rows = tuple((pattern(a), b) for a, b in rows)

    @classmethod
    def read(cls, module: str) -> RenameTable:
        """The table of the data file beside ``module`` named as it is (``families/wan/comfyui.json`` for
        ``dit_lora.families.wan.comfyui``)."""
        package, _, stem = module.rpartition(".")
        filename = f"{stem}.json"
        # ``fused`` and ``swapped``: what a fused layout says in the same file (``comfyui_fused.FusedLayout``)
        rows = read(package, filename, ("why", "modules", "fused", "swapped"), required=("modules",))["modules"]
        for i, row in enumerate(rows if isinstance(rows, list) else [rows]):
            pair = isinstance(row, list) and len(row) == 2 and all(isinstance(name, str) for name in row)
            if not pair or row[0].split(".").count("N") > 1 or len({n.split(".").count("N") for n in row}) > 1:
                raise DataFileError(
                    f"{path_of(package, filename)}: modules[{i}] is {row!r}, not a [diffusers name, ComfyUI name] "
                    "pair whose names have the same block index N (one at most); fix the file (it ships with "
                    "dit-lora)."
                )
        return cls(rows)

    def rename(self, module: str) -> str | None:
        """The ComfyUI name of the diffusers module ``module`` (no ``transformer.`` prefix), or None."""
        for pattern, name in self.rows:
            match = pattern.match(module)
            if match:
                return ".".join(match.group(1) if p == "N" else p for p in name.split("."))
        return None


class RenamedExport:
    """``FamilySpec.exports`` and ``adapter_extras`` of a family whose ComfyUI model keeps its authors' names
    (Wan's, Black Forest Labs' FLUX.2), not diffusers'.

    ComfyUI (``comfy/lora.py``, ``model_lora_keys_unet``) maps a LoRA module to a model weight for every model by
    the model's own state-dict names, ``diffusion_model.<name>``; its diffusers-name branches cover only some models
    (and of those only some layers), so the adapter file diffusers writes does not load there (or loads in part).
    Each layer is therefore written under ``diffusion_model.<its ComfyUI name>`` (:class:`RenameTable`) with
    ComfyUI's suffixes (:func:`comfyui_tensors`); no ``.alpha`` (the strength is folded in: ComfyUI's scale 1.0 is
    the trained one). Every run writes ``<adapter stem>_comfyui.safetensors`` beside its adapter (a DoRA run prints
    :data:`DORA_NOT_WRITTEN` instead), and ``dit-lora export --format comfyui`` writes it again. A family states its
    name, table, the layers it knows (``known``, for the refusal), what the metadata says of the keys (``keys``) and
    the format's description; it overrides :meth:`accepts` and :meth:`convert` for layers it fuses or swaps.
    """

    #: what every ComfyUI key starts with
    prefix = "diffusion_model."
    #: the refusal of another format (``{family}``, ``{fmt}`` filled in)
    wrong_format = "{family} exports only `comfyui`, not `{fmt}` (--format)."

    def __init__(self, family: str, table: RenameTable | None, known: str, keys: str, description: str) -> None:
        self.family, self.table, self.known, self.keys, self.description = family, table, known, keys, description

    def accepts(self, module: str) -> bool:
        """Whether ComfyUI has a name for the diffusers module ``module``."""
        return self.table is not None and self.table.rename(module) is not None

    def layer_name(self, module: str) -> str:
        """ComfyUI's key (without suffix) of the layer of the diffusers module ``module``."""
        return f"{self.prefix}{self.table.rename(module) if self.table is not None else module}"

    def convert(self, layers: dict[str, Layer], source: str) -> dict[str, torch.Tensor]:
        """Every layer's tensors under :meth:`layer_name` (``source``: the file, for a family's refusals)."""
        out: dict[str, torch.Tensor] = {}
        for module, layer in layers.items():
            out.update(comfyui_tensors(self.layer_name(module), layer))
        return out

    def comfyui_state(self, state: dict[str, torch.Tensor], source: str = "the adapter") -> dict[str, torch.Tensor]:
        """A saved adapter (LoRA, LoKr or LoHa, the strength folded; keys with diffusers' ``transformer.``, PEFT's
        ``base_model.model.`` or no prefix) with ComfyUI's keys. A key ComfyUI has no name for, a damaged layer or
        DoRA is refused in one paragraph naming it (:func:`adapter_layers`; ``source``: the file, for the message)."""
        return self.convert(adapter_layers(state, source, self.family, self.accepts, self.known), source)

    def write(self, adapter_dir: Path) -> list[Path]:
        """Write the ComfyUI file beside the run's adapter in ``adapter_dir`` (:func:`write_comfyui_export`)."""
        return [write_comfyui_export(Path(adapter_dir), self.family, self.comfyui_state, self.keys)]

    def export_formats(self) -> dict[str, str]:
        """The ComfyUI-named file."""
        return {FORMAT: self.description}

    def export_types(self, fmt: str) -> tuple[str, ...]:
        """The adapter types the ComfyUI file reproduces (not DoRA)."""
        return EXPORTED_TYPES

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """Write the ComfyUI file of the run in ``output_dir``."""
        if fmt != FORMAT:
            raise UserError(self.wrong_format.format(family=self.family, fmt=fmt))
        return self.write(Path(output_dir))

    def save_adapter_extras(self, output_dir: Path, comps, options: FamilyOptions) -> None:
        """The ComfyUI file beside the adapter the run just wrote (``comps`` and ``options`` are not needed); one line
        instead for a DoRA adapter or one the export refuses (a run must finish; ``dit-lora export`` refuses it in
        full)."""
        if is_dora_file(run_adapter_file(Path(output_dir), self.family)):
            print(DORA_NOT_WRITTEN)
            return
        try:
            self.write(Path(output_dir))
        except UserError as refused:  # the run's adapter is written and good: say why it has no ComfyUI copy
            print(f"no ComfyUI file beside the adapter: {refused}")


class PrefixedExports(RenamedExport):
    """``FamilySpec.exports`` (and ``adapter_extras``) of a family whose ComfyUI model takes diffusers' module names
    (Z-Image, Qwen-Image): ``dit-lora export --format comfyui`` writes every LoRA/LoKr/LoHa layer as
    ``transformer.<module>.<ComfyUI suffix>`` after checking each module against ``accepts`` (ComfyUI's key map;
    ``known`` lists it), and refuses DoRA; a LoKr/LoHa run writes that file itself."""

    prefix = "transformer."

    def __init__(self, family: str, accepts: Callable[[str], bool], known: str, note: str) -> None:
        keys = "transformer.<diffusers module>.<lora_A.weight | lokr_w1 | hada_w1_a ...>; no .alpha: scale 1.0"
        description = f"<adapter>{SUFFIX} next to the adapter: {note}; DoRA is refused"
        super().__init__(family, None, known, keys, description)
        self.key_map, self.note = accepts, note

    def accepts(self, module: str) -> bool:
        """Whether ComfyUI's key map of the family has the diffusers module ``module``."""
        return self.key_map(module)

    def save_adapter_extras(self, output_dir: Path, comps, options: FamilyOptions) -> None:
        """``FamilySpec.adapter_extras``: a LoKr/LoHa run (PEFT's file, whose ``base_model.model.`` keys ComfyUI
        does not map) also writes its ComfyUI file beside the adapter; a LoRA run needs none (diffusers' file loads
        in ComfyUI as it is) and a DoRA run gets none (one line says why)."""
        found = [Path(output_dir) / n for n in (ADAPTER_FILE, PEFT_ADAPTER_FILE) if (Path(output_dir) / n).is_file()]
        if not found:  # nothing this family's saver wrote to convert
            return
        source = found[0]
        if is_dora_file(source):
            print(DORA_NOT_WRITTEN)
        elif source.name == PEFT_ADAPTER_FILE:
            self.export_adapter(Path(output_dir), FORMAT)
