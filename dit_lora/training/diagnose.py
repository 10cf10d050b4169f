"""Diagnose the first non-finite step: replay its micro-batch and say what went wrong and what to do.

:func:`diagnose_step` replays one recorded micro-batch twice, with the same noise and timesteps:

1. the inputs are checked row by row (non-finite latents/embeddings name their samples: *data*);
2. a replay at the run's precision (its autocast) with a forward hook on every module records the
   first module, in execution order, whose output holds NaN/Inf (name, type, dtypes, input and
   output statistics), then the loss and the first parameter whose gradient is non-finite;
3. the same replay with every floating parameter/buffer temporarily in fp32 and autocast off.

Finite in fp32 but not at run precision is *precision*; non-finite in both is *model/optimizer*;
finite in both is *not reproduced* (a transient fault). A quantized base (``--quantize_base``) keeps its
quantized weights in the fp32 replay (they are not floating tensors, and the full-precision ones are not in
memory), but bitsandbytes' nf4 linears compute in fp32 there (their ``compute_dtype``): so a finite fp32 replay
is a precision fault of the quantized base's compute, and ``report["quantized_base"]`` says which scheme ran. Gradients are computed with
``torch.autograd.grad``, so no ``.grad`` is written, no parameter value, optimizer state or RNG
stream of the run changes, and every dtype is restored to the exact tensor it was before.

The result is JSON-safe (NaN/Inf appear as the strings ``"nan"``, ``"inf"``, ``"-inf"``):
the recovery writes it to ``output_dir/nonfinite_report.json`` and
:func:`~.diagnose_advice.format_paragraph` renders the one paragraph the log shows, with advice.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch

from dit_lora.modeling.fp8_scaled import Fp8ScaledLinear
from dit_lora.training.diagnose_advice import MAX_NAMES, advice_for, format_paragraph

__all__ = [
    "CLASSES",
    "diagnose_step",
    "format_paragraph",
    "quantized_base",
    "tensor_stats",
]

#: Possible values of ``report["classification"]``.
CLASSES = ("data", "precision", "model/optimizer", "not reproduced", "unknown")

_MAX_INPUT_STATS = 8  # tensors described per module input


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _num(x: float | None) -> float | str | None:
    """A float for JSON: finite as is, NaN/Inf as strings."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _json_safe(obj: Any) -> Any:
    """Recursively convert to plain JSON types; non-finite floats become strings."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return _num(obj)
    if isinstance(obj, torch.Tensor):
        if obj.numel() == 1:
            return _json_safe(obj.item())
        return tensor_stats(obj)
    if isinstance(obj, torch.dtype):
        return _dtype_name(obj)
    try:  # numpy scalars and the like
        return _json_safe(obj.item())
    except Exception:
        return str(obj)


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, NaN/Inf counts and min/max/absmax/mean of the finite values (JSON-safe)."""
    d = t.detach()
    out: dict[str, Any] = {"shape": list(d.shape), "dtype": _dtype_name(d.dtype)}
    if d.numel() == 0:
        return {**out, "nan": 0, "inf": 0, "min": None, "max": None, "absmax": None, "mean": None}
    f = d.abs().float() if d.is_complex() else d.float()
    finite = torch.isfinite(f)
    vals = f[finite]
    out["nan"] = int(torch.isnan(f).sum())
    out["inf"] = int(torch.isinf(f).sum())
    if vals.numel():
        mn, mx, amax, mean = torch.stack([vals.min(), vals.max(), vals.abs().max(), vals.mean()]).tolist()
        out.update(min=_num(mn), max=_num(mx), absmax=_num(amax), mean=_num(mean))
    else:
        out.update(min=None, max=None, absmax=None, mean=None)
    return out


