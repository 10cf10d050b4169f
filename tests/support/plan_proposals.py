"""What the memory plan proposes, fed back to the run it was printed for: every rung's flag line of the ladder,
climbed on a card too small for any (so every rung is tried), parsed and checked as ``dit-lora train`` checks its
options. The issue: Sana was told `--height 5024 --width 4992` (options of video families) and, on a CPU where
bitsandbytes rounds 4-bit weights wrongly, `--quantize_base nf4`."""

from __future__ import annotations

import shlex

#: a card no rung fits: the ladder tries every rung
TINY_CARD = 1 << 20


def climbed(args: list[str], device: str):
    """The ladder of ``args`` (a run's flags) planned for ``device`` as ``dit-lora plan`` plans it, on a 1 MiB card."""
    from dit_lora.plan import ladder, make_plan
    from dit_lora.setup.resolve import resolve

    resolved = resolve(args, prog="dit-lora plan", needs_data=False, build_demo=False, validate=False)
    entry = resolved.defaults.entry if resolved.defaults is not None else None
    plan = make_plan(resolved.config, resolved.spec, device=device, entry=entry, cache=True)
    return ladder.climb(plan, TINY_CARD)


def proposals(args: list[str], device: str) -> list[list[str]]:
    """Each rung's whole flag line (from the configuration as given), as the ladder's answer prints it."""
    from dit_lora.plan import ladder

    found = climbed(args, device)
    lines = [found.flags(t) for t in found.tried if t.rung != ladder.RUNGS[0].name]
    answer = ladder.answer(found)
    assert " ".join(found.flags()) in answer  # what is checked below is what the answer prints
    return [shlex.split(shlex.join(line)) for line in lines]


def accepted(args: list[str], flags: list[str], device: str) -> None:
    """``args`` with ``flags`` resolved as a training run resolves them (the family's checks included) and the
    quantization asked for judged on ``device`` (on a CPU, this machine's); raises the run's refusal."""
    from dit_lora.modeling import quantize
    from dit_lora.setup.resolve import resolve

    resolved = resolve([*args, *flags], build_demo=False, validate=True)
    if device == "cpu":
        quantize.check_config(resolved.config.model, resolved.config.training, device, resolved.spec)
