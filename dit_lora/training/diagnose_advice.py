"""Turn a non-finite diagnosis into advice and the one paragraph the log shows.

Kept apart from :mod:`.diagnose` (which replays and measures) so the wording can change without
touching the replay machinery.
"""

from __future__ import annotations

from typing import Any

MAX_NAMES = 10  # names listed per category (parameters, rows)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _flag_now(observed: dict, key: str) -> str:
    value = observed.get(key)
    return f" (now {_fmt(value)})" if value is not None else ""


def advice_for(report: dict[str, Any]) -> list[str]:
    """The advice lines for a diagnosis ``report``: what its classification points to, then the attention note."""
    cls = report["classification"]
    first = report["first_module"]
    if cls == "data":
        advice = _data_advice(report)
    elif cls == "precision":
        advice = _precision_advice(report)
    elif cls == "model/optimizer":
        advice = _optimizer_advice(report)
    elif cls == "not reproduced":
        advice = _not_reproduced_advice(report["observed"])
    else:
        errors = "; ".join(r.get("error") or "" for r in report["replays"].values() if r.get("error"))
        advice = [
            f"the replay could not finish ({errors or 'unknown error'}); rerun with a smaller "
            "--train_batch_size or on a larger device to diagnose."
        ]
    if first and first.get("attention"):
        att = first["attention"]
        advice.append(
            f"the first non-finite output is in attention `{att['module']}` (processor {att['processor']}): "
            "run with --attention_canary, or disable fused attention kernels (force PyTorch's math SDPA) to rule "
            "out the kernel."
        )
    return advice


def _data_advice(report: dict[str, Any]) -> list[str]:
    """Non-finite inputs: the samples and their keys to fix."""
    bad = report["inputs"]["nonfinite"]
    names = sorted({s for p in bad for s in p["samples"]})
    keys = ", ".join(p["key"] for p in bad)
    return [
        f"check sample(s) {', '.join(names[:MAX_NAMES])}: their {keys} hold NaN/Inf. Fix or remove the "
        "file(s) (and their cache entries), and run `dit-lora check-data` to scan the whole dataset."
    ]


def _precision_advice(report: dict[str, Any]) -> list[str]:
    """Non-finite at run precision, finite in fp32: the precision to change, then the learning rate."""
    run, first = report["replays"]["run_precision"], report["first_module"]
    where = f"module `{first['name']}` ({first['type']})" if first else "the loss or gradients"
    fp16 = run.get("autocast_dtype") == "float16" or report.get("weights_dtype") == "float16"
    if report.get("quantized_base"):
        advice = [_quantized_precision_advice(report["quantized_base"], where, fp16)]
    elif fp16:
        advice = [
            f"fp16 overflows in {where} (fp16 ends at 65504) while the fp32 replay is finite: use "
            "--mixed_precision bf16 with a BF16 checkpoint."
        ]
    else:
        advice = [
            f"{run.get('autocast_dtype') or report.get('weights_dtype') or 'reduced precision'} goes non-finite "
            f"in {where} while the fp32 replay "
            f"is finite: keep that module in fp32 (upcast its computation), or confirm with --mixed_precision no."
        ]
    advice.append(
        f"if activations grew during training, lower --learning_rate{_flag_now(report['observed'], 'learning_rate')}."
    )
    return advice


def _optimizer_advice(report: dict[str, Any]) -> list[str]:
    """The fault reproduces in fp32: the weights, learning rate, quantization, clipping and backbone to check."""
    observed, run, first = report["observed"], report["replays"]["run_precision"], report["first_module"]
    advice: list[str] = []
    if report["nonfinite_parameters"]["count"]:
        advice.append(
            f"weights are already non-finite (e.g. `{report['nonfinite_parameters']['names'][0]}`): a bad "
            "update was applied; resume from the last checkpoint (--resume_from_checkpoint latest) with a "
            "lower --learning_rate."
        )
    advice.append(f"the fault reproduces in fp32: lower --learning_rate{_flag_now(observed, 'learning_rate')}")
    if report.get("quantized_base"):
        scheme = report["quantized_base"]["scheme"]
        other = "none" if scheme in ("int8", "fp8_scaled") else "int8 or none"
        advice.append(
            f"the fp32 replay kept the base's {scheme} weights (--quantize_base {scheme}): if the run is "
            "finite without --quantize_base, their quantization error is the cause; try --quantize_base "
            f"{other}"
        )
    mgn = observed.get("max_grad_norm")
    if mgn is None:
        advice.append("keep gradient clipping on (--max_grad_norm 1.0; 0 disables it)")
    elif isinstance(mgn, (int, float)) and mgn <= 0:
        advice.append(f"enable gradient clipping with --max_grad_norm 1.0 (now {_fmt(mgn)}: off)")
    advice.append(
        "check --train_backbone: unfrozen norms/embeddings at a high --backbone_learning_rate diverge "
        "easily" + (f" (now {observed['train_backbone']})" if observed.get("train_backbone") else "")
    )
    if first is None and run.get("loss_finite") is False:
        advice.append(
            "every module output is finite but the loss is not: look at the loss computation "
            "(timestep weighting, targets) or an injected loss fault."
        )
    elif first is None and run.get("first_nonfinite_grad"):
        advice.append(
            f"the forward pass is finite but the gradient of `{run['first_nonfinite_grad']['name']}` "
            "is not: the backward overflows (e.g. a division by a tiny denominator)."
        )
    return advice


