"""On a CPU the plan counts memory-mapped weights as read, converted ones with their source (plan.resident)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.plan import plan_run
from dit_lora.modelfiles.pipeline_files import header_bytes
from dit_lora.plan.fake import ReadTensors, fake_mode, fake_module, on_meta
from dit_lora.plan.resident import stored_component, stored_local, touched_bytes


def _dit_reader(num_layers: int):
    """DiT-XL-2-256's published configs, ``num_layers`` blocks of 2 narrow heads (the SD VAE as published)."""
    from dit_lora.catalogue import by_hub_id

    configs = by_hub_id("facebook/DiT-XL-2-256").configs
    changes = {"num_layers": num_layers, "num_attention_heads": 2, "attention_head_dim": 16}

    def read(subfolder, filename):
        found = configs.get(f"{subfolder}/{filename}")
        return {**found, **changes} if found is not None and subfolder == "transformer" else found

    return read


def test_header_read_gives_bytes_per_dtype_without_the_tensors(tmp_path):
    file = tmp_path / "diffusion_pytorch_model.safetensors"
    save_file({"a": torch.zeros(4, 3), "b": torch.zeros(10, dtype=torch.bfloat16)}, str(file))
    size = 8 + int.from_bytes(file.read_bytes()[:8], "little")
    with open(file, "r+b") as fh:  # drop the tensor data: only the header may be read
        fh.truncate(size)
    assert header_bytes(file) == {"F32": 48, "BF16": 20}
    stored = stored_local(tmp_path)
    assert (stored.dtype, stored.nbytes) == ("F32", 68)


