"""Where the weights are while a run caches and trains: on a CPU what is resident of the model files, and what
``--blocks_to_swap`` and the cache's parking keep in host memory (the memory plan's placement figures).

On a CPU, where a run reports its peak resident size, weights count as resident as :mod:`.resident` describes
(:func:`cpu_residency`): a component loaded in its stored dtype is memory-mapped and counts in the caching phase only
for the parameters the encode trace read (the trained model, first read after caching, not at all); a component
converted at load counts in full, and a loading phase holds every converted component plus the largest converted
one's stored bytes (its source pages, mapped beside the copy while it loads).

``--blocks_to_swap N`` (:mod:`dit_lora.modeling.block_swap`) takes the swapped blocks' frozen bytes off the trained
model's resident weights on an accelerator, in the caching and the training phase, and adds back the blocks in flight
(:data:`SWAP_IN_FLIGHT`, :func:`swap_fields`); on a CPU host memory is the device's, so only the in-flight copies
count, as a cost. While the cache is built, the blocks that wait in host memory (:mod:`dit_lora.modeling.
cache_parking`, or FSDP2's blocks until each is sharded) are off the device too (:func:`cache_parked`).
"""

from __future__ import annotations

import torch

from dit_lora.catalogue import by_hub_id
from dit_lora.config.schema import ModelOptions, PerformanceOptions
from dit_lora.contract.spec import FamilySpec
from dit_lora.modeling import block_swap, host_parking, quantize
from dit_lora.plan import resident
from dit_lora.plan.fake import module_bytes

#: --blocks_to_swap: swapped blocks whose device copies live at once (never more than are swapped): the one computing
#: and the next one arriving (``tests/modeling/test_block_swap.py`` measures two on the CPU), and on an accelerator
#: one more, the one just left, whose memory the allocator reuses only once the compute stream has passed it
#: (``record_stream``)
SWAP_IN_FLIGHT = {"cpu": 2, "accelerator": 3}


def cpu_residency(
    model: ModelOptions,
    modules: dict[str, torch.nn.Module],
    weights: dict[str, int],
    read_share: dict[str, float],
    model_subfolder: str,
    copied: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, int], int | None, list[str]]:
    """On a CPU: each component's resident bytes in the caching phase, the loading phase's bytes, the mapped ones.

    ``model``: the run's ``cfg.model`` (where the weights are stored); ``read_share``: per component, the fraction
    of its bytes the encode trace read; ``copied``: components that load into fresh memory whatever their files
    hold (quantized ones: their quantized size is in ``weights``), which read their source pages while they load,
    as converted ones do. A component whose
    stored dtype is unknown counts in full, as before this distinction. The catalogue's stored dtype describes
    the transformer's files, so for a Hub id not downloaded only the model is placed by it.
    """
    entry = by_hub_id(str(model.pretrained_model_name_or_path or ""))
    cache, converted, mapped = dict(weights), {}, []
    for name, module in modules.items():
        stored = resident.stored_component(
            str(model.pretrained_model_name_or_path),
            model_subfolder if name == "model" else name,
            module,
            variant=model.variant,
            catalogue_dtype=entry.stored_dtype if entry is not None and name == "model" else None,
        )
        if stored is None:
            continue
        if name not in copied and stored.dtype == resident.loaded_dtype(module):
            mapped.append(name)
            cache[name] = int(weights[name] * read_share.get(name, 1.0))
        else:  # the copy stays; the source is resident only while this component loads, so one at a time.
            # Only the tensors the module loads are read: a file may hold more (CogVideoX's T5 file keeps the
            # decoder that T5EncoderModel skips), so at most the module's own tensors at the stored dtype.
            converted[name] = min(stored.nbytes, resident.stored_as(module, stored.dtype).nbytes)
    load = sum(weights[k] for k in converted) + max(converted.values()) if converted else None
    return cache, load, mapped


def block_sizes(model: torch.nn.Module, paths) -> list[list[int]]:
    """Per block list ``paths`` names on ``model``, each block's frozen bytes in execution order (what block swap
    parks of it: :func:`dit_lora.modeling.host_parking.frozen_slots`)."""
    return [
        [sum(t.numel() * t.element_size() for _, _, t in host_parking.frozen_slots(block)) for block in blocks]
        for blocks in block_swap.block_lists(model, paths)
    ]


