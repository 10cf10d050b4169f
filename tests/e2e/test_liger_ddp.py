"""The video-LLM fused-loss path under DDP: two CPU processes over gloo, Liger forced onto its reference.

``hidden_state_loss`` is what ``--use_liger_kernel`` trains with (Liger's fused linear cross-entropy,
here its PyTorch reference, plain cross-entropy on the hidden states). It used to reach
``model.model`` and ``get_output_embeddings`` on the DDP wrapper (AttributeError); going around
DDP's forward instead would silently skip the gradient all-reduce.
"""

from __future__ import annotations

import pytest
import torch

from warm import run_ranks

#: one rank: the LoRA'd tiny model under DDP, each rank its own batch; the fused loss's and the plain loss's
#: gradients saved to ``<folder>/rank<RANK>.pt``
WORKER = r"""
import os, sys, traceback
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: the group's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
rank = dist.get_rank()
code = 0
try:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dit_lora.families.videollm.demo_llava import build_tiny_videollm_model
    from dit_lora.modeling import trainables
    from dit_lora.families.videollm.liger import hidden_state_loss, plain_loss

    torch.manual_seed(0)
    model = build_tiny_videollm_model(seed=0, dtype=torch.float32)
    model.requires_grad_(False)
    trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, seed=0,
                        targets=("language_model.layers.0.self_attn.q_proj", "language_model.layers.1.mlp.up_proj"))
    for n, p in model.named_parameters():  # non-zero B so every LoRA weight gets a gradient
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    model.train()
    ddp = DDP(model)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    ids = torch.randint(5, model.config.text_config.vocab_size, (2, 12), generator=gen)
    labels = ids.clone()
    labels[:, :4] = -100
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    fused = hidden_state_loss(None, ddp, inputs, labels)
    fused.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    plain = plain_loss(None, ddp, inputs, labels)
    plain.backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    torch.save((float(fused), float(plain), grads, ref), os.path.join(sys.argv[1], f"rank{rank}.pt"))
except BaseException:
    traceback.print_exc()
    code = 1
# Out with os._exit, as dit-lora's own processes in a group leave (core/errors.py): freeing the DDP wrapper at the
# interpreter's end destroys the gloo group while holding the GIL, and the group's worker thread, freeing its last
# all-reduce, waits for the GIL: a deadlock (py-spy: ~ProcessGroupGloo joining runLoop in ~AsyncWork), about one
# run in 40 on 2 busy cores.
sys.stdout.flush(); sys.stderr.flush()
os._exit(code)
"""


@pytest.mark.slow
def test_hidden_state_loss_goes_through_ddp_and_its_gradients_are_synchronised(tmp_path):
    """Two ranks forked from a warm interpreter (tests/support/warm.py): what they compute, not their start."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = run_ranks(script, [tmp_path], 2, timeout=300)
    assert [d.returncode for d in done] == [0, 0], "".join(d.stdout + d.stderr for d in done)
    (f0, p0, g0, r0), (f1, p1, g1, r1) = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert f0 == pytest.approx(p0, rel=1e-5) and f1 == pytest.approx(p1, rel=1e-5)  # same loss as the model's own
    assert f0 != pytest.approx(f1)  # the ranks saw different data...
    assert g0.keys() == r0.keys() and len(g0) == 4
    for name in g0:
        assert torch.equal(g0[name], g1[name]), name  # ...yet hold the same, all-reduced gradients
        assert torch.allclose(g0[name], r0[name], rtol=1e-4, atol=1e-7), name
        assert torch.equal(r0[name], r1[name]), name  # the plain path is synchronised too
