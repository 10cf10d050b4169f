"""The video LLMs' memory plan (``FamilySpec.plan``): the model on the meta device, one clip's embeddings, the loss.

The planner (:mod:`dit_lora.plan`) traces the language model on input embeddings: the full forward merges video
features by the token ids' values and places Qwen's 3-D positions by the grid's, which fake tensors do not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.catalogue import by_hub_id
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.videollm.architecture import VideoLLMSpec, model_folder
from dit_lora.families.videollm.processing import max_tokens
from dit_lora.plan.fake import transformers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import ModelOptions, TrainConfig

#: text tokens (question, answer, template) the plan assumes beside the video tokens
PLAN_TEXT_TOKENS = 256


@dataclass(frozen=True)
class VideoLLMPlan:
    """``FamilySpec.plan``: what :meth:`~dit_lora.families.videollm.loading.VideoLLMModel.load_components` loads,
    built from its config on the meta device, one clip's batch, and the language model's loss."""

    arch: VideoLLMSpec
    #: ``(config file, key)`` counting the repeated blocks: the language model's layers (text_config in LLaVA)
    depth_key: tuple[str, str] = ("config.json", "num_hidden_layers")

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """The transformers model of the architecture from the folder's ``config.json``, ``depth`` layers deep."""
        import transformers  # the model classes: transformers' lazy module imports the one asked for

        config = with_depth(read("", "config.json"), "num_hidden_layers", depth)
        model_class = getattr(transformers, self.arch.model_class)
        return Components(model=transformers_on_meta(config, cfg.weight_dtype, model_class))

    def plan_batches(self, cfg: TrainConfig, comps) -> list[tuple[str, dict[str, Any]]]:
        """The language model's input embeddings for ``--num_frames`` frames plus :data:`PLAN_TEXT_TOKENS`.

        The video-token count comes from the spec's own preprocessing of a clip of ``--height`` x ``--width``
        (default 448 x 448; LLaVA crops every clip to its tower's size anyway).
        """
        import numpy as np
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        model_config = comps.model.config
        height, width = cfg.video.height or 448, cfg.video.width or 448
        frames = np.zeros((cfg.family_options.num_frames, height, width, 3), dtype=np.uint8)
        prep = self.preprocessing(cfg.model, model_config)
        with unset_fake_temporarily():  # the spec's real preprocessing of one small clip: counts need values
            video = self.arch.video_token_count(self.arch.frame_inputs(frames, prep), model_config)
        length = min(video + PLAN_TEXT_TOKENS, max_tokens(cfg))
        hidden = getattr(model_config, "text_config", model_config).hidden_size
        batch = {
            "inputs_embeds": torch.empty(
                cfg.training.train_batch_size, length, hidden, dtype=cfg.weight_dtype, requires_grad=True
            ),  # they carry the projector's gradient
            "labels": torch.zeros(cfg.training.train_batch_size, length, dtype=torch.long),
        }
        return [
            (
                f"{cfg.family_options.num_frames} frames of {height} x {width}: {video} video + "
                f"{length - video} text tokens",
                batch,
            )
        ]

    def preprocessing(self, model: ModelOptions, model_config) -> dict[str, Any]:
        """The model's preprocessing (``model``: the run's ``cfg.model``; a local folder, or a Hub id's snapshot: its
        small files, downloaded when missing), else the spec's defaults (LLaVA: at its tower's own size) for a
        catalogued Hub id that cannot be had now: the catalogue's copy of its configs plans it without a download."""
        path = model.pretrained_model_name_or_path
        if path is not None and Path(path).is_dir():
            return self.arch.load_preprocessing(path)
        if path is not None:
            try:
                return self.arch.load_preprocessing(model_folder(model, weights=False))
            except UserError:
                if by_hub_id(path) is None:  # nothing else knows this model: the paragraph says how to get it
                    raise
        prep = {"resize_to": None, **self.arch.default_preprocessing}
        size = getattr(getattr(model_config, "vision_config", None), "image_size", None)
        if size:
            prep.update(shortest_edge=size, crop_size=(size, size))
        return prep

    def plan_loss(self, comps, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig) -> torch.Tensor:
        """The language model and its loss on the batch's embeddings, as the model's own forward runs them.

        What it leaves out: the frozen vision tower, which keeps no activations (nothing in it trains) and whose
        transient peak is one layer's.
        """
        import torch.nn.functional as F

        model = comps.model
        language_model = self.arch.module(model, self.arch.language_model)
        hidden = language_model(inputs_embeds=batch["inputs_embeds"], use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(hidden)
        return F.cross_entropy(
            logits[:, :-1].float().flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100
        )
