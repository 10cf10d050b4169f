"""plan/report.py: memory sizes as written, the plan's table, the advice on what fits and the start-of-run gate."""

import pytest

from dit_lora.core.errors import UserError
from dit_lora.plan.estimate import Plan, StepTrace
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
    assert advice(plan, 16 * 2**30).startswith("fits: 10.00 GiB")
    assert advice(plan, 11 * 2**30).startswith("fits, narrowly")
    tight = advice(plan, 9 * 2**30)
    assert tight.startswith("does not fit") and "--gradient_checkpointing true" in tight
    assert "--train_batch_size 1 with --gradient_accumulation_steps 2" in advice(plan, int(8.5 * 2**30))


def test_advice_without_a_smaller_setting_suggests_fewer_tokens_or_a_larger_cache_device():
    single = make_plan(train_batch_size=1, steps=[StepTrace("b", False, 4 * 2**30, 1)])
    assert "a lower --resolution" in advice(single, 8 * 2**30)
    caching = make_plan(train_batch_size=1, steps=[StepTrace("b", False, 4 * 2**30, 1)], cache_phase_bytes=12 * 2**30)
    assert "build it once on a larger device" in advice(caching, 8 * 2**30)


def test_the_table_names_every_row_and_appends_the_advice():
    plan = make_plan(catalogue_entry="org/model", quantized="nf4", ddp_bytes=2**30)
    table = format_plan(plan)
    head = table.splitlines()[0]
    assert head.startswith("memory plan for `m` (sana, catalogued as org/model), 1 process(es) on cuda")
    assert "weights: model (Linear weights nf4-quantized)" in table and "DDP gradient buckets" in table
    assert "step activations, b, with checkpointing" in table and "step activations, b, without checkpointing" in table
    assert "predicted peak per process" in table and "glibc heap" not in table
    assert format_plan(plan, 64 * 2**30).splitlines()[-1].startswith("fits:")


def test_the_gate_stops_only_beyond_the_margin():
    plan = make_plan()  # 10 GiB peak
    check_fits(plan, int(9.5 * 2**30), "the GPU")  # within 10%: the prediction may be off, the run starts
    with pytest.raises(UserError, match="This run would not fit on the GPU: the predicted peak 10.00 GiB") as err:
        check_fits(plan, 8 * 2**30, "the GPU")
    assert "--ignore_memory_plan" in str(err.value) and "dit-lora plan" in str(err.value)


def test_advice_offers_nf4_with_its_peak_and_the_share_of_tokens_that_fits():
    """A 20 GiB model, 4 GiB of activations (1 with checkpointing), batch 1: no batch to cut; nf4 saves 14 GiB of
    the model and 3 of the text encoder (whose 6 GiB only the caching phase holds)."""
    plan = make_plan(train_batch_size=1, weights={"model": 20 * 2**30, "text_encoder": 6 * 2**30},
                     cache_phase_bytes=27 * 2**30, nf4_model_savings=14 * 2**30, nf4_text_encoder_savings=3 * 2**30)
    # 12 GiB: checkpointing gives 21, nf4 with it 7 (cache phase 10): both together fit
    text = advice(plan, 12 * 2**30)
    assert ("--quantize_base nf4 --quantize_text_encoder true --gradient_checkpointing true (frozen Linear weights "
            "in 4 bits, 17.00 GiB less: peak 10.00 GiB)") in text
    assert "a lower --resolution" not in text  # a setting above fits as it is
    # 8 GiB: nf4 and checkpointing leave a 10 GiB caching phase and 7 GiB of training: the step fits, the cache is
    # what needs a larger device (fewer tokens would not help)
    tight = advice(plan, 8 * 2**30)
    assert "peak 10.00 GiB, not enough alone" in tight and "build it once on a larger device" in tight
    assert "a lower --resolution" not in tight
    # 6.5 GiB: 6 GiB held for training with nf4 and checkpointing, 0.5 for 1 GiB of activations
    assert "(about 50% of the largest bucket's tokens fits with the settings above)" in advice(plan, int(6.5 * 2**30))
    # already quantized: no nf4 option; 6.5 GiB of training held beside 1 GiB of activations on 7 GiB: half the tokens
    done = make_plan(train_batch_size=1, checkpointing=True, quantized="nf4", weights={"model": int(5.5 * 2**30)},
                     steps=[StepTrace("b", True, 2**30, 1)], optimizer_bytes=2**30)
    assert "--quantize_base" not in advice(done, 7 * 2**30)
    assert "(about 50% of the largest bucket's tokens fits)" in advice(done, 7 * 2**30)


def test_the_table_names_block_swap_and_nf4_is_offered_instead_of_it():
    """--blocks_to_swap 4 of a 6 GiB model's blocks (1 GiB each, 3 in flight): 1 GiB less on the device. nf4 cannot
    be swapped: its option drops the swap, and its peak is the unswapped model's less nf4's savings."""
    plan = make_plan(blocks_to_swap=4, swapped_bytes=4 * 2**30, swap_in_flight_bytes=3 * 2**30,
                     nf4_model_savings=4 * 2**30)
    assert plan.swap_saving == 2**30 and plan.train_phase_bytes() == 9 * 2**30
    assert "block swap (--blocks_to_swap 4)" in format_plan(plan) and "-1.00 GiB on the device" in format_plan(plan)
    text = advice(plan, 6 * 2**30)
    assert "--quantize_base nf4 --blocks_to_swap 0 --gradient_checkpointing true" in text
    assert "peak 3.00 GiB" in text  # 6 GiB model + 1 GiB of checkpointed activations - 4 GiB: the swap undone
    on_cpu = make_plan(device="cpu", blocks_to_swap=4, swapped_bytes=4 * 2**30, swap_in_flight_bytes=2 * 2**30)
    assert on_cpu.swap_saving == -2 * 2**30 and on_cpu.train_phase_bytes() == 12 * 2**30
    assert "only the copies of the blocks in flight add" in format_plan(on_cpu)

