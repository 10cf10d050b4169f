"""--caption_dropout_probability end to end on the tiny Sana model: P=0 is the run without the option, and an
uncached run drops too. Killed and resumed bit for bit: tests/e2e/test_resume.py's mixed_aspect setting trains with
caption dropout (its kill and resume share that module's reference run)."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from helpers import base_args, read_summary, run_recipe

OPTS = dict(max_train_steps=6, checkpointing_steps=2, resolution=32, train_batch_size=2, random_flip="true")
LINE = "caption dropout: each step drops a sample's caption with probability 0.5 (deterministic per seed, epoch and sample)"


def _adapter(out):
    return load_file(str(out / "pytorch_lora_weights.safetensors"))


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and bool((a[k] == b[k]).all()) for k in a)


@pytest.mark.slow
def test_caption_dropout_changes_training_and_p0_is_the_run_without_it(tmp_path, tiny_sana, shapes_data):
    cache = tmp_path / "cache"
    reference = tmp_path / "reference"
    ref = run_recipe(base_args(tiny_sana, shapes_data, reference, cache, caption_dropout_probability=0.5, **OPTS),
                     warm=True)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert ref.stdout.count(LINE) == 1 and ref.stdout.count("the empty caption encoded once") == 1, ref.stdout
    assert read_summary(reference)["config"]["caption_dropout_probability"] == 0.5

    # The drop changes training: without it the adapter differs; P=0 is exactly the run without the option.
    plain, zero = tmp_path / "plain", tmp_path / "zero"
    for folder, extra in ((plain, {}), (zero, {"caption_dropout_probability": 0})):
        proc = run_recipe(base_args(tiny_sana, shapes_data, folder, cache, **OPTS, **extra), warm=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "caption dropout" not in proc.stdout
    assert _equal(_adapter(plain), _adapter(zero))
    assert not _equal(_adapter(plain), _adapter(reference))


@pytest.mark.slow
def test_an_uncached_run_drops_captions_too(tmp_path, tiny_sana, shapes_data):
    runs = {}
    for p in (0.0, 0.5):
        out = tmp_path / f"p{p}"
        proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", cache_latents="false",
                                    caption_dropout_probability=p, **dict(OPTS, max_train_steps=3)), warm=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (LINE in proc.stdout) == (p > 0)
        runs[p] = _adapter(out)
    assert not list((tmp_path / "cache").rglob("empty_prompt.safetensors"))  # nothing cached without the cache
    assert not _equal(runs[0.0], runs[0.5])