def _not_reproduced_advice(observed: dict[str, Any]) -> list[str]:
    """Finite when replayed: a transient fault, and the compiled step when it ran compiled."""
    advice: list[str] = []
    seen = ", ".join(f"{k}={_fmt(v)}" for k, v in observed.items() if v is not None) or "nothing recorded"
    advice.append(
        "replaying the micro-batch at run precision and in fp32 gave finite loss and gradients: the fault "
        f"was transient (e.g. a nondeterministic kernel or a hardware/communication error; the loop saw "
        f"{seen}). If it recurs, keep --attention_canary on and disable fused kernels."
    )
    if observed.get("compile") not in (None, "off"):  # the replay is eager: compiled code is never replayed
        advice.append(
            f"the step ran compiled (--compile {observed['compile']}) and the replay eagerly: if the "
            "fault recurs, train with --compile off to rule out the compiled code."
        )
    return advice


def _quantized_precision_advice(quantized: dict[str, Any], where: str, fp16: bool) -> str:
    """A precision fault on a quantized base: its quantized linears' reduced-precision compute, and the way out."""
    scheme, compute = quantized["scheme"], quantized.get("compute_dtype")
    head = (
        f"this is a precision fault of the quantized base (--quantize_base {scheme}, {quantized['modules']} quantized "
        f"linears{f' computing in {compute}' if compute else ''}): the step goes non-finite in {where}, while the "
        f"fp32 replay, with the same {scheme} weights, is finite. "
    )
    if scheme == "int8":  # LLM.int8 quantizes its activations in the replay too: it is not precision-free there
        head = head.replace(
            ", is finite. ",
            " and the rest of the model in fp32, is finite (LLM.int8 still quantizes its inputs there). ",
        )
    if fp16 or compute == "float16":
        return head + (
            "fp16 ends at 65504: train with --mixed_precision bf16 (the quantized linears then compute in "
            "bf16), or with --quantize_base int8 or none."
        )
    if scheme == "int8":
        return head + "Train with --quantize_base none, or keep int8 and lower --learning_rate."
    if scheme == "fp8_scaled":  # it computes in the run's precision, as an unquantized base does
        return head + "Train with --mixed_precision no (fp32 compute, the same fp8 weights), or --quantize_base none."
    return head + (
        "Train with --quantize_base int8 (8-bit weights, its outliers in 16 bits) or none, or keep "
        f"{scheme} and compute in fp32 with --mixed_precision no."
    )


def _replay_text(r: dict[str, Any], cls: str | None) -> str:
    if r.get("error") and r.get("loss") is None:
        return f"{r['precision']}: failed ({r['error']})"
    if not r.get("nonfinite"):
        return f"{r['precision']}: finite (loss {_fmt(r.get('loss'))}, grad norm {_fmt(r.get('grad_norm'))})"
    parts = []
    first = r.get("first_nonfinite_module")
    if first:
        out: dict[str, Any] = next(iter(first["output"].values()), {})
        where = (
            f"first non-finite output in `{first['name']}` ({first['type']}, {first['output_dtype']}, "
            f"{out.get('nan', 0)} NaN / {out.get('inf', 0)} Inf"
        )
        if not first["inputs_finite"]:
            if cls == "data" or first.get("parent") is None:
                where += "; its inputs were already non-finite"
            else:
                where += (
                    f"; its inputs were already non-finite, so code outside any submodule made them: the "
                    f"forward of `{first['parent']}` or the loss function"
                )
        else:
            absmax = [s.get("absmax") for s in first["inputs"].values() if isinstance(s.get("absmax"), float)]
            if absmax:
                where += f"; input absmax {_fmt(max(absmax))}"
        parts.append(where + ")")
    parts.append(f"loss {_fmt(r.get('loss'))}")
    if r.get("first_nonfinite_grad"):
        parts.append(
            f"first non-finite gradient `{r['first_nonfinite_grad']['name']}` ({r['num_nonfinite_grads']} in all)"
        )
    elif r.get("grad_norm") is not None:
        parts.append(f"grad norm {_fmt(r['grad_norm'])}")
    return f"{r['precision']}: " + ", ".join(parts)


def format_paragraph(report: dict[str, Any]) -> str:
    """One readable paragraph: what happened, where, on which samples, and what to do."""
    if not report:
        return "no non-finite step was diagnosed."
    observed = report.get("observed") or {}
    seen = ", ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in observed.items() if v is not None) or "no figures"
    names = [s["name"] for s in report.get("samples", [])]
    text = [
        f"Step {report.get('step')} went non-finite (the loop saw {seen}); diagnosis: {report.get('classification')}."
    ]
    sample_text = ", ".join(names[:MAX_NAMES]) + (
        f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    )
    text.append(f"Micro-batch: {sample_text or 'unknown samples'}")
    if report.get("timesteps"):
        text[-1] += " at timesteps " + ", ".join(_fmt(t) for t in report["timesteps"][:MAX_NAMES])
    text[-1] += "."
    inputs = report.get("inputs") or {}
    for p in inputs.get("nonfinite", []):
        text.append(f"Input `{p['key']}` is non-finite in sample(s) {', '.join(p['samples'])}.")
    for key in ("run_precision", "fp32"):
        r = (report.get("replays") or {}).get(key)
        if r is not None:
            text.append("Replay " + _replay_text(r, report.get("classification")) + ".")
    params = report.get("nonfinite_parameters") or {}
    if params.get("count"):
        text.append(f"{params['count']} parameter(s) are already non-finite, e.g. `{params['names'][0]}`.")
    advice = report.get("advice") or []
    if advice:
        items = [a[0].upper() + a[1:] + ("" if a.endswith((".", "!", "?")) else ".") for a in advice if a]
        text.append("What to do: " + " ".join(items))
    return " ".join(text)
