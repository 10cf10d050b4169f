"""families/diffusion/info_cache.py: a checkpoint's configs read once per model, again when the folder changed or
after forget()."""

from __future__ import annotations

import os
from types import SimpleNamespace

from dit_lora.families.diffusion.info_cache import InfoCache


def test_read_once_per_model_and_again_after_a_rebuild_or_forget(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    reads = []
    cache = InfoCache(lambda cfg: reads.append(cfg.model.pretrained_model_name_or_path) or len(reads))
    cfg = SimpleNamespace(model=SimpleNamespace(pretrained_model_name_or_path=str(tmp_path), revision=None,
                                                family="wan"))
    assert cache(cfg) == 1 and cache(cfg) == 1
    os.utime(tmp_path / "model_index.json", ns=(1, 1))
    assert cache(cfg) == 2
    cache.forget()
    assert cache(cfg) == 3