def _tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(label, tensor) for every tensor in nested outputs/inputs (tuples, lists, dicts, dataclasses)."""
    if isinstance(obj, torch.Tensor):
        yield prefix or "output", obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]" if prefix else f"[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif hasattr(obj, "__dataclass_fields__"):
        for k in obj.__dataclass_fields__:
            yield from _tensors(getattr(obj, k, None), f"{prefix}.{k}" if prefix else k)


def _all_finite(t: torch.Tensor) -> bool:
    if not (t.is_floating_point() or t.is_complex()):
        return True
    return bool(torch.isfinite(t).all())


def _batch_device(batch: dict) -> torch.device:
    for v in batch.values():
        if isinstance(v, torch.Tensor):
            return v.device
    return torch.device("cpu")


def _is_attention(module: torch.nn.Module) -> bool:
    name = type(module).__name__
    return hasattr(module, "processor") or "Attention" in name or name.endswith("Attn")


# ---------------------------------------------------------------------------------------------
# step 1: inputs
# ---------------------------------------------------------------------------------------------
def _check_inputs(batch: dict, sample_names: list[str]) -> dict[str, Any]:
    rows = len(sample_names)
    bad_rows: set[int] = set()
    problems = []
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        if value.ndim >= 1 and value.shape[0] == rows and rows > 0:
            flat = value.detach().reshape(rows, -1)
            row_bad = (~torch.isfinite(flat)).any(1).nonzero().flatten().tolist()
        else:
            row_bad = [] if _all_finite(value) else list(range(rows))
        if row_bad:
            bad_rows.update(row_bad)
            problems.append(
                {
                    "key": key,
                    "rows": row_bad,
                    "samples": [sample_names[r] for r in row_bad if r < rows],
                    "stats": tensor_stats(value),
                }
            )
    return {"finite": not problems, "nonfinite": problems, "bad_rows": sorted(bad_rows)}


# ---------------------------------------------------------------------------------------------
# steps 2 and 3: replays
# ---------------------------------------------------------------------------------------------
class _Recorder:
    """Forward hooks on every module: the first one whose output is non-finite, and the timesteps."""

    def __init__(self, model: torch.nn.Module):
        self.first: dict[str, Any] | None = None
        self.timesteps: list | None = None
        self.handles = []
        self._names = {m: n for n, m in model.named_modules()}
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_hook(partial(self._hook, name), with_kwargs=True))
        self.handles.append(model.register_forward_pre_hook(self._pre_hook, with_kwargs=True))

    def _pre_hook(self, module, args, kwargs):
        if self.timesteps is None:
            t = kwargs.get("timestep", kwargs.get("timesteps"))
            if isinstance(t, torch.Tensor):
                self.timesteps = t.detach().float().flatten().cpu().tolist()
        return None

    def _hook(self, name, module, args, kwargs, output):
        if self.first is not None:
            return None
        outs = list(_tensors(output))
        bad = [(label, t) for label, t in outs if not _all_finite(t)]
        if not bad:
            return None
        inputs = list(_tensors(args, "args")) + list(_tensors(kwargs, ""))
        inputs_finite = all(_all_finite(t) for _, t in inputs)
        params = [p for p in module.parameters(recurse=False)]
        self.first = {
            "name": name or "<model>",
            "type": type(module).__name__,
            "parent": (name.rsplit(".", 1)[0] if "." in name else "<model>") if name else None,
            "param_dtype": _dtype_name(params[0].dtype) if params else None,
            "output_dtype": _dtype_name(bad[0][1].dtype),
            "output": {label: tensor_stats(t) for label, t in bad[:_MAX_INPUT_STATS]},
            "inputs_finite": inputs_finite,
            "inputs": {label: tensor_stats(t) for label, t in inputs[:_MAX_INPUT_STATS]},
            "is_attention": _is_attention(module),
            "autocast": torch.is_autocast_enabled(bad[0][1].device.type),
        }
        return None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


def _attention_context(model: torch.nn.Module, name: str) -> dict[str, Any] | None:
    """The innermost attention module on the path to ``name`` (itself included), with its processor."""
    if name == "<model>":
        return None
    parts = name.split(".")
    found = None
    for i in range(1, len(parts) + 1):
        path = ".".join(parts[:i])
        try:
            mod = model.get_submodule(path)
        except AttributeError:
            break
        if _is_attention(mod):
            proc = getattr(mod, "processor", None)
            found = {
                "module": path,
                "type": type(mod).__name__,
                "processor": type(proc).__name__ if proc is not None else None,
            }
    return found


@contextlib.contextmanager
def _model_in_fp32(model: torch.nn.Module) -> Iterator[None]:
    """Every floating parameter/buffer in fp32, then back to the exact original tensors.

    Parameters keep their identity (``.data`` is swapped, the optimizer's references stay valid);
    the original storage is put back, so restoring is bitwise. accelerate's autocast wrapper around
    ``forward`` (kept by ``unwrap_model``) is bypassed meanwhile.
    """
    params: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    buffers: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    old_forward: Callable[..., Any] | None = None  # accelerate's wrapper, while it is bypassed
    try:
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point() and p.dtype != torch.float32:
                    original = p.data
                    params.append((p, original))
                    p.data = original.float()
            for module in model.modules():
                for bname, buf in list(module._buffers.items()):
                    if buf is not None and buf.is_floating_point() and buf.dtype != torch.float32:
                        buffers.append((module, bname, buf))
                        module._buffers[bname] = buf.float()
        original_forward = getattr(model, "_original_forward", None)
        if "forward" in model.__dict__ and original_forward is not None:
            old_forward = model.__dict__["forward"]
            model.forward = original_forward
        yield
    finally:
        if old_forward is not None:
            model.forward = old_forward
        with torch.no_grad():
            for module, bname, buf in reversed(buffers):
                module._buffers[bname] = buf
            for p, original in reversed(params):
                p.data = original


def _bnb_class(name: str):
    """bitsandbytes' ``nn.<name>`` when bitsandbytes is already imported (a quantized model imported it), else None."""
    bnb = sys.modules.get("bitsandbytes")
    return getattr(getattr(bnb, "nn", None), name, None)


def quantized_base(model: torch.nn.Module) -> dict[str, Any] | None:
    """The quantized linears of ``model`` (bitsandbytes nf4/int8, torchao fp8, fp8_scaled): scheme, count and the
    compute dtype of the 4-bit ones; None for an unquantized model. PEFT's LoRA wrappers are not counted, their base
    layers are."""
    four, eight = _bnb_class("Linear4bit"), _bnb_class("Linear8bitLt")
    schemes: set[str] = set()
    compute, count = None, 0
    for module in model.modules():
        weight = getattr(module, "_parameters", {}).get("weight")
        if four is not None and isinstance(module, four):
            schemes.add(getattr(weight, "quant_type", None) or "nf4")
            compute = compute or module.compute_dtype
        elif eight is not None and isinstance(module, eight):
            schemes.add("int8")
        elif isinstance(module, Fp8ScaledLinear):  # computes in the replay's fp32 by itself (its input's dtype)
            schemes.add("fp8_scaled")
        elif weight is not None and type(weight.data).__module__.startswith("torchao"):
            schemes.add("fp8")
        else:
            continue
        count += 1
    if not count:
        return None
    return {
        "scheme": "/".join(sorted(schemes)),
        "modules": count,
        "compute_dtype": _dtype_name(compute) if compute is not None else None,
    }


@contextlib.contextmanager
def _quantized_compute_in_fp32(model: torch.nn.Module) -> Iterator[None]:
    """bitsandbytes' 4-bit linears compute in fp32 meanwhile (their weights stay quantized), then as before."""
    four = _bnb_class("Linear4bit")
    saved = [(m, m.compute_dtype) for m in model.modules() if four is not None and isinstance(m, four)]
    try:
        for module, _ in saved:
            module.compute_dtype = torch.float32
        yield
    finally:
        for module, dtype in saved:
            module.compute_dtype = dtype


def _grads(loss: torch.Tensor, named: list[tuple[str, torch.nn.Parameter]]) -> list[torch.Tensor | None]:
    """Gradients of ``loss`` w.r.t. the trainable parameters without writing ``.grad``."""
    params = [p for _, p in named]
    try:
        return list(torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True))
    except RuntimeError:
        # e.g. reentrant activation checkpointing refuses autograd.grad: use backward, then put
        # every .grad back exactly as it was.
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            loss.backward()
            return [p.grad for p in params]
        finally:
            for p, g in zip(params, saved):
                p.grad = g


