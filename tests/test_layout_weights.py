"""The weights of the real-layout folders (tests/support/layout_weights.quick_init): the libraries' own init with each
random draw a copy from a seeded pool, so a real-width layer is built in a copy's time. What the layout tests rely on:
the values are finite, spread as the library spreads them, distinct between tensors and from row to row, fixed by
the seed, and nothing outside the block draws differently."""

from __future__ import annotations

import torch
from layout_weights import quick_init, random_weights


def test_the_librarys_init_keeps_its_range_and_constants_with_copied_draws():
    reference = torch.nn.Linear(1000, 1100)
    with quick_init(0):
        first, second = torch.nn.Linear(1000, 1100), torch.nn.Linear(1000, 1100)
        embedding, norm = torch.nn.Embedding(3000, 400), torch.nn.LayerNorm(1000)
    bound = 1 / 1000**0.5  # kaiming_uniform_(a=sqrt(5)) of nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert torch.isfinite(first.weight).all() and first.weight.abs().max() <= bound
    torch.testing.assert_close(first.weight.std(), reference.weight.std(), rtol=0.02, atol=0)
    assert abs(embedding.weight.mean().item()) < 0.01 and abs(embedding.weight.std().item() - 1) < 0.01  # N(0, 1)
    assert torch.equal(norm.weight, torch.ones(1000)) and torch.equal(norm.bias, torch.zeros(1000))
    assert not torch.equal(first.weight, second.weight) and not torch.equal(first.bias, second.bias)
    # 1.1M values, more than the pool holds (the pool repeats): never one row repeated
    assert len(torch.unique(first.weight, dim=0)) == 1100


def test_the_seed_fixes_the_weights_and_draws_outside_are_real_again():
    with quick_init(0):
        a = torch.nn.Linear(64, 64)
    with quick_init(0):
        again = torch.nn.Linear(64, 64)
    with quick_init(1):
        other = torch.nn.Linear(64, 64)
    assert torch.equal(a.weight, again.weight) and not torch.equal(a.weight, other.weight)
    assert "uniform_" not in torch.Tensor.__dict__ and "normal_" not in torch.Tensor.__dict__
    draws = [torch.empty(8).uniform_() for _ in range(2)] + [torch.empty(8).normal_() for _ in range(2)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[2], draws[3])


def test_random_weights_are_small_and_spread():
    model = random_weights(torch.nn.Linear(300, 400), seed=3)
    assert abs(model.weight.std().item() - 0.02) < 0.001 and abs(model.bias.std().item() - 0.02) < 0.004
    assert not torch.equal(model.weight[0], model.weight[1])
