"""plan/levers.py: a plan with one lever changed equals the plan of that configuration made afresh (DiT-XL/2's
published configs, eight narrow blocks, on an accelerator), and activation offloading's and FSDP2's arithmetic."""

import dataclasses

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig
from dit_lora.plan import levers, plan_run
from dit_lora.plan.estimate import FSDP2_UNSHARDED_BLOCKS
from dit_lora.plan.tracing import OFFLOAD_IN_FLIGHT, TRACE_DEPTHS
from dit_lora.registry import get_family

HUB_ID = "facebook/DiT-XL-2-256"


def _read(subfolder, filename):
    found = by_hub_id(HUB_ID).configs.get(f"{subfolder}/{filename}")
    if found is not None and subfolder == "transformer":
        found = {**found, "num_layers": 8, "num_attention_heads": 2, "attention_head_dim": 16}
    return found


def _plan(**options):
    engine, processes = options.pop("engine", "ddp"), options.pop("num_processes", 1)
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=2,
                      gradient_checkpointing=True, **options)
    return plan_run(cfg, get_family("dit"), _read, device="cuda", both_settings=False, num_processes=processes,
                    engine=engine)


@pytest.fixture(scope="module")
def base():
    return _plan()


def _same(derived, fresh):
    assert derived.peak_memory_bytes == pytest.approx(fresh.peak_memory_bytes, abs=64)
    assert derived.train_phase_bytes() == pytest.approx(fresh.train_phase_bytes(), abs=64)
    assert derived.cache_phase_bytes == pytest.approx(fresh.cache_phase_bytes, abs=64)


@pytest.mark.parametrize("scheme", ["fp8_scaled", "nf4"])
def test_quantization_as_a_fresh_plan(base, scheme):
    derived = levers.with_quantization(base, scheme)
    fresh = _plan(quantize_base=scheme)
    assert derived.weights == fresh.weights and derived.dequant_bytes == fresh.dequant_bytes
    _same(derived, fresh)


def test_block_swap_alone_and_under_fp8_as_a_fresh_plan(base):
    _same(levers.with_swap(base, 5), _plan(blocks_to_swap=5))
    both = levers.with_swap(levers.with_quantization(base, "fp8_scaled"), 5)
    fresh = _plan(quantize_base="fp8_scaled", blocks_to_swap=5)
    assert both.swapped_bytes == pytest.approx(fresh.swapped_bytes, rel=1e-6)
    _same(both, fresh)
    # back to none, and quantized after swapping: the same blocks at the new size
    _same(levers.with_swap(levers.with_swap(base, 5), 0), base)
    _same(levers.with_quantization(levers.with_swap(base, 5), "fp8_scaled"), fresh)


def test_activation_offloading_keeps_the_blocks_in_flight(base):
    """The offloaded figure is the trace at the shallower depth (OFFLOAD_IN_FLIGHT blocks' saved inputs and one
    recomputation), a block's share below it per block beyond; the fresh plan reads the option by name."""
    assert OFFLOAD_IN_FLIGHT == TRACE_DEPTHS[0]
    (step,) = base.steps
    assert step.offloaded_bytes is not None and 0 < step.offloaded_bytes < step.activation_bytes
    derived = levers.with_offloading(base)
    fresh = _plan(activation_offloading=True)
    assert fresh.activation_offloading and derived is not None
    _same(derived, fresh)
    host = derived.offloaded_host_bytes()
    assert host == step.activation_bytes - step.offloaded_bytes
    assert base.train_phase_bytes() - derived.train_phase_bytes() == host
    assert levers.with_offloading(dataclasses.replace(base, device="cpu")) is None  # the host is the device


