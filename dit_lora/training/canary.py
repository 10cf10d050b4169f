"""Attention canary: before training, push adversarial inputs through the run's attention.

One attention module per distinct diffusers processor class (Sana: linear self-attention and
masked softmax cross-attention) runs a forward and a backward (input gradients only: no
``.grad`` is written) under the run's autocast on inputs chosen to break weak kernels: large
hidden states so q.k logits are in the hundreds, long rows (sequence lengths of 128k + 64, the
cuDNN failure pattern), and additive or boolean key masks with masked padding. A module whose
forward cannot be called that way is replaced by a direct ``scaled_dot_product_attention`` test
with its heads and head dim.

If anything is non-finite, every non-math SDPA backend (flash, which also selects the CPU flash
kernel, memory-efficient, cuDNN, FA3) is switched off process-wide and the canary runs again.

:func:`install_broken_attention` is the ``--inject_faults broken_attention`` drill: SDPA returns
NaN whenever a non-math backend is enabled. diffusers' processors look ``F.scaled_dot_product_attention``
up on ``torch.nn.functional`` at call time, so patching that attribute reaches them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "Placement",
    "attention_canary",
    "canary_in_place",
    "install_broken_attention",
    "non_math_sdpa_enabled",
    "restore_sdpa_backends",
    "sdpa_backend_flags",
    "use_math_sdpa_only",
]

# SDPA backend flags: name -> (getter, setter) on torch._C, where the build has them.
_BACKENDS = ("flash", "mem_efficient", "cudnn", "fa3", "math")
_NON_MATH = ("flash", "mem_efficient", "cudnn", "fa3")
#: a context in which an attention module's weights are on the canary's device
Placement = Callable[[torch.nn.Module], contextlib.AbstractContextManager[None]]


def _getter(name: str):
    return getattr(torch._C, f"_get_{name}_sdp_enabled", None)


def _setter(name: str):
    return getattr(torch._C, f"_set_sdp_use_{name}", None)


def sdpa_backend_flags() -> dict[str, bool]:
    """Which SDPA backends are enabled now (``flash`` also governs the CPU flash kernel)."""
    return {name: bool(_getter(name)()) for name in _BACKENDS if _getter(name) is not None}


def restore_sdpa_backends(flags: dict[str, bool]) -> None:
    """Put the SDPA backend flags back as :func:`sdpa_backend_flags` recorded them."""
    for name, value in flags.items():
        setter = _setter(name)
        if setter is not None:
            setter(bool(value))


def non_math_sdpa_enabled() -> bool:
    """True when any fused (non-math) SDPA backend may be picked."""
    flags = sdpa_backend_flags()
    return any(flags.get(name, False) for name in _NON_MATH)


def use_math_sdpa_only() -> list[str]:
    """Disable every non-math SDPA backend process-wide; return the names that were switched off."""
    before = sdpa_backend_flags()
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    if _setter("fa3") is not None:
        _setter("fa3")(False)
    torch.backends.cuda.enable_math_sdp(True)
    return [name for name in _NON_MATH if before.get(name)]


def install_broken_attention() -> Callable[[], None]:
    """Fault drill: SDPA returns NaN while a non-math backend is enabled. Returns the uninstaller."""
    original = F.scaled_dot_product_attention

    def broken_scaled_dot_product_attention(*args, **kwargs):
        out = original(*args, **kwargs)
        if non_math_sdpa_enabled():
            out = out + float("nan")  # NaN forward, NaN backward: like a broken fused kernel
        return out

    # sets __wrapped__ only (no name or doc copied): inspect.signature and inspect.unwrap see SDPA's own
    functools.update_wrapper(broken_scaled_dot_product_attention, original, assigned=(), updated=())
    torch.nn.functional.scaled_dot_product_attention = broken_scaled_dot_product_attention

    def uninstall() -> None:
        if torch.nn.functional.scaled_dot_product_attention is broken_scaled_dot_product_attention:
            torch.nn.functional.scaled_dot_product_attention = original

    return uninstall


# ---------------------------------------------------------------------------------------------
def _attention_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str]]:
    """(name, module, processor class) for the first module of each distinct processor class."""
    seen: dict[str, tuple[str, torch.nn.Module, str]] = {}
    for name, module in model.named_modules():
        proc = getattr(module, "processor", None)
        if proc is None or not callable(getattr(module, "forward", None)):
            continue
        cls = type(proc).__name__
        if cls not in seen:
            seen[cls] = (name, module, cls)
    return list(seen.values())


def _module_dtype(module: torch.nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point() and not p.requires_grad:
            return p.dtype
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


#: on a CPU, the module width up to which the canary keeps its full lengths (a wider one gets fewer tokens)
CPU_FULL_WIDTH = 1024


def _lengths(device: torch.device, width: int = 0) -> tuple[int, int]:
    """(queries, keys) of the canary's inputs. seq_len % 128 == 64 with a mask is a known cuDNN NaN pattern, so a GPU
    gets it. A CPU has no such pattern and keeps the canary short (under about a second): 320 x 192 tokens for a
    module up to CPU_FULL_WIDTH wide, fewer for a wider one, whose projections cost tokens x width^2 (a 5120-wide
    Wan 14B block took 8 s of CPU at 320 tokens), never under 64 x 48 (the hot tokens, both masks' padding)."""
    if device.type == "cuda":
        return 1088, 320
    shrink = min(1.0, (CPU_FULL_WIDTH / width) ** 2) if width > 0 else 1.0
    return max(64, int(320 * shrink)), max(48, int(192 * shrink))


def _finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t is not None)


