"""families/dit/embedding.py: every block's class table resized with its null row kept last, and DiTPipeline's
null id 1000 mapped onto it."""

from __future__ import annotations

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.dit.embedding import (
    PIPELINE_NULL_CLASS,
    label_embeddings,
    resize_class_embeddings,
)


def _tiny_transformer():
    from diffusers import DiTTransformer2DModel

    from dit_lora.families.dit.demo import get_tiny_dit_config

    torch.manual_seed(0)
    return DiTTransformer2DModel(**get_tiny_dit_config()["transformer"]).eval()


def test_resize_keeps_the_null_row_last_and_maps_the_pipelines_null_id():
    model = _tiny_transformer()
    old_nulls = [emb.embedding_table.weight[-1].clone() for _, emb in label_embeddings(model)]
    resize_class_embeddings(model, 3, seed=0)
    tables = label_embeddings(model)
    assert tables and all(emb.embedding_table.weight.shape[0] == 4 and emb.num_classes == 3 for _, emb in tables)
    for (_, emb), null in zip(tables, old_nulls):
        torch.testing.assert_close(emb.embedding_table.weight[-1], null, rtol=0, atol=0)
    assert model.config.num_embeds_ada_norm == 3
    x, t = torch.randn(1, 4, 8, 8), torch.tensor([10])
    with torch.no_grad():
        by_pipeline_id = model(x, timestep=t, class_labels=torch.tensor([PIPELINE_NULL_CLASS])).sample
        by_row = model(x, timestep=t, class_labels=torch.tensor([3])).sample
    torch.testing.assert_close(by_pipeline_id, by_row, rtol=0, atol=0)


def test_a_model_without_class_tables_is_refused():
    with pytest.raises(UserError, match="no class embedding"):
        resize_class_embeddings(torch.nn.Linear(2, 2), 3)
