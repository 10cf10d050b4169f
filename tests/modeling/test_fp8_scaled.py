"""dit_lora/modeling/fp8_scaled.py: fp8 e4m3 weights with per-block scales, against a PyTorch reference.

Each op is checked as Liger-Kernel checks its kernels: the layer against ``F.linear`` with the dequantized weight
(fp32, and bf16 under CPU autocast), odd shapes, 2-D and 3-D inputs, forward and the input/bias gradients; then
the quantization error bound, PEFT's LoRA on top (initialised exactly as on the unquantized layer), casts, state
dicts, DDP, freeing the originals layer by layer, and what a step saves for backward.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

from dit_lora.modeling import fp8_scaled
from dit_lora.modeling.fp8_scaled import BLOCK, Fp8ScaledLinear, convert, dequantize, quantize_weight

SHAPES = [(37, 1), (64, 3), (200, 3), (128, 64)]  # (in_features, out_features): per-row and per-block scales
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2)}  # (atol, rtol), as Liger-Kernel's tests


def _linear(in_features: int, out_features: int, *, bias: bool = True, dtype=torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features, bias=bias).to(dtype)


def _e4m3_bound(weight: torch.Tensor, layer: Fp8ScaledLinear) -> torch.Tensor:
    """Round-to-nearest e4m3: half an ulp of 3 mantissa bits (2**-4 of the value) for normal values, 2**-10 of
    the block's scale (half the smallest subnormal step) below them."""
    scales = layer.fp8_scale.view(torch.float32)
    per_weight = scales.repeat_interleave(weight.shape[1] // scales.shape[1], dim=1)
    return torch.maximum(weight.abs() * 2.0**-4, per_weight * 2.0**-10)


# ---- quantization -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantized_weights_are_within_e4m3_precision_of_the_originals(in_features, out_features, dtype):
    linear = _linear(in_features, out_features, dtype=dtype)
    with torch.no_grad():
        linear.weight[0, 0] = 50.0  # an outlier: only its own block's scale grows
    layer = Fp8ScaledLinear.from_linear(linear)
    blocks = in_features // BLOCK if in_features % BLOCK == 0 else 1
    assert layer.fp8_weight.dtype == torch.uint8 and layer.fp8_weight.shape == (out_features, in_features)
    assert layer.fp8_scale.dtype == torch.int32 and layer.fp8_scale.shape == (out_features, blocks)
    original = linear.weight.detach().float()
    error = (layer.dequantize(torch.float32) - original).abs()
    assert (error <= _e4m3_bound(original, layer)).all(), (error / original.abs().clamp_min(1e-12)).max()
    # power-of-two scales: every block's largest magnitude lands in e4m3's top binade [224, 448], and the bf16
    # dequantization is exact (the same numbers as fp32's)
    scales = layer.fp8_scale.view(torch.float32)
    assert (torch.frexp(scales).mantissa == 0.5).all()
    top = layer.fp8_weight.view(torch.float8_e4m3fn).float().abs().reshape(out_features, blocks, -1).amax(-1)
    assert ((top >= 224) & (top <= 448)).all()
    assert torch.equal(layer.dequantize(torch.bfloat16).float(), layer.dequantize(torch.float32))
    assert layer.weight.dtype == dtype and torch.equal(layer.weight.float(), layer.dequantize(torch.float32))


def test_an_all_zero_block_stays_zero_and_scales_are_exact_fp32():
    weight = torch.zeros(2, 128)
    weight[1, 64:] = torch.linspace(-1, 1, 64)
    payload, bits = quantize_weight(weight)
    scales = bits.view(torch.float32)
    assert scales[0].tolist() == [1.0, 1.0] and scales[1, 0] == 1.0 and scales[1, 1] == 2.0**-8  # 1/448 < 2**-8
    restored = dequantize(payload, bits, torch.float32)
    assert torch.equal(restored[0], weight[0]) and torch.equal(restored[1, :64], weight[1, :64])


def test_the_dequantized_bytes_the_plan_adds_are_what_dequantize_allocates():
    layer = Fp8ScaledLinear.from_linear(_linear(128, 48))
    for dtype, per_weight in ((torch.bfloat16, 2), (torch.float32, 4), (torch.float16, 6)):  # fp16 goes via fp32
        assert fp8_scaled.dequantized_bytes(128 * 48, dtype) == 128 * 48 * per_weight
        assert layer.dequantize(dtype).dtype == dtype


def test_quantizing_in_chunks_gives_the_same_bits(monkeypatch):
    weight = _linear(128, 40).weight.detach()
    whole = quantize_weight(weight)
    monkeypatch.setattr(fp8_scaled, "_CHUNK", 3 * 128)  # three rows at a time
    assert all(torch.equal(a, b) for a, b in zip(whole, quantize_weight(weight)))


# ---- forward and backward against F.linear with the dequantized weight -------------------------------------------
def _reference(layer: Fp8ScaledLinear, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.to(dtype)
    return F.linear(x.to(dtype), layer.dequantize(dtype), bias)


@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("lead", [(5,), (2, 7)], ids=["2d", "3d"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16], ids=["fp32", "bf16-autocast"])
def test_forward_and_backward_match_the_reference(in_features, out_features, lead, bias, compute):
    """fp32: a layer loaded in fp32, fp32 input; bf16: a layer loaded in bf16 under CPU autocast with an fp32 input
    (a timestep embedding), which must come out bf16 as an nn.Linear's does. The bias trains here (its gradient is
    checked too); the weight is frozen."""
    layer = Fp8ScaledLinear.from_linear(_linear(in_features, out_features, bias=bias, dtype=compute))
    torch.manual_seed(1)
    x = torch.randn(*lead, in_features, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    grad = torch.randn(*lead, out_features)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == torch.bfloat16):
        out = layer(x)
        ref = _reference(layer, x_ref, compute)
        plain = torch.nn.Linear(in_features, out_features, bias=bias).to(compute)(x.detach())
    assert out.dtype == ref.dtype == plain.dtype == compute and out.shape == (*lead, out_features)
    atol, rtol = TOLERANCE[compute]
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
    bias_grad = torch.autograd.grad(out, layer.bias, grad.to(compute), retain_graph=True)[0] if bias else None
    out.backward(grad.to(compute))
    ref.backward(grad.to(compute))
    assert x.grad is not None and x.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, x_ref.grad, atol=atol, rtol=rtol)
    if bias:
        expected = grad.to(compute).float().reshape(-1, out_features).sum(0).to(compute)
        torch.testing.assert_close(bias_grad, expected, atol=atol, rtol=rtol)


def test_a_frozen_bias_and_an_input_without_grad_get_no_gradient():
    layer = Fp8ScaledLinear.from_linear(_linear(64, 8)).requires_grad_(False)
    x = torch.randn(3, 64)
    assert not layer(x).requires_grad
    lora_like = torch.nn.Parameter(torch.ones(64))
    (layer(x * lora_like)).sum().backward()
    assert lora_like.grad is not None and layer.bias.grad is None


def test_without_autocast_the_input_dtype_is_the_compute_dtype():
    layer = Fp8ScaledLinear.from_linear(_linear(64, 8, dtype=torch.bfloat16))
    assert layer(torch.randn(2, 64)).dtype == torch.float32  # the fp32 replay of a diagnosis computes in fp32
    assert layer(torch.randn(2, 64, dtype=torch.bfloat16)).dtype == torch.bfloat16


# ---- what a step keeps for backward ---------------------------------------------------------------------------------
def _saved_bytes(model: torch.nn.Module, loss_fn) -> int:
    """Bytes autograd saves for backward in ``loss_fn()`` outside the storage ``model`` already owns."""
    owned = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    saved = [0]

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in owned:
            saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn().backward()
    return saved[0]


def test_a_step_saves_no_dequantized_weight_for_backward():
    """Without gradient checkpointing a step must not keep a compute-dtype copy of every weight until backward: the
    fp8 layer saves nothing of its own (its buffers only), where dequantizing and calling F.linear would save each
    dequantized weight; and a LoRA-wrapped fp8 model saves no more than the same unquantized bf16 model."""
    from peft import LoraConfig, inject_adapter_in_model

    def model(quantized: bool):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
        m = m.to(torch.bfloat16).requires_grad_(False)
        if quantized:
            convert(m, ["0", "2"])
        torch.manual_seed(1)
        return inject_adapter_in_model(LoraConfig(r=4, target_modules=["0", "2"], init_lora_weights="gaussian"), m)

    x = torch.randn(4, 256, dtype=torch.bfloat16)
    layer = Fp8ScaledLinear.from_linear(_linear(256, 512, dtype=torch.bfloat16)).requires_grad_(False)
    xs = x.clone().requires_grad_(True)
    assert _saved_bytes(layer, lambda: layer(xs).float().sum()) == 0
    naive = _saved_bytes(layer, lambda: F.linear(xs, layer.dequantize(torch.bfloat16), layer.bias).float().sum())
    assert naive >= 256 * 512 * 2  # the dequantized weight, kept until backward
    fp8, bf16 = model(True), model(False)
    assert _saved_bytes(fp8, lambda: fp8(x).float().sum()) <= _saved_bytes(bf16, lambda: bf16(x).float().sum())


# ---- PEFT's LoRA on top ----------------------------------------------------------------------------------------------
def test_peft_lora_wraps_it_initialises_as_on_the_unquantized_layer_and_trains_in_fp32():
    """PEFT's default dispatch gives its ordinary lora.Linear; the adapter is cast to the base weight's dtype (the
    property's: bf16) exactly as for the unquantized bf16 layer, so the same seed gives the same LoRA bits; after
    the run's fp32 master cast the LoRA weights are fp32 and get gradients; the output differs from the unquantized
    model's by the base's quantization error only."""
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora import Linear as LoraLinear

    from dit_lora.modeling.trainables import cast_trainable_to_fp32

    def model(quantized: bool):
        m = torch.nn.Sequential(_linear(64, 96, dtype=torch.bfloat16), torch.nn.GELU(),
                                _linear(96, 37, dtype=torch.bfloat16, seed=1)).requires_grad_(False)
        if quantized:
            assert convert(m, ["0", "2"]) == 2
        torch.manual_seed(7)
        m = inject_adapter_in_model(LoraConfig(r=4, target_modules=["0", "2"], init_lora_weights="gaussian"), m)
        cast_trainable_to_fp32(m, under_autocast=True)
        return m

    fp8, plain = model(True), model(False)
    assert isinstance(fp8[0], LoraLinear) and isinstance(fp8[0].base_layer, Fp8ScaledLinear)
    lora = {n: p for n, p in fp8.named_parameters() if p.requires_grad}
    assert set(lora) == {n for n, p in plain.named_parameters() if p.requires_grad} and len(lora) == 4
    for name, p in plain.named_parameters():
        if p.requires_grad:
            assert lora[name].dtype == p.dtype == torch.float32 and torch.equal(lora[name], p), name
    with torch.no_grad():
        for name, p in lora.items():  # lora_B starts at 0: move it so the adapter does something
            if "lora_B" in name:
                p.normal_()
                dict(plain.named_parameters())[name].copy_(p)
    x = torch.randn(3, 5, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = fp8(x), plain(x)
    assert out.dtype == ref.dtype == torch.bfloat16
    out.float().pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
               for p in lora.values())
    assert (out.float() - ref.float()).abs().max() < 0.1 * ref.float().abs().max()


# ---- casts, state dicts, DDP ----------------------------------------------------------------------------------------
def test_model_casts_leave_the_fp8_bits_and_follow_the_weight_dtype():
    model = torch.nn.Sequential(_linear(128, 16, dtype=torch.bfloat16))
    convert(model, ["0"])
    layer = model[0]
    bits = layer.fp8_weight.clone(), layer.fp8_scale.clone()
    for cast, dtype in ((lambda m: m.to(torch.float32), torch.float32), (lambda m: m.half(), torch.float16),
                        (lambda m: m.to(torch.bfloat16), torch.bfloat16)):
        cast(model)
        assert torch.equal(layer.fp8_weight, bits[0]) and torch.equal(layer.fp8_scale, bits[1])
        assert layer.weight_dtype == layer.weight.dtype == layer.bias.dtype == dtype
    assert layer(torch.randn(2, 128, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_state_dict_round_trips_bit_for_bit_and_refuses_an_unquantized_weight():
    source = torch.nn.Sequential(_linear(64, 8), torch.nn.ReLU(), _linear(8, 3, seed=1))
    target = torch.nn.Sequential(_linear(64, 8, seed=5), torch.nn.ReLU(), _linear(8, 3, seed=6))
    convert(source, ["0", "2"])
    convert(target, ["0", "2"])
    state = source.state_dict()
    assert set(state) == {f"{i}.{k}" for i in (0, 2) for k in ("bias", "fp8_weight", "fp8_scale")}
    target.load_state_dict(state)
    x = torch.randn(4, 64)
    assert torch.equal(target(x), source(x))
    with pytest.raises(RuntimeError, match="fp8_weight"):
        target.load_state_dict(torch.nn.Sequential(_linear(64, 8), torch.nn.ReLU(), _linear(8, 3)).state_dict())


def test_ddp_over_gloo_neither_casts_nor_broadcasts_the_fp8_buffers(tmp_path, monkeypatch):
    """keep_out_of_ddp (the run calls it before accelerator.prepare, after LoRA) names the buffers in DDP's ignore
    list: DDP would otherwise broadcast every fp8 weight from rank 0 at each forward. One gloo process suffices to
    see DDP's own bookkeeping."""
    import torch.distributed as dist
    from peft import LoraConfig, inject_adapter_in_model

    model = torch.nn.Sequential(_linear(64, 32), torch.nn.GELU(), _linear(32, 8))
    model.register_buffer("table", torch.zeros(3))  # an ordinary buffer: still broadcast
    convert(model, ["0", "2"])
    model.requires_grad_(False)
    inject_adapter_in_model(LoraConfig(r=2, target_modules=["0", "2"]), model)
    assert fp8_scaled.keep_out_of_ddp(model) == 4
    from datetime import timedelta

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))  # a hang fails the test instead of stalling the suite
    ddp = None
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ignored = {"0.base_layer.fp8_weight", "0.base_layer.fp8_scale", "2.base_layer.fp8_weight",
                   "2.base_layer.fp8_scale"}
        assert ignored <= set(ddp.parameters_to_ignore)
        assert [b.shape for b in ddp.modules_buffers] == [torch.Size([3])]
        ddp(torch.randn(2, 64)).sum().backward()
    finally:
        del ddp  # its reducer first: destroyed after the process group, gloo's destructor can hang joining threads
        gc.collect()
        dist.destroy_process_group()


def test_convert_frees_each_original_weight_before_the_next_layer(monkeypatch):
    """The peak of a conversion is one layer above the fp8 model: when a layer is converted, every earlier original
    weight is already gone."""
    model = torch.nn.Sequential(*[_linear(64, 64, seed=i) for i in range(4)])
    originals = [weakref.ref(layer.weight) for layer in model]
    alive_at_each = []
    real = Fp8ScaledLinear.from_linear

    def watched(linear, **kwargs):
        gc.collect()
        alive_at_each.append(sum(ref() is not None for ref in originals))
        return real(linear, **kwargs)

    monkeypatch.setattr(Fp8ScaledLinear, "from_linear", staticmethod(watched))
    assert convert(model, [str(i) for i in range(4)]) == 4
    assert alive_at_each == [4, 3, 2, 1]  # the layer being converted, and the ones not reached yet
    gc.collect()
    assert all(ref() is None for ref in originals)
    assert convert(model, ["0"]) == 0  # already converted


def test_convert_refuses_a_module_that_is_not_a_linear_and_weights_that_are_not_16_or_32_bit():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1))
    with pytest.raises(TypeError, match="Conv2d"):
        convert(model, ["0"])
    linear = _linear(64, 4)
    linear.weight.data = linear.weight.data.to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="float8"):
        Fp8ScaledLinear.from_linear(linear)