def _outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


def _masks(batch: int, keys: int, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    """Key masks: sample 0 keeps one key (the rest is padding), sample 1 keeps the first half."""
    keep = torch.zeros(batch, keys, dtype=torch.bool, device=device)
    keep[0, :1] = True
    keep[1:, : keys // 2] = True
    additive = (1.0 - keep.to(dtype)) * -10000.0  # how diffusers' DiTs turn a 2-D mask into a bias
    return {"additive mask": additive.unsqueeze(1), "boolean mask": keep.unsqueeze(1)}


def _run(fn, inputs: list[torch.Tensor], device, dtype, seed: int) -> tuple[bool, str | None]:
    """Forward + backward (input gradients only) under the run's autocast; (finite?, error)."""
    enabled = dtype in (torch.float16, torch.bfloat16)
    with torch.autocast(device.type, dtype=dtype if enabled else None, enabled=enabled):
        out = _outputs(fn())
    if not out:
        return True, "no tensor output"
    g = torch.Generator(device="cpu").manual_seed(seed)
    loss = sum((o.float() * torch.randn(o.shape, generator=g).to(o.device)).sum() for o in out if o.requires_grad)
    grads: Sequence[torch.Tensor | None] = []
    wanted = [t for t in inputs if t.requires_grad]
    if isinstance(loss, torch.Tensor) and loss.requires_grad and wanted:
        grads = torch.autograd.grad(loss, wanted, allow_unused=True)
    return _finite(out) and _finite(grads), None


def _sdpa_direct(heads: int, head_dim: int, device, dtype, scale: float, seed: int) -> list[dict[str, Any]]:
    nq, nk = _lengths(device)
    g = torch.Generator(device="cpu").manual_seed(seed)
    work = dtype if dtype in (torch.float16, torch.bfloat16) else torch.float32
    results = []
    for label, mask in [("no mask", None)] + list(_masks(2, nk, work, device).items()):
        q = (torch.randn(2, heads, nq, head_dim, generator=g) * scale).to(device, work).requires_grad_(True)
        k = (torch.randn(2, heads, nk, head_dim, generator=g) * scale).to(device, work).requires_grad_(True)
        v = torch.randn(2, heads, nk, head_dim, generator=g).to(device, work).requires_grad_(True)
        m = None if mask is None else mask.unsqueeze(1)  # (B, 1, 1, nk): broadcast over heads and queries
        fn = lambda q=q, k=k, v=v, m=m: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
        try:
            finite, err = _run(fn, [q, k, v], device, dtype, seed)
        except Exception as e:
            finite, err = False, f"{type(e).__name__}: {e}"
        results.append(
            {"inputs": f"sdpa {heads}x{head_dim}, {nq} queries x {nk} keys, {label}", "finite": finite, "error": err}
        )
    return results


def _takes(module, argument: str) -> bool:
    """Whether ``module``'s attention processor takes ``argument`` (by name, or through ``**kwargs``); True for a
    module without a processor to read."""
    processor = getattr(module, "processor", None)
    if processor is None or not callable(processor):
        return True
    try:
        params = inspect.signature(processor.__call__).parameters
    except (TypeError, ValueError):
        return True
    return argument in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _test_module(name, module, proc_cls, device, dtype, seed) -> dict[str, Any]:
    """Forward + backward of one attention module on adversarial inputs (or its SDPA directly)."""
    work = _module_dtype(module)
    query_dim = int(getattr(module, "query_dim", 0) or module.to_q.in_features)
    nq, nk = _lengths(device, query_dim)
    cross_dim = int(getattr(module, "cross_attention_dim", 0) or query_dim)
    heads = int(getattr(module, "heads", None) or getattr(module, "num_heads", None) or 1)  # Ideogram 4: num_heads
    inner = int(getattr(module, "inner_dim", 0) or query_dim)
    head_dim = max(1, inner // max(1, heads))
    g = torch.Generator(device="cpu").manual_seed(seed)
    scale = 8.0  # layer-norm'd activations of O(1) times 8: q.k logits in the hundreds
    hidden = torch.randn(2, nq, query_dim, generator=g) * scale
    hidden[:, :4] *= 4  # a few very hot tokens: the largest logits of a row
    hidden = hidden.to(device, work).requires_grad_(True)
    entry: dict[str, Any] = {"module": name, "processor": proc_cls, "kind": "module", "cases": []}
    cases: list[tuple[str, Callable, list[torch.Tensor]]] = []
    if getattr(module, "is_cross_attention", False):
        enc = (torch.randn(2, nk, cross_dim, generator=g) * scale).to(device, work).requires_grad_(True)
        for label, mask in _masks(2, nk, work, device).items():
            cases.append(
                (
                    f"{nq} queries x {nk} keys, {label}",
                    lambda m=mask: module(hidden, encoder_hidden_states=enc, attention_mask=m),
                    [hidden, enc],
                )
            )
    else:
        enc = (torch.randn(2, nk, query_dim, generator=g) * scale).to(device, work).requires_grad_(True)
        cases.append((f"{nq} tokens, self-attention", lambda: module(hidden), [hidden]))
        # joint attention (CogVideoX-style) needs the text stream as encoder_hidden_states; a processor that takes
        # no such argument (Ideogram 4's) is not called with it (diffusers would warn that it ignores it)
        if _takes(module, "encoder_hidden_states"):
            cases.append(
                (
                    f"{nq} + {nk} tokens, joint attention",
                    lambda: module(hidden, encoder_hidden_states=enc),
                    [hidden, enc],
                )
            )
    errors: list[str] = []
    for label, fn, inputs in cases:
        try:
            finite, err = _run(fn, inputs, device, dtype, seed)
        # NameError: a processor that needs an argument the canary does not pass (SANA-Video's linear attention
        # reads rotary_emb unconditionally: UnboundLocalError without it) is probed as plain SDPA instead.
        except (TypeError, AttributeError, ValueError, RuntimeError, IndexError, NameError) as e:
            errors.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
            continue
        entry["cases"].append({"inputs": label, "finite": finite, "error": err})
        if not getattr(module, "is_cross_attention", False):
            break  # one calling form that works is enough for self/joint attention
    fallback_reason = None if entry["cases"] else (errors[0] if errors else "no calling form worked")
    if fallback_reason is not None:
        entry["kind"] = "sdpa"
        entry["fallback_reason"] = fallback_reason
        entry["cases"] = _sdpa_direct(heads, head_dim, device, dtype, scale, seed)
    entry["finite"] = all(c["finite"] for c in entry["cases"])
    return entry


def _canary_pass(model, device, dtype, place: Placement) -> list[dict[str, Any]]:
    results = []
    for i, (name, module, cls) in enumerate(_attention_modules(model)):
        with place(module):
            results.append(_test_module(name, module, cls, device, dtype, seed=1234 + i))
    return results


def canary_in_place(module: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
    """The default placement: the module's weights are already on the device."""
    return contextlib.nullcontext()


def attention_canary(
    model: torch.nn.Module,
    device: torch.device | str,
    dtype: torch.dtype,
    log: Callable[[str], None] | None = None,
    place: Placement = canary_in_place,
) -> dict[str, Any]:
    """Run the canary and fall back to math SDPA if needed.

    ``place``: a context in which each tested attention module's weights are on ``device`` (FSDP2: its block waits
    in host memory until sharding, and only the module tested comes to the device: ``fsdp2.brought_in``).

    Returns ``{"kinds": [...per processor class...], "finite": bool (first pass),
    "fell_back": bool, "switched": [backend names disabled], "finite_after_fallback": bool | None,
    "ok": bool (attention is finite now), "message": str}``. ``ok`` False means even math SDPA
    gives NaN/Inf: the processor itself is broken and the caller decides whether to stop.
    """
    device = torch.device(device)
    log = log or (lambda m: None)
    modes = {m: m.training for m in model.modules()}
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            kinds = _canary_pass(model, device, dtype, place)
            result: dict[str, Any] = {
                "kinds": kinds,
                "finite": all(k["finite"] for k in kinds),
                "fell_back": False,
                "switched": [],
                "finite_after_fallback": None,
            }
            precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
            tested = (
                ", ".join(
                    f"{k['processor']} (`{k['module']}`{', via SDPA' if k['kind'] == 'sdpa' else ''})" for k in kinds
                )
                or "no diffusers attention module found"
            )
            if result["finite"]:
                result["ok"] = True
                result["message"] = f"attention canary: finite forward and backward under {precision} for {tested}."
                log(result["message"])
                return result
            bad = [k for k in kinds if not k["finite"]]
            bad_text = ", ".join(f"{k['processor']} (`{k['module']}`)" for k in bad)
            switched = use_math_sdpa_only()
            result["fell_back"] = True
            result["switched"] = switched
            again = _canary_pass(model, device, dtype, place)
            result["kinds_after_fallback"] = again
            result["finite_after_fallback"] = all(k["finite"] for k in again)
            result["ok"] = result["finite_after_fallback"]
            switched_text = ", ".join(switched) if switched else "nothing (only math was enabled already)"
            if result["ok"]:
                result["message"] = (
                    f"warning: attention canary: {bad_text} returned NaN/Inf under {precision} on adversarial inputs "
                    f"with the default SDPA backends. Fell back to PyTorch's math attention process-wide (disabled: "
                    f"{switched_text}); the re-run is finite. Training continues, with slower attention."
                )
            else:
                still = ", ".join(f"{k['processor']} (`{k['module']}`)" for k in again if not k["finite"])
                result["message"] = (
                    f"error: attention canary: {still} still returns NaN/Inf under {precision} with PyTorch's math "
                    f"attention (disabled: {switched_text}). The attention processor itself (or a fused kernel it "
                    "calls) is broken: replace it (model.set_attn_processor), disable fused kernels, or try "
                    "--mixed_precision no to confirm."
                )
            log(result["message"])
            return result
    finally:
        for m, training in modes.items():
            m.training = training
