"""The video-LLM family spec: a vision tower, a projector and a language model, trained with LoRA.

:func:`family_spec` fills one :class:`~dit_lora.contract.spec.FamilySpec` per architecture (one line of
``ARCHITECTURES`` in this package's ``__init__``), from components that each take the architecture
(:class:`~dit_lora.families.videollm.architecture.VideoLLMSpec`: module names, frame preprocessing, video tokens),
so the training loop, guards, checkpoints and Hub push are the diffusion recipes' own:

* ``model``, ``trainables``, ``precision``, ``defaults``: :mod:`~.loading` (checks, loading, LoRA targets; the
  projector and the vision tower; what stays unquantized; one clip per step)
* ``data``: :class:`~.media.VideoQAData` (QA samples, tokenized on the fly); ``video_qa``:
  :class:`~.processing.QAProcessingLoader` (the model's processing, for ``check-data`` too)
* ``setup``, ``loss``: :mod:`~.state` (the loss function and the validation clip, and the step that reads them)
* ``plan``: :class:`~.plan.VideoLLMPlan`
* ``adapter``, ``samples``, ``card``: :mod:`~.outputs`
* ``demo``: :class:`VideoLLMDemo` (below)

What a run decides lives in its :class:`~.state.VideoLLMState` (``comps.state``). The loss counts answer tokens
only; with ``--use_liger_kernel`` on a CUDA GPU it is Liger's fused linear cross-entropy on the language model's
last hidden states (no full logits tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.videollm import demo_clips
from dit_lora.families.videollm.architecture import VideoLLMSpec
from dit_lora.families.videollm.loading import VideoLLMDefaults, VideoLLMModel, VideoLLMPrecision, VideoLLMTrainables
from dit_lora.families.videollm.media import VideoQAData
from dit_lora.families.videollm.outputs import VideoLLMAdapter, VideoLLMCard, VideoLLMSamples
from dit_lora.families.videollm.plan import VideoLLMPlan
from dit_lora.families.videollm.processing import QAProcessingLoader
from dit_lora.families.videollm.state import VideoLLMLoss, VideoLLMSetup
from dit_lora.output.names import PEFT_ADAPTER_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


@dataclass(frozen=True)
class VideoLLMDemo:
    """``FamilySpec.demo``: the architecture's tiny offline model and a moving-square QA data set."""

    #: ``build_model(path)``: writes (or reuses) the architecture's tiny model folder at ``path``
    build_model: Callable[[str | Path], Path]

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """The tiny model at ``--pretrained_model_name_or_path`` and the clips at ``--train_data_dir`` (a
        ``.jsonl`` annotation: chat layout; otherwise VideoChat2's)."""
        self.build_model(cfg.model.path)
        if cfg.data.train_data_dir is None:  # no folder given, nothing is drawn (as the diffusion demos do)
            return
        folder = Path(cfg.data.train_data_dir)
        layout = "chat" if folder.suffix == ".jsonl" else "videochat2"
        root = folder.parent if folder.suffix in (".json", ".jsonl") else folder
        demo_clips.make_qa_dataset(
            root,
            n=cfg.model.demo_num_images,
            num_frames=cfg.family_options.num_frames,
            layout=layout,
            seed=cfg.training.seed,
        )


def family_info(arch: VideoLLMSpec) -> FamilyInfo:
    """What the model card, the loader and ``--compile`` say about the video LLM of ``arch``."""
    return FamilyInfo(
        pipeline_class_name=arch.model_class,
        card_tags=("video-text-to-text", "videochat"),
        library_name="peft",
        pipeline_tag="video-text-to-text",
        adapter_weight_name=PEFT_ADAPTER_FILE,
        gradient_checkpointing_default=True,
        compile_dynamic=True,  # the text length changes nearly every batch
        block_lists=(arch.decoder_layers,),
    )


def family_spec(arch: VideoLLMSpec, build_demo_model: Callable[[str | Path], Path]) -> FamilySpec:
    """The :class:`FamilySpec` of the video-LLM architecture ``arch`` (registered under ``arch.name``), whose tiny
    offline model ``build_demo_model(path)`` writes."""
    return FamilySpec(
        name=arch.name,
        info=family_info(arch),
        model=VideoLLMModel(arch),
        data=VideoQAData(),
        loss=VideoLLMLoss(arch),
        adapter=VideoLLMAdapter(arch),
        video_qa=QAProcessingLoader(arch),
        samples=VideoLLMSamples(),
        plan=VideoLLMPlan(arch),
        card=VideoLLMCard(arch),
        defaults=VideoLLMDefaults(),
        setup=VideoLLMSetup(arch),
        trainables=VideoLLMTrainables(arch),
        precision=VideoLLMPrecision(arch),
        demo=VideoLLMDemo(build_demo_model),
    )
