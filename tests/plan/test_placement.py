"""plan/placement.py: where the weights are while a run caches and trains: a CPU's memory-mapped and converted
components (``cpu_residency``), the blocks ``--blocks_to_swap`` parks and those in flight, the blocks parked for the
cache."""

import pytest
import torch
from plan_readers import dit_reader
from safetensors.torch import save_file

from dit_lora.config import TrainConfig
from dit_lora.plan import plan_run
from dit_lora.plan.fake import on_meta
from dit_lora.plan.placement import cpu_residency
from dit_lora.plan.report import format_plan
from dit_lora.registry import get_family


def _folder(tmp_path, stored: dict[str, torch.dtype]):
    """A pipeline folder whose components each hold one 1,000-element tensor in the given dtype."""
    for sub, dtype in stored.items():
        (tmp_path / sub).mkdir()
        save_file({"w": torch.zeros(1000, dtype=dtype)}, str(tmp_path / sub / "diffusion_pytorch_model.safetensors"))
    return tmp_path


def test_mapped_components_count_what_is_read_and_converted_ones_their_source(tmp_path):
    folder = _folder(tmp_path, {"transformer": torch.bfloat16, "vae": torch.float32})
    modules = {"model": on_meta(lambda: torch.nn.Linear(1000, 1, bias=False), torch.float32),  # bf16 -> fp32
               "vae": on_meta(lambda: torch.nn.Linear(1000, 1, bias=False), torch.float32),  # fp32 as stored
               "text_encoder": on_meta(lambda: torch.nn.Linear(1000, 1, bias=False), torch.float32)}  # no files
    weights = {k: 4000 for k in modules}
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=str(folder))
    cache, load, mapped = cpu_residency(cfg.model, modules, weights, {"model": 0.0, "vae": 0.25, "text_encoder": 0.5},
                                        "transformer")
    assert mapped == ["vae"]
    assert cache == {"model": 4000, "vae": 1000, "text_encoder": 4000}  # converted and unknown: in full
    assert load == 4000 + 2000  # the fp32 copy beside its bf16 source
    # quantized at load: never mapped, and its source pages are read while it loads (bf16 here, as stored)
    cache, load, mapped = cpu_residency(cfg.model, modules, weights, {"vae": 0.25}, "transformer", copied={"model"})
    assert load == 4000 + 2000 and mapped == ["vae"] and cache["model"] == 4000


def test_the_catalogue_dtype_places_only_the_transformer_of_a_hub_id_not_downloaded():
    """The catalogue's stored dtype describes the transformer's files; the other components count in full."""
    modules = {name: on_meta(lambda: torch.nn.Linear(1000, 1, bias=False), torch.float32) for name in ("model", "vae")}
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256")  # fp32 in the catalogue
    cache, load, mapped = cpu_residency(cfg.model, modules, {"model": 4000, "vae": 4000}, {"model": 0.0, "vae": 0.5},
                                        "transformer")
    assert mapped == ["model"] and cache == {"model": 0, "vae": 4000} and load is None


def test_a_converted_source_counts_only_the_tensors_the_module_loads(tmp_path):
    """A file with tensors the module skips (T5's decoder beside T5EncoderModel's encoder) is read in part."""
    (tmp_path / "text_encoder").mkdir()
    save_file({"encoder": torch.zeros(1000, dtype=torch.bfloat16), "decoder": torch.zeros(3000, dtype=torch.bfloat16)},
              str(tmp_path / "text_encoder" / "model.safetensors"))
    modules = {"text_encoder": on_meta(lambda: torch.nn.Linear(1000, 1, bias=False), torch.float32)}
    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path=str(tmp_path))
    _, load, mapped = cpu_residency(cfg.model, modules, {"text_encoder": 4000}, {}, "transformer")
    assert mapped == [] and load == 4000 + 2000  # not 4000 + 8000: the decoder's pages are never touched


def _swap_plan(blocks_to_swap: int, device: str):
    """DiT-XL/2 narrowed, eight blocks, the run's checkpointing setting only."""
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64,
                      train_batch_size=2, blocks_to_swap=blocks_to_swap)
    return plan_run(cfg, get_family("dit"), dit_reader(8, narrow=True), device=device, both_settings=False)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_block_swap_takes_the_swapped_blocks_off_the_device_less_those_in_flight(device, monkeypatch):
    from dit_lora.modeling import cache_parking
    from dit_lora.plan.placement import SWAP_IN_FLIGHT

    plain, swapped = _swap_plan(0, device), _swap_plan(6, device)
    block = swapped.swapped_bytes // 6
    assert block > 0 and swapped.swapped_bytes == 6 * block and plain.swapped_bytes == 0
    in_flight = SWAP_IN_FLIGHT["cpu" if device == "cpu" else "accelerator"]
    assert swapped.swap_in_flight_bytes == in_flight * block
    change = plain.train_phase_bytes() - swapped.train_phase_bytes()
    # every block waits in host memory while the cache is built, swapped or not: the same caching phase
    assert plain.blocks_wait and swapped.blocks_wait and plain.cache_phase_bytes == swapped.cache_phase_bytes
    monkeypatch.setattr(cache_parking, "run_caches", lambda data: False)
    kept, kept_swapped = _swap_plan(0, device), _swap_plan(6, device)
    assert not kept.blocks_wait
    if device == "cuda":  # six blocks in host memory, three of them on the device at the peak
        assert change == (6 - in_flight) * block
        # without the wait, only the swapped blocks are parked at load; with it, all eight
        assert kept.cache_phase_bytes - kept_swapped.cache_phase_bytes == 6 * block
        assert kept.cache_phase_bytes - plain.cache_phase_bytes == 8 * block
        assert "block swap (--blocks_to_swap 6)" in format_plan(swapped) and "in pinned host memory" in format_plan(
            swapped)
    else:  # the host memory is the device's: only the two copies in flight count; nothing parked is saved
        assert change == -in_flight * block
        assert kept.cache_phase_bytes == plain.cache_phase_bytes == kept_swapped.cache_phase_bytes
        assert "only the copies of the blocks in flight add" in format_plan(swapped)
