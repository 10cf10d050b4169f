"""A ComfyUI export for a model whose authors fuse layers diffusers splits: Black Forest Labs' layout (FLUX.2, and
FLUX.1 [dev], Kontext and Chroma, whose ComfyUI models keep the same names), said by data beside the family's module.

Black Forest Labs' checkpoints hold one ``qkv`` weight per attention stream (``double_blocks.N.img_attn.qkv``,
``txt_attn.qkv``; FLUX.1's single blocks one ``linear1`` of q, k, v *and* the MLP's input) where diffusers has
separate ``to_q``, ``to_k``, ``to_v`` (``add_*_proj``, ``proj_mlp``): diffusers' conversion scripts split the fused
rows (``torch.chunk`` / ``torch.split``), and swap ``final_layer.adaLN_modulation.1``'s (shift, scale) halves into
``norm_out.linear``'s (scale, shift). The family's ``comfyui.json`` states, besides the renamed ``modules``
(:class:`~dit_lora.output.comfyui_types.RenameTable`), which diffusers modules are fused into which BFL module and
in which order (``fused``: ``{"into": ..., "parts": [...]}``, ``rows``: each part's share of the fused rows when
they differ, FLUX.1's ``linear1`` ``[1, 1, 1, 4]``; default equal) and which modules have their halves swapped
(``swapped``, by diffusers' name).

A fused weight gets one **LoRA** whose product is exactly its parts': ``lora_A`` the separate ``A``s stacked (rank
``r_q + r_k + r_v``), ``lora_B`` block-diagonal (each ``B`` in its share of the rows, under its ``A``'s columns),
so ``B @ A`` is the parts' products stacked; a part not trained stays a zero block. A swapped module's ``B`` rows
are swapped back. diffusers' converters of such files give each part the stacked ``A`` and its rows of ``B``: the
same products.

A **LoKr** or **LoHa** layer keeps PEFT's tensor names (``lokr_w1``..., ``hada_w1_a``...). Its parts cannot be
fused: the updates stacked, ``[kron(a1, a2); kron(b1, b2); kron(c1, c2)]``, are not one Kronecker (or Hadamard)
product of factors, so there is no fused LoKr equal to them. They are written instead under diffusers' names
(``transformer.transformer_blocks.N.attn.to_q.lokr_w1``), which ComfyUI's ``flux_to_diffusers`` maps to
``(img_attn.qkv.weight, (0, offset, size))``: ComfyUI's ``calculate_weight`` narrows the fused weight to that slice
before any ``weight_adapter`` adds its update, so each LoKr/LoHa patches exactly its slice. A swapped module likewise
goes by its diffusers name, where ComfyUI applies ``swap_scale_shift`` to the update (a half swap of a Kronecker
product's rows is not one of its factors' unless the first factor's rows are even). Every other layer has BFL's name.

Where ComfyUI maps no diffusers name onto a slice of the fused weight (Lumina 2: its ``Lumina2`` model has only its
own names; HunyuanVideo 1.5 likewise), a family asks for ``typed_fused="diff"``: a LoKr or LoHa part is written as
its exact update instead, the parts' updates stacked into the fused weight's ``<name>.diff`` (ComfyUI's ``load_lora``
adds a ``.diff`` at the strength given; a part not trained stays zero rows), and a swapped module as its exact
update with the halves swapped back. That costs the fused weight's size per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from dit_lora.core.datafile import DataFileError, path_of, read, record
from dit_lora.core.errors import UserError
from dit_lora.output.comfyui_types import (
    LORA,
    Layer,
    RenamedExport,
    RenameTable,
    adapter_layers,
    comfyui_tensors,
    is_dora_file,
    run_adapter_file,
)

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions

#: the most a run writes by itself as a LoKr's or LoHa's fused ``.diff`` weights (HunyuanVideo 1.5's 8.3B transformer:
#: about 5.4 GiB, one fp32 update of each stream's q/k/v a block); above it ``dit-lora export`` writes it on request
AUTO_DIFF_BYTES = 2 * 2**30


@dataclass(frozen=True)
class FusedRows:
    """One fused BFL module of ``comfyui.json``'s ``fused``: its name (``N``: the block index), the diffusers modules
    whose rows it stacks in order, and each one's share of the rows (empty: equal shares)."""

    into: str
    parts: tuple[str, ...]
    rows: tuple[int, ...] = ()