def test_swapped_blocks_of_an_fp8_model_train_bitwise_as_without_the_swap():
    """--quantize_base fp8_scaled with --blocks_to_swap (the plan's ladder combines them): the swap moves the plain
    fp8 buffers and rebuilds what the fp8 layers saved for backward, so two AdamW steps are bit for bit the same."""
    from peft import LoraConfig, inject_adapter_in_model

    from dit_lora.modeling import block_swap

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(x)))

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(4))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    def train(swap: int):
        torch.manual_seed(0)
        model = Stack().requires_grad_(False)
        convert(model, [f"blocks.{i}.{fc}" for i in range(4) for fc in ("fc1", "fc2")])
        config = LoraConfig(r=2, target_modules=["fc1", "fc2"], init_lora_weights="gaussian")
        model = inject_adapter_in_model(config, model)
        installed = block_swap.install(model, ("blocks",), swap, "cpu")
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-2)
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            model(torch.randn(3, 5, 64, generator=g)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        assert swap == 0 or installed.stats.copies > 0  # the fp8 blocks really came and went
        return [p.detach().clone() for p in params]

    assert all(torch.equal(a, b) for a, b in zip(train(0), train(2)))


def test_after_conversion_on_the_cpu_no_tensor_keeps_the_loaded_file_mapped():
    """Loaded safetensors are views of one memory-mapped file: while one bias or norm still points into it, the pages
    the conversion read (every original weight) stay resident. after_loading copies what is left out of it on a CPU
    (here one shared storage stands in for the mapped file)."""
    from dit_lora.config import TrainConfig
    from dit_lora.modeling import quantize

    model = torch.nn.Sequential(_linear(64, 64), torch.nn.LayerNorm(64), _linear(64, 8))
    tensors = list(model.state_dict().items())
    mapped = torch.cat([t.reshape(-1) for _, t in tensors])  # the "file"
    offset = 0
    for name, tensor in tensors:
        model.get_parameter(name).data = mapped[offset: offset + tensor.numel()].view_as(tensor)
        offset += tensor.numel()
    file_storage = mapped.untyped_storage().data_ptr()
    cfg = TrainConfig(quantize_base="fp8_scaled")
    assert quantize.after_loading(cfg.model, model, device=torch.device("cpu")) == 2
    left = [*model.parameters(), *model.buffers()]
    assert left and all(t.untyped_storage().data_ptr() != file_storage for t in left)
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in left)  # memory of their own
