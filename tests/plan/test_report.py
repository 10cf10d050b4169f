"""plan/report.py: memory sizes as written, the plan's table, the advice on what fits and the start-of-run gate."""

import pytest

from dit_lora.core.errors import UserError
from dit_lora.plan import ladder
from dit_lora.plan.estimate import Plan
from dit_lora.plan.tracing import StepTrace
from dit_lora.plan.report import advice, check_fits, format_plan, parse_memory


def make_plan(**changes):
    """A 6 GiB model whose step needs 4 GiB of activations (1 GiB with checkpointing) at batch 2."""
    fields = dict(model="m", family="sana", catalogue_entry=None, device="cuda", num_processes=1, train_batch_size=2,
                  gradient_accumulation_steps=1, depth=2, weights={"model": 6 * 2**30}, trained_component="model",
                  trainable_params=1, optimizer_bytes=0, snapshot_bytes=0, ddp_bytes=0, cache_phase_bytes=None,
                  encoders_in_training=False, process_bytes=0, checkpointing=False,
                  steps=[StepTrace("b", False, 4 * 2**30, 1), StepTrace("b", True, 2**30, 2)])
    fields.update(changes)
    return Plan(**fields)


@pytest.mark.parametrize("text, expected", [("24GB", 24 * 2**30), ("24GiB", 24 * 2**30), ("80g", 80 * 2**30),
                                            ("16000MB", 16000 * 2**20), ("0.5T", 2**39), ("12", 12 * 2**30)])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


def test_parse_memory_refuses_nonsense():
    with pytest.raises(UserError, match="--gpu_memory"):
        parse_memory("a lot")


def test_advice_warns_when_the_headroom_is_within_the_plans_error():
    plan = make_plan()
    assert advice(plan, 16 * 2**30).startswith("fits: 10.00 GiB of 16.00 GiB (6.00 GiB to spare, the plan's 15% error")
    assert advice(plan, 12 * 2**30).startswith("fits: ")  # 10 of 12: 16.7% left, more than the plan's error
    narrow = advice(plan, 11 * 2**30)  # 9.1% left: under the card, inside the plan's error
    assert narrow.startswith(
        "fits, narrowly: 10.00 GiB of 11.00 GiB, inside the 15% the plan has come out below a peak measured on a GPU "
        "(benchmarks/RESULTS.md), so the run may run out of memory"
    )
    # the lever that leaves the plan's error (11 x 0.848 = 9.33 GiB): the ladder's, not a fixed guess
    assert narrow.endswith("the flags that keep it free: --gradient_checkpointing true (predicted 7.00 GiB).")
    tight = advice(plan, 9 * 2**30)
    assert tight.startswith("does not fit: the predicted peak 10.00 GiB exceeds 9.00 GiB. The ladder's answer: ")
    assert "flags to copy: --gradient_checkpointing true (predicted peak 7.00 GiB of 9.00 GiB, leaving the 15%" in tight


def test_one_phrase_for_a_narrow_fit_in_the_plan_the_gate_and_the_guides():
    """"fits, narrowly" is ladder.narrowly's words wherever it is said: the advice, the ladder's answer, the run's
    gate; the guides' fit tables write its head ("fits, narrowly") from the same test."""
    plan = make_plan()
    phrase = ladder.narrowly(plan.peak_memory_bytes, 11 * 2**30)
    assert phrase.startswith("fits, narrowly: ") and f"inside the {ladder.GPU_ERROR:.0%}" in phrase
    assert advice(plan, 11 * 2**30).startswith(phrase)
    assert phrase in check_fits(plan, 11 * 2**30, "this NVIDIA GeForce RTX 2080 Ti (cuda:0)")


def test_advice_names_a_larger_cache_device_when_the_caching_phase_sets_the_peak():
    caching = make_plan(train_batch_size=1, steps=[StepTrace("b", False, 4 * 2**30, 1)], cache_phase_bytes=12 * 2**30)
    text = advice(caching, 8 * 2**30)
    assert "no lever the plan knows fits 8.00 GiB" in text
    assert "build the latent cache (its phase: 12.00 GiB, the encoders beside the model) once on a larger device" in text


def test_the_table_names_every_row_and_appends_the_advice():
    plan = make_plan(catalogue_entry="org/model", quantized="nf4", ddp_bytes=2**30)
    table = format_plan(plan)
    head = table.splitlines()[0]
    assert head.startswith("memory plan for `m` (sana, catalogued as org/model), 1 process(es) on cuda")
    assert "weights: model (Linear weights nf4-quantized)" in table and "DDP gradient buckets" in table
    assert "step activations, b, with checkpointing" in table and "step activations, b, without checkpointing" in table
    assert "predicted peak per process" in table and "glibc heap" not in table
    assert format_plan(plan, 64 * 2**30).splitlines()[-1].startswith("fits:")