class FusedLayout:
    """What a family's ``comfyui.json`` says besides its renames: each fused part (diffusers module -> the fused BFL
    module, its position and the parts' row shares) and the modules whose halves are swapped."""

    def __init__(self, fused: tuple[FusedRows, ...] = (), swapped: tuple[str, ...] = ()) -> None:
        self.parts = tuple(
            (RenameTable([(part, group.into)]), position, group.rows or (1,) * len(group.parts))
            for group in fused
            for position, part in enumerate(group.parts)
        )
        self.swapped = RenameTable([(name, name) for name in swapped])  # N: any block

    @classmethod
    def read(cls, module: str) -> FusedLayout:
        """The layout of the data file beside ``module`` (``families/flux2/comfyui.json``); a ``fused`` entry that
        is not an :class:`FusedRows` object, or whose ``rows`` do not give one share per part, is refused naming
        the file."""
        package, _, stem = module.rpartition(".")
        name = path_of(package, f"{stem}.json")
        data = read(package, f"{stem}.json", ("why", "modules", "fused", "swapped"))
        groups = tuple(record(FusedRows, row, name, f"fused[{i}]") for i, row in enumerate(data.get("fused", [])))
        for i, group in enumerate(groups):
            if group.rows and len(group.rows) != len(group.parts):
                raise DataFileError(
                    f"{name}: fused[{i}] gives {len(group.rows)} row shares for {len(group.parts)} "
                    "parts; give one per part (or none: equal shares) and fix the file."
                )
        return cls(groups, tuple(data.get("swapped", [])))

    def fused(self, module: str) -> tuple[str, int, tuple[int, ...]] | None:
        """``(fused BFL name, position, row shares)`` of the diffusers module ``module``, or None."""
        for table, position, shares in self.parts:
            name = table.rename(module)
            if name is not None:
                return name, position, shares
        return None


def part_rows(rows: dict[int, int], shares: tuple[int, ...], name: str) -> list[int]:
    """Each part's rows in the fused weight ``name``: the trained parts' own (``rows``: position -> rows) when every
    part is trained; else each its share of the rows (``shares``), checked against the trained parts' (a model whose
    parts have other proportions than the layout's cannot have a missing part placed: refused in one paragraph)."""
    if len(rows) == len(shares):
        return [rows[i] for i in range(len(shares))]
    first = next(iter(rows))
    unit = rows[first] // shares[first]
    if any(rows[i] != shares[i] * unit for i in rows):
        raise UserError(
            f"`{name}` fuses parts in the proportions {':'.join(map(str, shares))}, but the adapter's trained parts "
            f"have {', '.join(f'{rows[i]} rows' for i in sorted(rows))}: this model's layout differs, and the rows of "
            "the untrained parts cannot be placed. Nothing was written: train every part of it (q, k and v) for a "
            "ComfyUI file, or load the diffusers file."
        )
    return [share * unit for share in shares]