def _replay(model, loss_fn, batch, generator_state, device, ctx_factory, fault_context, label) -> dict[str, Any]:
    result: dict[str, Any] = {
        "precision": label,
        "autocast_dtype": None,
        "first_nonfinite_module": None,
        "loss": None,
        "loss_finite": None,
        "grad_norm": None,
        "first_nonfinite_grad": None,
        "num_nonfinite_grads": 0,
        "timesteps": None,
        "error": None,
        "nonfinite": None,
    }
    generator = torch.Generator(device=device)
    generator.set_state(generator_state)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    recorder = None
    try:
        with (fault_context or contextlib.nullcontext)():
            # Hooks go on after the drill's hooks so they see what the drill did to an output.
            recorder = _Recorder(model)
            with ctx_factory():
                dev = device.type
                if torch.is_autocast_enabled(dev):
                    result["autocast_dtype"] = _dtype_name(torch.get_autocast_dtype(dev))
                    result["precision"] = f"{label} (autocast {result['autocast_dtype']})"
                loss = loss_fn(model, batch, generator)
            result["loss"] = float(loss.detach().float().sum())
            result["loss_finite"] = math.isfinite(result["loss"])
            if trainable and loss.requires_grad:
                grads = _grads(loss, trainable)
                norms = []
                for (name, _), g in zip(trainable, grads):
                    if g is None:
                        continue
                    norms.append(torch.linalg.vector_norm(g.detach().float()))
                    if not _all_finite(g):
                        result["num_nonfinite_grads"] += 1
                        if result["first_nonfinite_grad"] is None:
                            result["first_nonfinite_grad"] = {"name": name, "stats": tensor_stats(g)}
                if norms:
                    result["grad_norm"] = float(torch.linalg.vector_norm(torch.stack(norms)))
                del grads
            del loss
    except Exception as err:  # an OOM or a kernel error is reported, never raised into the run
        result["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500]
        if device.type == "cuda":
            torch.cuda.empty_cache()
    finally:
        if recorder is not None:
            recorder.remove()
            result["first_nonfinite_module"] = recorder.first
            result["timesteps"] = recorder.timesteps
    gn = result["grad_norm"]
    if result["error"] is not None and result["loss"] is None and recorder is not None and recorder.first is None:
        result["nonfinite"] = None  # could not tell
    else:
        result["nonfinite"] = bool(
            recorder is not None
            and recorder.first is not None
            or result["loss_finite"] is False
            or result["num_nonfinite_grads"] > 0
            or (gn is not None and not math.isfinite(gn))
        )
    return result


def _seed_replay(device: torch.device, seed: int = 0) -> None:
    """Seed the global CPU RNG (and the batch's CUDA device) so both replays draw the same dropout."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


def _nonfinite_params(model: torch.nn.Module) -> dict[str, Any]:
    names: list[str] = []
    count = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                count += 1
                if len(names) < MAX_NAMES:
                    names.append(name)
    return {"count": count, "names": names}


def _weights_dtype(model: torch.nn.Module) -> torch.dtype | None:
    sizes: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point() and not p.requires_grad:
            sizes[p.dtype] = sizes.get(p.dtype, 0) + p.numel()
    return max(sizes, key=lambda dtype: sizes[dtype]) if sizes else None


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
def _replay_both(
    model,
    loss_fn,
    batch,
    generator_state,
    device,
    autocast_ctx,
    fault_context,
    inputs_finite: bool,
    quantized: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The micro-batch replayed at the run's precision and, when its inputs are finite, in fp32.

    Both replays see the same dropout masks; the run's RNG streams and the modules' train/eval modes are
    restored afterwards.
    """
    modes = {m: m.training for m in model.modules()}
    devices = [device] if device.type == "cuda" else []
    replays: dict[str, Any] = {}
    try:
        with torch.random.fork_rng(devices=devices):
            _seed_replay(device)
            replays["run_precision"] = _replay(
                model, loss_fn, batch, generator_state, device, autocast_ctx, fault_context, "run precision"
            )
            if inputs_finite:
                _seed_replay(device)
                batch32 = {
                    k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in batch.items()
                }
                label = "fp32" if quantized is None else f"fp32 (the {quantized['scheme']} weights, computed in fp32)"
                try:
                    with _model_in_fp32(model), _quantized_compute_in_fp32(model):
                        replays["fp32"] = _replay(
                            model,
                            loss_fn,
                            batch32,
                            generator_state,
                            device,
                            lambda: torch.autocast(device.type, enabled=False),
                            fault_context,
                            label,
                        )
                finally:
                    del batch32
    finally:
        for m, training in modes.items():
            m.training = training
    return replays


def classify(inputs_finite: bool, run: dict, fp32: dict | None) -> str:
    """One of :data:`CLASSES` from the two replays: bad data, a precision fault, or one fp32 shares."""
    if not inputs_finite:
        return "data"
    if run["nonfinite"] is None or (fp32 is not None and fp32["nonfinite"] is None and run["nonfinite"]):
        return "unknown"
    if fp32 is not None and fp32["nonfinite"]:
        return "model/optimizer"
    if run["nonfinite"]:
        return "precision"
    return "not reproduced"


def diagnose_step(
    *,
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, dict, torch.Generator], torch.Tensor],
    batch: dict,
    generator_state: torch.Tensor,
    autocast_ctx: Callable[[], Any],
    sample_names: list[str],
    step: int,
    observed: dict,
    fault_context: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Replay one non-finite micro-batch and classify the fault; returns a JSON-safe report.

    ``model`` is the unwrapped (PEFT) model, ``loss_fn(model, batch, generator)`` the family's
    loss, ``generator_state`` the noise generator's state taken before that micro-batch's loss,
    ``autocast_ctx()`` the run's autocast context, ``sample_names[i]`` the name of row ``i``,
    ``observed`` what the loop saw (e.g. ``loss``, ``grad_norm``, ``nonfinite_loss``,
    ``nonfinite_grad``; ``learning_rate``, ``max_grad_norm``, ``train_backbone`` sharpen the advice),
    and ``fault_context()`` re-applies injected fault drills around each replay.

    Report keys: ``step``, ``classification`` (one of :data:`CLASSES`), ``samples``, ``timesteps``,
    ``observed``, ``inputs``, ``replays`` (``run_precision``, ``fp32``), ``nonfinite_parameters``,
    ``first_module`` (attention context included), ``advice`` (list) and ``paragraph``.
    """
    device = _batch_device(batch)
    names = list(sample_names)
    rows = len(names)
    indices = batch.get("sample_index")
    samples = [
        {
            "row": i,
            "name": names[i],
            "sample_index": int(indices[i]) if indices is not None and i < len(indices) else None,
        }
        for i in range(rows)
    ]
    weights_dtype = _weights_dtype(model)
    inputs = _check_inputs(batch, names)
    quantized = quantized_base(model)
    replays = _replay_both(
        model, loss_fn, batch, generator_state, device, autocast_ctx, fault_context, inputs["finite"], quantized
    )
    params = _nonfinite_params(model)
    run, fp32 = replays["run_precision"], replays.get("fp32")
    first = run.get("first_nonfinite_module") or (fp32 or {}).get("first_nonfinite_module")
    first_info = None
    if first is not None:
        first_info = {
            "name": first["name"],
            "type": first["type"],
            "output_dtype": first["output_dtype"],
            "inputs_finite": first["inputs_finite"],
            "attention": _attention_context(model, first["name"]),
        }
    timesteps = run.get("timesteps") or (fp32 or {}).get("timesteps")
    report: dict[str, Any] = {
        "step": int(step),
        "classification": classify(inputs["finite"], run, fp32),
        "samples": samples,
        "timesteps": timesteps,
        "observed": dict(observed or {}),
        "weights_dtype": _dtype_name(weights_dtype) if weights_dtype is not None else None,
        "quantized_base": quantized,
        "inputs": inputs,
        "replays": replays,
        "first_module": first_info,
        "nonfinite_parameters": params,
    }
    report["advice"] = advice_for(report)
    report = _json_safe(report)
    report["paragraph"] = format_paragraph(report)
    return report
