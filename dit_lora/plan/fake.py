"""Models without weights, and a count of the bytes a step keeps alive.

The planner builds a family's modules from their configs on the ``meta`` device (sizes and dtypes, no
storage), gives them fake tensors (``torch._subclasses.FakeTensorMode``: shapes propagate through real
operators, nothing is computed or allocated), and runs the family's own loss and backward under
:class:`LiveBytes`, a dispatch mode that adds up the bytes of every storage an operator creates and
subtracts them when the storage is freed. The peak it sees is what a caching allocator's
``max_memory_allocated`` sees for the same step, less fragmentation.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary


def on_meta(factory: Callable[[], torch.nn.Module], dtype: torch.dtype) -> torch.nn.Module:
    """``factory()`` built on the meta device and cast to ``dtype`` (floating tensors only), frozen."""
    from diffusers.utils import logging as diffusers_logging

    with torch.device("meta"), meta_init_skipped():
        module = factory()
    level = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity_error()  # its note on fp32-kept modules concerns loading weights, not sizes
    try:
        return module.to(dtype).requires_grad_(False)
    finally:
        diffusers_logging.set_verbosity(level)


#: ``torch.nn.init``'s in-place initialisers (:func:`meta_init_skipped`)
_INITIALISERS = tuple(
    name for name in dir(torch.nn.init) if name.endswith("_") and not name.startswith("_") and name[:-1].isidentifier()
)


@contextmanager
def meta_init_skipped() -> Iterator[None]:
    """``torch.nn.init``'s in-place initialisers return a meta tensor as it is (any other tensor is initialised as
    before). A meta tensor has no values to draw, but each initialiser still computes its bounds and dispatches
    through the meta device's mode: a third of building and attaching the adapter to a 40-block model on the meta
    device (Wan 14B: 1.3 s of a plan's 14), for tensors whose shapes and dtypes, all the plan reads, are the same."""
    originals = {name: getattr(torch.nn.init, name) for name in _INITIALISERS}

    def skipping(original):
        def initialise(tensor, *args, **kwargs):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "meta":
                return tensor
            return original(tensor, *args, **kwargs)

        return initialise

    for name, original in originals.items():
        setattr(torch.nn.init, name, skipping(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.nn.init, name, original)


def module_bytes(module: torch.nn.Module, *, trainable: bool | None = None) -> int:
    """Bytes of ``module``'s parameters and buffers (shared tensors once); only (non-)trainable ones if asked."""
    seen, total = set(), 0
    tensors: list[torch.Tensor] = [p for p in module.parameters() if trainable is None or p.requires_grad == trainable]
    if trainable is not True:
        tensors += list(module.buffers())
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def fake_module(module: torch.nn.Module, mode, device: str = "cpu") -> torch.nn.Module:
    """Replace ``module``'s meta parameters and buffers by fake tensors of the same shape on ``device`` (in place).

    ``Module.to`` cannot move meta tensors and would swap fake ones; assigning new leaves keeps each
    parameter's ``requires_grad`` and every tied weight tied.
    """
    made: dict[int, torch.Tensor] = {}  # id of the meta tensor -> its fake replacement (tied stays tied)

    def fake(t: torch.Tensor) -> torch.Tensor:
        # the meta tensor itself, wrapped (no operator dispatched: a sixth of a plan's time went to an empty_strided
        # through the fake mode for each of a model's thousands of weights)
        return mode.fake_tensor_converter.from_meta_and_device(mode, t.detach(), torch.device(device))

    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                if id(p) not in made:
                    made[id(p)] = torch.nn.Parameter(fake(p), requires_grad=p.requires_grad)
                sub._parameters[name] = cast(torch.nn.Parameter, made[id(p)])  # made as a Parameter just above
        for name, b in list(sub._buffers.items()):
            if b is not None:
                if id(b) not in made:
                    made[id(b)] = fake(b)
                sub._buffers[name] = made[id(b)]
    return module


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created under this mode that are still alive (``current``, ``peak``), and FLOPs.

    A storage counts once however many views share it, from the operator that made it until the last
    tensor using it is gone. Tensors made before the mode (the weights, and the real tensors a step reads under the
    fake mode's ``allow_non_fake_inputs``: scheduler tables, RoPE caches) are not counted, whatever operator reads
    them first; a constant the step itself makes (``torch.tensor`` under the mode: ``lift_fresh``) is. FLOPs use
    ``torch.utils.flop_counter``'s per-operator formulas; its ``FlopCounterMode`` is not used because its
    module hooks keep activations alive under activation checkpointing, which would spoil the byte count.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0
        self.flops = 0

    def _free(self, nbytes: int) -> None:
        self.current -= nbytes

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        if storage in self._seen:
            return
        nbytes = storage.nbytes()
        self._seen[storage] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, nbytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count, returns = _op_facts(func)
        if count is not None:
            self.flops += int(count(*args, **kwargs, out_val=out))
        if returns is _ALIASES:  # every result is a view of (or is) an input: no new storage
            return out
        leaves = out if isinstance(out, (tuple, list)) else (out,)
        if returns is _FRESH:  # every result is a new tensor (its schema says so): count each new storage
            for leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    self._track(leaf)
            return out
        # Any other operator: a view (or an in-place result) shares an input's storage: only storages an operator
        # made count, so views of the weights, made before the mode, never do.
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and id(leaf.untyped_storage()) not in inputs:
                self._track(leaf)
        return out


#: what :func:`_op_facts` says of an operator's results: all new tensors, all views of inputs
_FRESH, _ALIASES = "fresh", "aliases"
_OP_FACTS: dict = {}
#: operators whose schema declares a new tensor but whose result shares its input's storage (reshape's
#: ``_unsafe_view``: "unsafe" is that it does not say so)
_UNDECLARED_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})
#: operators whose schema declares a view but which, under the fake mode, can make a new tensor: ``lift_fresh``
#: turns a real constant (a scheduler table) into a fake tensor of its own storage
_STORAGES_CHECKED = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift.default})


