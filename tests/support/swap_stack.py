"""The block stack of the block-swap tests (tests/modeling/test_block_swap.py, test_swap_hooks.py,
test_host_parking.py): blocks whose backward reads their frozen weights every way autograd saves them, a stack of
them (checkpointed as diffusers does, or the reentrant way), with LoRA through PEFT; and a few AdamW steps on it."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dit_lora.modeling import block_swap

META = torch.device("meta")
DIM, DEPTH = 16, 4


class _Reinterpreted(torch.autograd.Function):
    """Saves a frozen buffer's bits as another dtype (fp8_scaled's payload view is the real case): the swap must
    rebuild a saved view whose dtype is not its storage owner's."""

    @staticmethod
    def forward(ctx, x, bits):
        as_float = bits.view(torch.float32)
        ctx.save_for_backward(as_float)
        return x * as_float

    @staticmethod
    def backward(ctx, grad):
        (as_float,) = ctx.saved_tensors
        return grad * as_float, None


class Block(nn.Module):
    """A norm (saves its weight itself), two linears (save a view of theirs), a buffer, a reinterpreted buffer."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim)
        self.ff = nn.Linear(dim, dim)
        self.register_buffer("scale", torch.rand(dim))
        self.register_buffer("bits", (torch.rand(dim) + 0.5).view(torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ff(torch.relu(self.to_q(self.norm(x))))
        return x + _Reinterpreted.apply(h, self.bits) * self.scale


class Stack(nn.Module):
    """An input projection and a list of blocks, checkpointed as diffusers (non-reentrant) or the reentrant way."""

    def __init__(self, checkpointing: str = "off", depth: int = DEPTH, dim: int = DIM) -> None:
        super().__init__()
        self.proj_in = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.checkpointing = checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.blocks:
            if self.checkpointing != "off" and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=self.checkpointing == "reentrant")
            else:
                x = block(x)
        return x


def lora_stack(checkpointing: str = "off", depth: int = DEPTH, dim: int = DIM, park: int = 0, device="cpu",
           fp8: bool = False) -> nn.Module:
    """The stack, frozen, with LoRA through PEFT on every linear (lora_B drawn too, so every LoRA weight has a
    gradient); the same weights at every call. ``park``: blocks parked first, as a family's loader does (before
    LoRA: PEFT then makes the swapped blocks' LoRA weights where their base weights are, in host memory)."""
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    model = Stack(checkpointing, depth, dim).requires_grad_(False)
    if fp8:  # --quantize_base fp8_scaled: e4m3 payload and scale buffers, converted at load
        from dit_lora.modeling.fp8_scaled import convert

        convert(model, [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.startswith("blocks.")])
    block_swap.park_blocks(model, ("blocks",), park, device)
    config = LoraConfig(r=2, target_modules=["to_q", "ff", "proj_in"], init_lora_weights="gaussian")
    model = inject_adapter_in_model(config, model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    return model


def train_steps(model: nn.Module, steps: int = 2) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """``steps`` AdamW updates on fixed inputs: the losses and the trained weights."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(3, 5, DIM, generator=g)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, {n: p.detach().clone() for n, p in params.items()}


def frozen_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module``'s frozen parameters and its buffers, by name."""
    return {**{k: p for k, p in module.named_parameters() if not p.requires_grad}, **dict(module.named_buffers())}


def block_bytes(block: nn.Module) -> int:
    """The bytes of ``block``'s frozen tensors."""
    return sum(t.numel() * t.element_size() for t in frozen_tensors(block).values())