def swap_fields(sizes: list[list[int]], count: int, device: str, scale: float) -> dict[str, int]:
    """The plan's --blocks_to_swap fields for ``count`` in ``sizes`` (:func:`block_sizes`; the last blocks of each
    list are swapped, as many as :func:`~dit_lora.modeling.block_swap.per_list_counts` says): the
    swapped blocks' frozen bytes and the blocks in flight. ``scale``: the trained model's bytes as counted over its
    bytes as built (below 1 when --quantize_base counts its linears smaller; the blocks hold nearly all of them, so
    they shrink alike)."""
    counts = block_swap.per_list_counts([len(blocks) for blocks in sizes], count)
    chosen = [size for blocks, n in zip(sizes, counts) if n > 0 for size in blocks[len(blocks) - n :]]
    # blocks of two lists can be on the device together (the last of one kept for the backward, the next arriving)
    in_flight = min(sum(counts), SWAP_IN_FLIGHT["cpu" if device == "cpu" else "accelerator"]) * max(chosen, default=0)
    return {
        "blocks_to_swap": max(count, 0),
        "swapped_bytes": int(sum(chosen) * scale),
        "swap_in_flight_bytes": int(in_flight * scale),
    }


def cache_parked(plan, sizes: list[list[int]], scale: float, swapped: int) -> int:
    """The trained model's bytes in host memory during the caching phase, of a ``plan`` (its ``device``, ``engine``,
    ``blocks_wait`` and ``quantized``; ``sizes``: :func:`block_sizes`, ``scale`` as in :func:`swap_fields`,
    ``swapped``: the swapped blocks' bytes). On an accelerator, every block's frozen bytes when they wait for the
    cache (:mod:`~dit_lora.modeling.cache_parking`) or, under FSDP2, until each is sharded alone
    (:func:`~dit_lora.modeling.block_swap.park_blocks`); else the swapped blocks'. On a CPU none (the host is the
    device)."""
    if plan.device == "cpu":
        return 0
    waits = plan.blocks_wait and plan.quantized not in block_swap.LIBRARY_QUANTIZED
    if plan.engine == "fsdp2" or waits:
        return int(sum(size for blocks in sizes for size in blocks) * scale)
    return swapped


def swap_figures(
    performance: PerformanceOptions, spec: FamilySpec, model: torch.nn.Module, device: str, counted: int
) -> dict[str, int]:
    """The plan's --blocks_to_swap fields for ``model`` (full depth, trainables attached); a count the model's lists
    cannot give is refused in one paragraph, as the run refuses it (see :func:`swap_fields`). ``counted``: the
    model's bytes as the plan counts them (its ``weights["model"]``), which scale the blocks' bytes as built."""
    count = int(performance.blocks_to_swap)
    if count > 0:
        block_swap.swapped_blocks(model, spec.info.block_lists, count, spec.name)
    return swap_fields(block_sizes(model, spec.info.block_lists), count, device, counted / max(module_bytes(model), 1))


def cache_phase_weights(model: ModelOptions, spec, comps, weights: dict, swap: dict, where, read_share, sub):
    """The weights resident while the latents are cached: the base's share parked at load taken off, and on a CPU
    what is copied or mapped from the files; returns (bytes per component, the load phase's bytes, mapped)."""
    cache_weights, load_phase, mapped = dict(weights), None, list[str]()
    scale = weights["model"] / max(module_bytes(comps.model), 1)
    sizes = block_sizes(comps.model, spec.info.block_lists)
    cache_weights["model"] -= cache_parked(where, sizes, scale, swap["swapped_bytes"])  # parked at load
    if where.device == "cpu":  # on CUDA every weight is copied to the device: resident in full, no source pages
        modules = {"model": comps.model, **{k: m for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)}}
        copied = {"model"} if quantize.enabled(model) else set()
        copied |= {"text_encoder"} if model.quantize_text_encoder else set()
        cache_weights, load_phase, mapped = cpu_residency(model, modules, weights, read_share, sub, copied)
    return cache_weights, load_phase, mapped
