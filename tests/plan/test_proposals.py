"""What the memory plan proposes is what the run accepts (issue 76, point 2): Sana at `--resolution 100000` waited
minutes to be told `--height 5024 --width 4992` (options of video families, refused by Sana) and `--quantize_base
nf4` on a CPU where bitsandbytes rounds 4-bit weights wrongly. Each flag line here is fed back to the run it was
printed for; the conformance suite does the same for every family's demo (conformance_checks.py)."""

from __future__ import annotations

import time

import pytest

from dit_lora.core.errors import UserError
from plan_proposals import accepted, climbed, proposals


def _sana(tiny_sana, *flags: str) -> list[str]:
    return ["--family", "sana", "--pretrained_model_name_or_path", str(tiny_sana), "--train_data_dir", "data",
            "--train_batch_size", "4", *flags]


@pytest.mark.parametrize("size", [
    ["--resolution", "544"],  # not a multiple of the 64-pixel step: the cut's sides came out unequal (--height/--width)
    ["--aspect_buckets", "768x512"],  # a fixed size that is not square
    ["--aspect_buckets", "512x512"],  # a fixed square: --resolution would change nothing (a fixed size ignores it)
])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_rung_of_an_image_family_is_accepted_with_its_own_size_option(tiny_sana, size, device):
    args = _sana(tiny_sana, *size)
    lines = proposals(args, device)
    cut = lines[-1]
    assert "--height" not in cut and "--width" not in cut
    assert cut[-2] == size[0]  # the size comes down in the option the run was sized by
    if size[0] == "--resolution":
        assert int(cut[-1]) % 64 == 0 and int(cut[-1]) < 544
    else:
        width, height = map(int, cut[-1].split("x"))
        wide, high = map(int, size[1].split("x"))
        assert width < wide and height < high and abs(width / height - wide / high) < 0.1
    for flags in lines:
        accepted(args, flags, device)


def test_the_old_cut_was_refused_by_the_run(tiny_sana):
    """What the ladder proposed before, fed back the same way: the check above can fail."""
    with pytest.raises(UserError, match="--height"):
        accepted(_sana(tiny_sana), ["--height", "512", "--width", "448"], "cpu")


def test_on_a_cpu_where_nf4_rounds_wrongly_no_lever_proposes_it(tiny_sana, monkeypatch):
    from dit_lora.modeling import quantize

    args = _sana(tiny_sana, "--resolution", "512")
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: "bitsandbytes rounds 4-bit weights wrongly here")
    flags = [f for line in proposals(args, "cpu") for f in line]
    assert "nf4" not in flags and "--quantize_text_encoder" not in flags
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: None)  # where it rounds right, nf4 is a lever again
    found = climbed(args, "cpu")
    assert found.base.quantize_savings.get("nf4") and found.base.nf4_text_encoder_savings


def test_a_gpu_plan_made_on_a_cpu_keeps_every_lever(tiny_sana, monkeypatch):
    """Planning for a GPU this machine does not have: the levers are the GPU's, not this CPU's."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # a CPU machine, wherever the test runs
    found = climbed(_sana(tiny_sana, "--resolution", "512"), "cuda")
    assert set(found.base.quantize_savings) == {"nf4", "int8", "fp8", "fp8_scaled"}


@pytest.mark.parametrize("flags", [
    ["--resolution", "100000"], ["--aspect_buckets", "100000x512"],
])
def test_an_absurd_size_is_refused_in_a_second_before_any_tracing(tiny_sana, flags):
    from dit_lora.commands.cli import _main

    started = time.monotonic()
    with pytest.raises(UserError, match=r"\(0, 8192\]: pixels a side; the largest size any family here generates "
                                        r"natively is 4096"):
        _main(["plan", *_sana(tiny_sana, *flags), "--device", "cpu"])
    assert time.monotonic() - started < 5  # it took 239 s of aspect buckets and tracing


def test_a_plan_for_another_card_keeps_every_lever_and_the_command_says_so(tiny_sana, monkeypatch):
    """`dit-lora plan --gpu_memory 80GB` on a machine with another GPU judged the levers by the local card."""
    import dit_lora.plan as plan_package
    from dit_lora.commands.cli import _main
    from dit_lora.modeling import quantize
    from dit_lora.plan import make_plan
    from dit_lora.setup.resolve import resolve

    monkeypatch.setattr(quantize, "runnable_schemes", lambda device: {"fp8_scaled"})  # this machine's card
    resolved = resolve(_sana(tiny_sana, "--resolution", "256"), needs_data=False, build_demo=False, validate=False)
    here = make_plan(resolved.config, resolved.spec, device="cuda")
    there = make_plan(resolved.config, resolved.spec, device="cuda", levers_here=False)
    assert set(here.quantize_savings) == {"fp8_scaled"} and set(there.quantize_savings) == {"nf4", "int8", "fp8",
                                                                                            "fp8_scaled"}
    asked = []
    real = plan_package.make_plan
    monkeypatch.setattr(plan_package, "make_plan", lambda *a, **k: asked.append(k["levers_here"]) or real(*a, **k))
    for flags in (["--gpu_memory", "80GB"], ["--device", "cpu", "--gpu_memory", "8GB"], []):
        _main(["plan", *_sana(tiny_sana, "--resolution", "256"), *flags])
    assert asked == [False, True, True]