def _op_facts(func) -> tuple[Callable | None, str | None]:
    """``func``'s FLOP formula (``torch.utils.flop_counter``'s, or None) and what its schema says of its results:
    _FRESH (none aliases an input), _ALIASES (each does), or None (mixed, or no schema: look at the storages).
    Read once per operator: a step dispatches thousands of operators through the mode, and walking every
    operator's arguments for their storages was a fifth of a plan's time."""
    facts = _OP_FACTS.get(func)
    if facts is None:
        from torch.utils.flop_counter import flop_registry

        kind = None
        schema = getattr(func, "_schema", None)
        if func in _UNDECLARED_VIEWS:
            kind = _ALIASES
        elif schema is not None and schema.returns and func not in _STORAGES_CHECKED:
            aliased = [r.alias_info is not None for r in schema.returns]
            kind = _ALIASES if all(aliased) else _FRESH if not any(aliased) else None
        facts = _OP_FACTS[func] = (flop_registry.get(getattr(func, "_overloadpacket", None)), kind)
    return facts


class ReadTensors(TorchDispatchMode):
    """The ids of every tensor an operator takes as input under this mode (``ids``).

    The planner asks which weights a phase reads: on a CPU a memory-mapped weight becomes resident only then.
    A module's parameters reach the first operator that reads them as themselves (a view comes after), so
    their ids are what to look for.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ids.update(id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
        return func(*args, **(kwargs or {}))


def fake_mode():
    """A ``FakeTensorMode`` (enter it with ``with``) that accepts the real tensors a family keeps (scheduler
    tables, RoPE caches)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def with_depth(config: dict, key: str, depth: int | None) -> dict:
    """A copy of ``config`` with ``key`` (the block count) set to ``depth`` (unchanged when None).

    As :func:`dit_lora.catalogue.lookup` reads it: a key missing at the top lives in ``text_config`` (a video
    LLM's language model as transformers 5 saves it).
    """
    out = dict(config)
    if depth is None:
        return out
    if key not in out and isinstance(out.get("text_config"), dict):
        out["text_config"] = {**out["text_config"], key: depth}
    else:
        out[key] = depth
    return out


def diffusers_on_meta(model_class, config: dict, dtype: torch.dtype) -> torch.nn.Module:
    """A diffusers model from its ``config.json`` contents, on the meta device."""
    return on_meta(lambda: model_class.from_config(config), dtype)


def transformers_on_meta(config: dict, dtype: torch.dtype, model_class=None) -> torch.nn.Module:
    """A transformers model from its ``config.json`` contents, on the meta device.

    ``model_class`` (e.g. ``T5EncoderModel``) when the family loads a specific head; else ``AutoModel`` picks
    the class from ``model_type``.
    """
    from transformers import AutoConfig, AutoModel

    values = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "transformers_version")}
    conf = AutoConfig.for_model(config["model_type"], **values)
    return on_meta(lambda: model_class(conf) if model_class is not None else AutoModel.from_config(conf), dtype)


@contextmanager
def fused_attention() -> Iterator[None]:
    """Trace ``F.scaled_dot_product_attention`` as a GPU's fused attention runs it.

    On fake CPU tensors PyTorch picks its math backend, which keeps the whole attention matrix
    (gigabytes at video lengths); a GPU run uses flash, cuDNN or memory-efficient attention, which keep
    the output and one log-sum-exp row. The memory-efficient kernel's operator has shape rules that run on
    any device and a FLOP formula, so the trace counts what the GPU holds and computes. The function is
    replaced (not intercepted by a mode) because activation checkpointing recomputes blocks in the
    backward, where modes entered around the step are not active.
    """
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def planned(*args, **kwargs):
        try:
            return _efficient_attention(*args, **kwargs)
        except (RuntimeError, TypeError, ValueError):
            return original(*args, **kwargs)  # a layout that kernel does not take: the math figure stands

    F.scaled_dot_product_attention = planned
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _efficient_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
        attn_mask = attn_mask.to(query.dtype).expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    # (B, H, N, D) in and out, as F.scaled_dot_product_attention; the kernel takes (B, N, H, D)
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale
    )[0]
    return out