def test_variant_files_are_read_when_asked(tmp_path):
    save_file({"a": torch.zeros(8)}, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    save_file({"a": torch.zeros(8, dtype=torch.float16)}, str(tmp_path / "diffusion_pytorch_model.fp16.safetensors"))
    assert stored_local(tmp_path).bytes_by_dtype == {"F32": 32}
    assert stored_local(tmp_path, "fp16").bytes_by_dtype == {"F16": 16}
    assert stored_local(tmp_path / "missing") is None


def test_catalogue_dtype_stands_in_for_an_undownloaded_id():
    module = on_meta(lambda: torch.nn.Linear(10, 10), torch.float32)
    stored = stored_component("some-org/not-downloaded", "transformer", module, catalogue_dtype="bf16")
    assert stored.bytes_by_dtype == {"BF16": 220}
    assert stored_component("some-org/not-downloaded", "transformer", module) is None


def test_the_read_trace_names_the_parameters_an_encode_uses():
    module = on_meta(lambda: torch.nn.ModuleDict({"enc": torch.nn.Conv2d(3, 4, 3), "dec": torch.nn.Linear(4, 4)}),
                     torch.float32)
    mode = fake_mode()
    fake_module(module, mode)
    reads = ReadTensors()
    with mode, reads:
        module["enc"](torch.randn(1, 3, 8, 8))
    assert touched_bytes(module, reads.ids) == (4 * 3 * 3 * 3 + 4) * 4  # the conv's weight and bias only


def _header_only_file(path, dtype: str, nbytes: int) -> None:
    """A safetensors file as far as a header read goes: the 8-byte length and the JSON header, no tensor data."""
    import json

    header = json.dumps({"w": {"dtype": dtype, "shape": [nbytes // 4], "data_offsets": [0, nbytes]}}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(len(header).to_bytes(8, "little") + header)


@pytest.fixture(scope="module")
def dit_plans(tmp_path_factory):
    """One-block narrow DiT-XL-2-256 planned for CUDA and for a CPU in fp32 and bf16, from a local folder whose
    transformer and VAE files store fp32 (as the Hub repo's do; headers only: far larger than the narrow model)."""
    folder = tmp_path_factory.mktemp("dit-xl-2-256")
    for sub in ("transformer", "vae"):
        _header_only_file(folder / sub / "diffusion_pytorch_model.safetensors", "F32", 4 * 10**9)

    def plan(device, precision):
        cfg = TrainConfig(family="dit", pretrained_model_name_or_path=str(folder), resolution=64,
                          train_batch_size=2, mixed_precision=precision)
        return plan_run(cfg, get_family("dit"), _dit_reader(1), device=device, both_settings=False)

    return plan("cuda", "no"), plan("cpu", "no"), plan("cpu", "bf16")


def test_cuda_plans_count_every_weight_in_the_caching_phase(dit_plans):
    cuda, _, _ = dit_plans
    assert cuda.load_phase_bytes is None and cuda.mapped == [] and cuda.process_bytes == 0
    assert cuda.cache_phase_bytes > sum(cuda.weights.values())
    assert cuda.peak_memory_bytes == max(cuda.train_phase_bytes(), cuda.cache_phase_bytes)


def test_cpu_caching_phase_leaves_out_the_unread_transformer_and_vae_decoder(dit_plans):
    cuda, cpu, _ = dit_plans
    assert cpu.weights == cuda.weights and sorted(cpu.mapped) == ["model", "vae"] and cpu.load_phase_bytes is None
    encode_peak = cuda.cache_phase_bytes - sum(cuda.weights.values())
    share = (cpu.cache_phase_bytes - encode_peak) / cpu.weights["vae"]
    assert 0.3 < share < 0.6, share  # the SD VAE's encoder (and quant_conv) is ~41% of it; the decoder is unread
    # training reads the whole transformer; only the step's activations are counted as the CPU heap holds them
    gc = cpu.checkpointing
    assert cpu.train_phase_bytes() - cpu.resident_activations(gc) == cuda.train_phase_bytes() - cuda.resident_activations(gc)


def test_cpu_plans_count_activations_as_the_glibc_heap_holds_them(tmp_path):
    """With glibc, a CPU plan's training phase holds each setting's activations at its own heap factor, and the
    advice and the checkpointing suggestion use those figures; a CUDA plan counts live bytes."""
    import platform

    from dit_lora.plan.estimate import CPU_HEAP_FACTOR
    from dit_lora.plan.report import advice, format_plan

    for sub in ("transformer", "vae"):
        _header_only_file(tmp_path / sub / "diffusion_pytorch_model.safetensors", "F32", 4 * 10**9)
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=str(tmp_path), resolution=64, train_batch_size=2,
                      mixed_precision="no")
    cpu, cuda = (plan_run(cfg, get_family("dit"), _dit_reader(1), device=d, both_settings=True) for d in ("cpu", "cuda"))
    glibc = platform.libc_ver()[0] == "glibc"
    assert 1 < CPU_HEAP_FACTOR[False] < CPU_HEAP_FACTOR[True]
    assert (cuda.heap_factor, cuda.heap_factor_checkpointed) == (1.0, 1.0)
    assert (cpu.heap_factor, cpu.heap_factor_checkpointed) == ((CPU_HEAP_FACTOR[False], CPU_HEAP_FACTOR[True])
                                                               if glibc else (1.0, 1.0))
    for gc in (False, True):
        live = max(s.activation_bytes for s in cpu.steps if s.checkpointing == gc)
        factor = cpu.heap_factor_checkpointed if gc else cpu.heap_factor
        # the same weights and optimizer state on both devices; only the step's activations are scaled
        assert cpu.train_phase_bytes(gc) - cuda.train_phase_bytes(gc) == int(factor * live) - live
    assert ("resident per live byte" in format_plan(cpu)) == glibc
    assert "resident per live byte" not in format_plan(cuda)
    # The training phase alone (no caching, no process), just below the unchecked run's peak: the ladder stops at
    # checkpointing only where its scaled peak fits.
    import dataclasses

    train_only = dataclasses.replace(cpu, cache_phase_bytes=None, load_phase_bytes=None, process_bytes=0)
    assert train_only.peak_bytes(True) == train_only.train_phase_bytes(True)
    capacity = train_only.peak_bytes(False) - 1
    tight = advice(train_only, capacity)
    assert tight.startswith("does not fit")
    offered = f"--gradient_checkpointing true (predicted peak {train_only.peak_bytes(True) / 2**30:.2f} GiB" in tight
    assert offered == (train_only.peak_bytes(True) <= capacity)


def test_cpu_bf16_run_of_fp32_files_has_a_loading_phase(dit_plans):
    _, _, bf16 = dit_plans
    assert bf16.mapped == ["vae"]  # the VAE loads in fp32, as stored; the transformer is converted
    # the bf16 copy plus its fp32 source, twice its size (within the LoRA factors, fp32 in the planned model,
    # which are 3% of this narrow one-block transformer); neither the copy alone nor two sources
    assert bf16.load_phase_bytes == pytest.approx(3 * bf16.weights["model"], rel=0.05)


def test_the_table_shows_the_loading_phase_and_the_mapped_caching_phase(dit_plans):
    from dit_lora.plan.report import format_plan

    cuda, _, bf16 = dit_plans
    text = format_plan(bf16)
    assert "loading phase (weights converted at load + one source)" in text
    assert "caching phase (what the encode reads of mapped weights + one encode)" in text
    on_cuda = format_plan(cuda)
    assert "loading phase" not in on_cuda and "caching phase (every component + one encode)" in on_cuda


def test_cpu_plans_without_glibc_count_live_bytes(dit_plans, monkeypatch):
    """The heap factor was measured on glibc: elsewhere (macOS, musl) a CPU plan counts the step's live bytes."""
    import platform

    _, cpu_glibc, _ = dit_plans
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("", ""))
    folder = Path(cpu_glibc.model)
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=str(folder), resolution=64, train_batch_size=2,
                      mixed_precision="no")
    cpu = plan_run(cfg, get_family("dit"), _dit_reader(1), device="cpu", both_settings=False)
    assert (cpu.heap_factor, cpu.heap_factor_checkpointed) == (1.0, 1.0)
    live = max(s.activation_bytes for s in cpu.steps if s.checkpointing == cpu.checkpointing)
    assert cpu.resident_activations() == live
