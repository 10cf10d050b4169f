"""The video-LLM family spec: a vision tower, a projector and a language model, trained with LoRA.

:func:`family_spec` fills one :class:`~dit_lora.contract.spec.FamilySpec` per architecture (one line of
:data:`ARCHITECTURES` below; :func:`videollm_spec` builds a family name's), from components that each take the architecture
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
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.videollm import demo_clips
from dit_lora.families.videollm.architecture import VideoLLMSpec
from dit_lora.families.videollm.demo_internvl import build_tiny_internvl
from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video
from dit_lora.families.videollm.demo_qwen import build_tiny_qwen2_5_vl
from dit_lora.families.videollm.demo_qwen3_vl import build_tiny_qwen3_vl
from dit_lora.families.videollm.demo_qwen3_vl_moe import build_tiny_qwen3_vl_moe
from dit_lora.families.videollm.internvl import InternVLSpec
from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec
from dit_lora.families.videollm.loading import VideoLLMDefaults, VideoLLMModel, VideoLLMPrecision, VideoLLMTrainables
from dit_lora.families.videollm.media import VideoQAData
from dit_lora.families.videollm.outputs import VideoLLMAdapter, VideoLLMCard, VideoLLMSamples
from dit_lora.families.videollm.plan import VideoLLMPlan
from dit_lora.families.videollm.processing import QAProcessingLoader
from dit_lora.families.videollm.qwen2_5_vl import Qwen25VLSpec
from dit_lora.families.videollm.qwen3_vl import Qwen3VLSpec
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


class Architecture(NamedTuple):
    """One video-LLM architecture: what builds its :class:`~.architecture.VideoLLMSpec`, and its tiny model."""

    #: a new :class:`~.architecture.VideoLLMSpec` of it (its class)
    spec: Callable[[], VideoLLMSpec]
    #: ``build(path) -> Path``: its tiny offline model (``--demo``, the tests)
    demo: Callable[[str | Path], Path]


#: family name -> its architecture, in the order the package's ``MODEL_CLASSES`` registers the names
ARCHITECTURES: dict[str, Architecture] = {
    "llava_next_video": Architecture(LlavaNextVideoSpec, build_tiny_llava_next_video),
    "qwen2_5_vl": Architecture(Qwen25VLSpec, build_tiny_qwen2_5_vl),
    "internvl": Architecture(InternVLSpec, build_tiny_internvl),
    "qwen3_vl": Architecture(Qwen3VLSpec, build_tiny_qwen3_vl),
    "qwen3_vl_moe": Architecture(partial(Qwen3VLSpec, sparse=True), build_tiny_qwen3_vl_moe),
}


def _architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise KeyError(f"unknown video-LLM family {name!r}; known: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def architecture_spec(name: str) -> VideoLLMSpec:
    """A new :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec` of family ``name`` (an unknown name:
    KeyError naming the known)."""
    return _architecture(name).spec()


def build_demo_model(name: str, path: str | Path) -> Path:
    """Build (or reuse) the tiny offline model of family ``name`` at ``path`` (an unknown name: KeyError, nothing
    built)."""
    return _architecture(name).demo(path)


def videollm_spec(name: str) -> FamilySpec:
    """The :class:`~dit_lora.contract.spec.FamilySpec` of the video-LLM architecture ``name``."""
    return family_spec(architecture_spec(name), partial(build_demo_model, name))