def test_fsdp2_shards_parameters_and_state_and_gathers_two_blocks(base):
    ddp = _plan(num_processes=2)
    fsdp2 = _plan(num_processes=2, engine="fsdp2")
    _same(levers.with_fsdp2(ddp), fsdp2)
    assert ddp.ddp_bytes > 0 == fsdp2.ddp_bytes and fsdp2.shards == 2
    # every block waits in host memory from the load until it is sharded: the caching phase holds none of them
    # (under DDP neither: they wait for the cache; cache_parking.py); without that wait it held them all
    parked = sum(sum(sizes) for sizes in fsdp2.block_sizes) * fsdp2.weights["model"] // fsdp2.model_built_bytes
    assert parked > 0 and ddp.cache_phase_bytes == pytest.approx(fsdp2.cache_phase_bytes, abs=2)
    kept = dataclasses.replace(ddp, blocks_wait=False)
    assert kept.cache_parked_bytes() == 0 and ddp.cache_parked_bytes() == pytest.approx(parked, abs=2)
    fsdp2_of_kept = levers.with_fsdp2(dataclasses.replace(kept, cache_phase_bytes=ddp.cache_phase_bytes + parked))
    assert fsdp2_of_kept.cache_phase_bytes == pytest.approx(fsdp2.cache_phase_bytes, abs=2)
    model, built = fsdp2.weights["model"], fsdp2.model_built_bytes
    block = max(fsdp2.block_sizes[0]) * model / built
    root = (built - sum(sum(sizes) for sizes in fsdp2.block_sizes)) * model / built
    assert root > 0  # the embedders and the output layer: unsharded from the root's forward to its backward's end
    # two blocks gathered, one all-gather in flight (its output a block whole; its input is a view of it)
    gathered = root + (FSDP2_UNSHARDED_BLOCKS + 1) * block
    assert fsdp2.fsdp2_gathered_bytes() == int(gathered) and ddp.fsdp2_gathered_bytes() == 0
    assert fsdp2.model_on_device() == model // 2 + int(gathered)
    # on a CPU they are allocated and freed every step, as activations are: times the heap factor
    cpu = dataclasses.replace(fsdp2, heap_factor=2.0)
    assert cpu.fsdp2_gathered_bytes() == int(2.0 * gathered)
    held = fsdp2.train_phase_bytes() - fsdp2.resident_activations()
    sharded_grads = 4 * fsdp2.trainable_params // 2  # a rank's shard of the fp32 gradients stays
    assert fsdp2.sharded_gradient_saving() == 4 * fsdp2.trainable_params - sharded_grads
    assert held == fsdp2.model_on_device() + (fsdp2.optimizer_bytes + fsdp2.snapshot_bytes) // 2 - (
        fsdp2.sharded_gradient_saving())
    # fp8_scaled keeps its weights in buffers, which FSDP2 does not shard: they stay whole on each rank
    fp8 = levers.with_quantization(fsdp2, "fp8_scaled")
    assert fp8.fp8_linear_bytes > 0
    assert fp8.model_on_device() > fp8.fp8_linear_bytes + (fp8.weights["model"] - fp8.fp8_linear_bytes) // 2
    with pytest.raises(ValueError, match="engine"):
        _plan(engine="deepspeed")


@pytest.mark.parametrize("lever", ["fp8_scaled", "nf4", "swap", "fsdp2"])
def test_without_the_wait_for_the_cache_the_levers_are_fresh_plans_too(lever, monkeypatch):
    """A run whose blocks stay on the device while caching (a family that says so, --cache_latents false): the
    caching phase holds every unswapped block, and each lever's derived plan still equals a fresh one."""
    from dit_lora.modeling import cache_parking

    monkeypatch.setattr(cache_parking, "run_caches", lambda data: False)
    processes = 2 if lever == "fsdp2" else 1
    base = _plan(num_processes=processes)
    assert not base.blocks_wait and base.cache_parked_bytes() == 0
    if lever == "swap":
        derived, fresh = levers.with_swap(base, 5), _plan(blocks_to_swap=5)
        assert fresh.cache_parked_bytes() == fresh.swapped_bytes > 0  # the swapped blocks only
    elif lever == "fsdp2":
        derived, fresh = levers.with_fsdp2(base), _plan(num_processes=2, engine="fsdp2")
    else:
        derived, fresh = levers.with_quantization(base, lever), _plan(quantize_base=lever)
    _same(derived, fresh)