def fuse(
    parts: dict[int, dict[str, torch.Tensor]], shares: tuple[int, ...], name: str = "the fused weight"
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LoRA for a fused weight from the LoRAs of its parts (``parts``: position -> tensors; ``shares``: each
    position's share of the rows, :func:`part_rows`): the ``A``s stacked, the ``B``s block-diagonal in their rows (a
    missing part: zero rows)."""
    sizes = part_rows({i: p["lora_B.weight"].shape[0] for i, p in parts.items()}, shares, name)
    ranks = {i: p["lora_A.weight"].shape[0] for i, p in sorted(parts.items())}
    lora_a = torch.cat([parts[i]["lora_A.weight"] for i in ranks])
    lora_b = torch.zeros(sum(sizes), sum(ranks.values()), dtype=next(iter(parts.values()))["lora_B.weight"].dtype)
    column = 0
    for i, rank in ranks.items():
        row = sum(sizes[:i])
        lora_b[row : row + sizes[i], column : column + rank] = parts[i]["lora_B.weight"]
        column += rank
    return lora_a.contiguous(), lora_b


def typed_update(layer: Layer) -> torch.Tensor:
    """The update of a LoKr or LoHa layer of a Linear at its saved strength (dit-lora folds the scale into one
    factor): LoKr ``kron(w1, w2)`` (each factor whole or ``_a @ _b``), LoHa ``(w1_a @ w1_b) * (w2_a @ w2_b)``, as
    PEFT and ComfyUI's ``weight_adapter`` compute them, in float32."""
    t = {name: tensor.float() for name, tensor in layer.tensors.items()}
    if "hada_w1_a" in t:
        return (t["hada_w1_a"] @ t["hada_w1_b"]) * (t["hada_w2_a"] @ t["hada_w2_b"])

    def factor(n: int) -> torch.Tensor:
        return t[f"lokr_w{n}"] if f"lokr_w{n}" in t else t[f"lokr_w{n}_a"] @ t[f"lokr_w{n}_b"]

    return torch.kron(factor(1), factor(2))


def typed_shape(layer: Layer) -> tuple[int, int]:
    """(rows, columns) of a LoKr or LoHa layer's update, from its factors' shapes (nothing multiplied)."""
    t = layer.tensors
    if "hada_w1_a" in t:
        return t["hada_w1_a"].shape[0], t["hada_w1_b"].shape[1]

    def factor(n: int) -> tuple[int, int]:
        whole = t.get(f"lokr_w{n}")
        if whole is not None:
            return whole.shape[0], whole.shape[1]
        return t[f"lokr_w{n}_a"].shape[0], t[f"lokr_w{n}_b"].shape[1]

    (r1, c1), (r2, c2) = factor(1), factor(2)
    return r1 * r2, c1 * c2


def stacked_update(
    parts: dict[int, torch.Tensor], shares: tuple[int, ...], dtype: torch.dtype, name: str = "the fused weight"
) -> torch.Tensor:
    """The fused weight's update from its parts' updates (``parts``: position -> update; each part's rows as
    :func:`part_rows` places them, a missing part zero rows), in ``dtype``."""
    sizes = part_rows({i: update.shape[0] for i, update in parts.items()}, shares, name)
    first = next(iter(parts.values()))
    rows = [parts[i] if i in parts else first.new_zeros(size, first.shape[1]) for i, size in enumerate(sizes)]
    return torch.cat(rows).to(dtype).contiguous()


class FusedExport(RenamedExport):
    """``FamilySpec.exports`` and ``adapter_extras`` of a BFL-layout family: :class:`RenamedExport` with its
    ``comfyui.json``'s fused parts fused and swapped halves swapped back (module docstring). ``module``: the
    family's module the data file sits beside; the rest as :class:`RenamedExport` (``wrong_format``: the family's
    refusal of another format, if its own; ``typed_fused``: a LoKr/LoHa part by diffusers' name, ``"slices"``, or
    stacked into the fused weight's ``.diff``, ``"diff"``)."""

    def __init__(
        self,
        family: str,
        module: str,
        known: str,
        keys: str,
        description: str,
        wrong_format: str = "",
        typed_fused: str = "slices",
    ):
        super().__init__(family, RenameTable.read(module), known, keys, description)
        self.layout = FusedLayout.read(module)
        self.typed_fused = typed_fused
        if wrong_format:
            self.wrong_format = wrong_format

    def accepts(self, module: str) -> bool:
        """A fused part, or a module of the table."""
        return self.layout.fused(module) is not None or super().accepts(module)

    def typed_layer_name(self, module: str) -> str:
        """ComfyUI's key for a LoKr/LoHa layer of ``module``: a fused part or a swapped module by diffusers' name
        (ComfyUI maps those onto their slice of the fused weight / with the halves swapped), the rest by BFL's."""
        if self.layout.fused(module) is not None or self.layout.swapped.rename(module) is not None:
            return f"transformer.{module}"
        return self.layer_name(module)

    def typed_tensors(self, module: str, layer: Layer) -> dict[str, torch.Tensor]:
        """A LoKr or LoHa layer that is no fused part: PEFT's tensor names under :meth:`typed_layer_name`; with
        ``typed_fused="diff"`` (ComfyUI maps no diffusers name) a swapped module is its exact update with the halves
        swapped back, ``<name>.diff`` (a half swap of a Kronecker or Hadamard product is no product of factors)."""
        if self.typed_fused == "diff" and self.layout.swapped.rename(module) is not None:
            scale, shift = typed_update(layer).chunk(2, dim=0)
            dtype = next(iter(layer.tensors.values())).dtype
            return {f"{self.layer_name(module)}.diff": torch.cat([shift, scale]).to(dtype).contiguous()}
        return comfyui_tensors(self.typed_layer_name(module), layer)

    def diff_bytes(self, state: dict[str, torch.Tensor], source: str = "the adapter") -> int:
        """The bytes of the fused ``.diff`` weights the export of ``state`` writes (0 unless ``typed_fused="diff"``
        and a LoKr/LoHa layer is a fused part): each such fused weight whole, in its parts' dtype."""
        if self.typed_fused != "diff":
            return 0
        fused: dict[str, tuple[dict[int, int], tuple[int, ...], int, int]] = {}
        for module, layer in adapter_layers(state, source, self.family, self.accepts, self.known).items():
            part = self.layout.fused(module)
            if layer.kind == LORA or part is None:
                continue
            name, position, shares = part
            rows, columns = typed_shape(layer)
            itemsize = next(iter(layer.tensors.values())).element_size()
            fused.setdefault(name, ({}, shares, columns, itemsize))[0][position] = rows
        return sum(
            sum(part_rows(rows, shares, name)) * columns * itemsize
            for name, (rows, shares, columns, itemsize) in fused.items()
        )

    def save_adapter_extras(self, output_dir: Path, comps, options: FamilyOptions) -> None:
        """:meth:`RenamedExport.save_adapter_extras`, but a LoKr/LoHa adapter whose fused ``.diff`` weights would
        exceed :data:`AUTO_DIFF_BYTES` gets one line instead, naming the size and the export command: a run (and its
        EMA and named copies) does not fill the disk with gigabytes nobody asked for."""
        from safetensors.torch import load_file

        source = run_adapter_file(Path(output_dir), self.family)
        if self.typed_fused == "diff" and not is_dora_file(source):
            try:
                size = self.diff_bytes(load_file(str(source)), str(source))
            except UserError:  # the export refuses it: the base class says why
                size = 0
            if size > AUTO_DIFF_BYTES:
                print(
                    f"no ComfyUI file written beside {source.name}: a LoKr or LoHa adapter's q/k/v go into "
                    f"{self.family}'s fused ComfyUI weights as their exact update (.diff), {size / 2**30:.1f} GiB "
                    f"here; `dit-lora export {output_dir} --format comfyui` writes it when you want it (a LoRA "
                    "adapter's ComfyUI file stays small: its fused q/k/v stay low-rank)."
                )
                return
        super().save_adapter_extras(output_dir, comps, options)

    def convert(self, layers: dict[str, Layer], source: str) -> dict[str, torch.Tensor]:
        """LoRA: BFL's names, the fused parts fused, the swapped halves swapped back; a LoRA bias refused. LoKr
        and LoHa: PEFT's tensor names under :meth:`typed_layer_name` (no fusing: a product of several layers'
        factors is no factor of the fused weight)."""
        out: dict[str, torch.Tensor] = {}
        fused: dict[str, tuple[dict[int, dict[str, torch.Tensor]], tuple[int, ...]]] = {}
        diffs: dict[str, tuple[dict[int, torch.Tensor], tuple[int, ...], torch.dtype]] = {}
        for module, layer in layers.items():
            part = self.layout.fused(module)
            if layer.kind != LORA and part is not None and self.typed_fused == "diff":
                name, position, shares = part
                dtype = next(iter(layer.tensors.values())).dtype
                diffs.setdefault(name, ({}, shares, dtype))[0][position] = typed_update(layer)
                continue
            if layer.kind != LORA:
                out.update(self.typed_tensors(module, layer))
                continue
            if "lora_B.bias" in layer.tensors:
                raise UserError(
                    f"{source}: the layer `{module}` has a LoRA bias (lora_B.bias), which has no ComfyUI form for a "
                    f"{self.family} layer here. Nothing was written: train without a LoRA bias, or load the diffusers "
                    "file."
                )
            halves = layer.tensors
            if part is not None:
                name, position, shares = part
                fused.setdefault(name, ({}, shares))[0][position] = halves
                continue
            lora_b = halves["lora_B.weight"]
            if self.layout.swapped.rename(module) is not None:
                scale, shift = lora_b.chunk(2, dim=0)
                lora_b = torch.cat([shift, scale])
            out[f"{self.layer_name(module)}.lora_A.weight"] = halves["lora_A.weight"].contiguous()
            out[f"{self.layer_name(module)}.lora_B.weight"] = lora_b.contiguous()
        for name, (parts, shares) in fused.items():
            out[f"{self.prefix}{name}.lora_A.weight"], out[f"{self.prefix}{name}.lora_B.weight"] = fuse(
                parts, shares, name
            )
        for name, (updates, shares, dtype) in diffs.items():
            out[f"{self.prefix}{name}.diff"] = stacked_update(updates, shares, dtype, name)
        return out