def test_the_gate_keeps_the_plans_error_free_warns_inside_it_and_stops_beyond_the_card():
    """A prediction that leaves the plan's error starts quietly; one inside it starts with the warning naming the
    card, the margin and the flags that keep it; one over the card stops (the plan has never over-predicted a GPU
    peak by more than 12%, so no tolerance above the card)."""
    plan = make_plan()  # 10 GiB peak
    assert check_fits(plan, 12 * 2**30, "the GPU") is None
    warning = check_fits(plan, int(10.5 * 2**30), "this NVIDIA GeForce RTX 2080 Ti (cuda:0)")
    assert warning.startswith("memory plan on this NVIDIA GeForce RTX 2080 Ti (cuda:0): fits, narrowly: 10.00 GiB of")
    assert f"inside the {ladder.GPU_ERROR:.0%} the plan has come out below" in warning
    assert "the flags that keep it free: --gradient_checkpointing true" in warning and "\n" not in warning
    with pytest.raises(UserError, match="This run would not fit on the GPU: the predicted peak 10.00 GiB") as err:
        check_fits(plan, int(9.5 * 2**30), "the GPU")  # 5% over: stops (it started before, within a 10% tolerance)
    assert "--ignore_memory_plan" in str(err.value) and "dit-lora plan" in str(err.value)


def test_the_table_names_the_card_and_the_margin_it_keeps():
    table = format_plan(make_plan(), 24 * 2**30, "--gpu_memory 24GB")
    assert (
        "card: 24.00 GiB (--gpu_memory 24GB); the plan keeps 15% of it free, its worst error measured on a GPU "
        "(benchmarks/RESULTS.md), so a prediction fits at 20.35 GiB or less"
    ) in table
    assert "card:" not in format_plan(make_plan(), 24 * 2**30)


def test_the_table_names_block_swap_and_the_ladder_when_the_run_does_not_fit():
    """--blocks_to_swap 4 of a 6 GiB model's blocks (1 GiB each, 3 in flight): 1 GiB less on the device; the table
    ends with the ladder when the peak exceeds the memory given."""
    plan = make_plan(blocks_to_swap=4, swapped_bytes=4 * 2**30, swap_in_flight_bytes=3 * 2**30,
                     nf4_model_savings=4 * 2**30)
    assert plan.swap_saving == 2**30 and plan.train_phase_bytes() == 9 * 2**30
    assert "block swap (--blocks_to_swap 4)" in format_plan(plan) and "-1.00 GiB on the device" in format_plan(plan)
    table = format_plan(plan, 8 * 2**30)
    assert "does not fit: the predicted peak 9.00 GiB exceeds 8.00 GiB." in table
    assert "ladder on 8.00 GiB per GPU" in table and "flags to copy: --gradient_checkpointing true" in table
    on_cpu = make_plan(device="cpu", blocks_to_swap=4, swapped_bytes=4 * 2**30, swap_in_flight_bytes=2 * 2**30)
    assert on_cpu.swap_saving == -2 * 2**30 and on_cpu.train_phase_bytes() == 12 * 2**30
    assert "only the copies of the blocks in flight add" in format_plan(on_cpu)


def test_the_gate_gives_the_ladders_flags_in_one_paragraph():
    plan = make_plan(train_batch_size=1, steps=[StepTrace("b", True, 2**30, 1)], checkpointing=True,
                     quantize_savings={"fp8_scaled": 3 * 2**30}, fp8_dequant_bytes=2**20)
    with pytest.raises(UserError) as err:
        check_fits(plan, 5 * 2**30, "this cuda device")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("This run would not fit on this cuda device: the predicted peak 7.00 GiB exceeds 5.00 GiB.")
    assert "flags to copy: --quantize_base fp8_scaled (predicted peak 4.00 GiB of 5.00 GiB, leaving the 15%" in text
    assert "--ignore_memory_plan" in text


def test_the_gpu_memory_help_states_the_margin_the_plan_keeps(capsys):
    """`dit-lora plan --help` is built without torch, so it writes the figure; it must be ladder.GPU_ERROR's."""
    from dit_lora.commands.cli import _build_parser

    with pytest.raises(SystemExit):
        _build_parser().parse_args(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"keeping the plan's worst measured GPU error ({ladder.GPU_ERROR:.0%}) of it free" in text
