"""LiveBytes: bytes of the storages a step makes and keeps, and FLOPs, on fake tensors."""

import pytest
import torch

from dit_lora.plan.fake import LiveBytes, fake_mode, fake_module, fused_attention, module_bytes, on_meta


def test_live_bytes_counts_new_storages_once_and_frees_them():
    with fake_mode():
        weight = torch.empty(256, 256)  # made before the mode: a weight, never counted
        live = LiveBytes()
        with live:
            view = weight.t()  # a view of the weight: no new storage
            a = torch.empty(1024, dtype=torch.float32)  # 4 KiB
            b = a.view(32, 32)  # same storage as a
            c = torch.empty(512, dtype=torch.bfloat16)  # 1 KiB
            assert live.current == 4096 + 1024
            del a, b
            assert live.current == 1024  # a's storage died with its last view
            del c, view
    assert live.peak == 4096 + 1024
    assert live.current == 0


def test_flops_follow_torch_formulas():
    with fake_mode():
        x, w = torch.empty(8, 32), torch.empty(32, 16)
        live = LiveBytes()
        with live:
            x @ w
    assert live.flops == 2 * 8 * 32 * 16


def test_fake_module_keeps_dtype_requires_grad_and_ties():
    model = on_meta(lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)), torch.bfloat16)
    model[1].weight = model[0].weight  # tied
    model[0].bias.requires_grad_(True)
    assert module_bytes(model) == (64 + 8 + 8) * 2
    with fake_mode() as mode:
        fake_module(model, mode)
    assert model[0].weight is model[1].weight
    assert model[0].weight.dtype == torch.bfloat16 and model[0].weight.device.type == "cpu"
    assert model[0].bias.requires_grad and not model[0].weight.requires_grad


def test_fused_attention_holds_no_attention_matrix():
    """Math attention on fake CPU tensors keeps the N x N matrix; the planned one keeps output + log-sum-exp."""
    def peak(planned: bool) -> int:
        with fake_mode():
            q = torch.empty(1, 2, 2048, 64, requires_grad=True)
            live = LiveBytes()
            with live:
                if planned:
                    with fused_attention():
                        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
                else:
                    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
                out.sum().backward()
        return live.peak

    matrix = 2 * 2048 * 2048 * 4
    assert peak(False) >= matrix
    assert peak(True) < matrix / 4


def test_meta_init_skipped_leaves_meta_tensors_alone_and_initialises_the_rest():
    """While meta modules are built, torch.nn.init's initialisers return a meta tensor untouched (it has no values:
    the plan reads shapes and dtypes only); a tensor with storage is still initialised, and the initialisers are
    torch's own again afterwards."""
    from dit_lora.plan.fake import meta_init_skipped

    seen, real = [], torch.Tensor.uniform_

    def uniform_(tensor, *args, **kwargs):
        seen.append(tensor.device.type)
        return real(tensor, *args, **kwargs)

    original = torch.nn.init.kaiming_uniform_
    torch.Tensor.uniform_ = uniform_
    try:
        with meta_init_skipped():
            with torch.device("meta"):
                layer = torch.nn.Linear(8, 8)  # reset_parameters: kaiming_uniform_ and uniform_ on meta
            host = torch.zeros(4, 4)
            torch.nn.init.ones_(host)
    finally:
        del torch.Tensor.uniform_  # the inherited method again (assigning it back would leave a copy on Tensor)
    assert seen == [] and layer.weight.shape == (8, 8) and layer.weight.device.type == "meta"
    assert bool((host == 1).all())
    assert torch.nn.init.kaiming_uniform_ is original


class _StorageCounted(LiveBytes):
    """The count by storages alone (every operator's results against its inputs' storages): what LiveBytes's
    schema shortcut must agree with."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves
        from torch.utils.flop_counter import flop_registry

        out = func(*args, **(kwargs or {}))
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            self.flops += int(count(*args, **(kwargs or {}), out_val=out))
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and id(leaf.untyped_storage()) not in inputs:
                self._track(leaf)
        return out


def _block_step(counter_class, weight_dtype):
    """(peak, current) of a forward and backward through views, reshapes (``_unsafe_view``), splits, in-place
    operators, a real constant lifted into the fake mode, an upcast and checkpointing, on fake weights."""
    from torch.utils.checkpoint import checkpoint

    table = torch.linspace(0, 1, 64)  # a real tensor the step reads, as a scheduler's table is
    with torch.device("meta"):
        lin, norm = torch.nn.Linear(64, 192), torch.nn.LayerNorm(64)
    module = torch.nn.ModuleDict({"lin": lin, "norm": norm}).to(weight_dtype)
    with fake_mode() as mode:
        fake_module(module, mode)
        lin.weight.requires_grad_(True)
        x = torch.randn(3, 5, 64, dtype=weight_dtype)

        def block(h):
            flat = torch.ops.aten._unsafe_view.default(h, (15, 64))  # h's own storage, made before the count
            scale = torch.tensor([[0.5] * 192] * 15)  # a constant the fake mode lifts (lift_fresh): a new storage,
            q, k, v = (lin(norm(flat)) * scale).split(64, dim=-1)  # kept for the backward; q, k, v: views
            att = (q.reshape(15, 64) @ k.reshape(15, 64).t()).softmax(-1) @ v.reshape(15, 64)
            out = att.view(3, 5, 64).float() + table
            out.mul_(2).add_(h.float())  # in place: no new storage
            return out.to(weight_dtype)

        with counter_class() as live:
            y = checkpoint(block, x, use_reentrant=False)
            y.float().pow(2).mean().backward()
        return live.peak, live.current, live.flops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_schema_shortcut_counts_what_the_storages_say(dtype):
    """LiveBytes reads whether an operator's results are new or views from its schema (once per operator) instead of
    comparing every result's storage with every input's: the same bytes and FLOPs, including the operators whose
    schema does not tell (``_unsafe_view``, ``lift_fresh``)."""
    got, want = _block_step(LiveBytes, dtype), _block_step(_StorageCounted, dtype)
    assert got == want and got[0] > 0
