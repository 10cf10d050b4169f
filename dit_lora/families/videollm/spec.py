"""Video-LLM families (VideoChat-style): a vision tower, a projector and a language model, trained with LoRA.

One :class:`VideoChatFamily` per architecture, each driven by its
:class:`~dit_lora.families.videollm.architecture.VideoLLMSpec` (module names, frame preprocessing, video tokens), so the
training loop, guards, checkpoints and Hub push are the diffusion recipes' own:

* LoRA on the language model's q/k/v/o/gate/up/down projections (only there: the vision tower has
  modules with the same names) at ``--learning_rate``; the projector trained fully at
  ``--backbone_learning_rate``; the vision tower frozen unless ``--train_vision_tower``.
* The model is loaded in bf16 whatever the checkpoint's dtype (fp32 with ``--mixed_precision no``, as the frozen
  weights of every family load in ``cfg.weight_dtype``); fp16 is refused as elsewhere.
* The loss counts answer tokens only; with ``--use_liger_kernel`` on a CUDA GPU it is Liger's fused
  linear cross-entropy on the language model's last hidden states (no full logits tensor).
* Output: a PEFT adapter (``adapter_model.safetensors`` + ``adapter_config.json``) plus the trained
  projector in ``dit_lora_backbone.safetensors``; ``dit_lora.load_adapter(model, output_dir)`` restores
  both, ``PeftModel.from_pretrained`` the adapter alone.
"""

from __future__ import annotations


import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.output.names import PEFT_ADAPTER_FILE
from dit_lora.contract.family import Components, ModelFamily
from dit_lora.contract.capabilities import (
    AdapterExtras, Demo, MemoryPlan, ModelCard, ModelDefaults, Precision, RunSetup, Samples, Trainables, VideoQA,
)
from dit_lora.output.adapter import attach_adapter

DEFAULT_MAX_LENGTH = 2048
MAX_NEW_TOKENS = 24


@dataclass(frozen=True)
class VideoQAProcessing:
    """A model's tokenizer, frame preprocessing and config: what turns clips and conversations into its inputs.

    Loaded per run (``comps.extras["processing"]``, or by ``check-data``), never kept on the family.
    """

    spec: Any
    tokenizer: Any
    prep: dict
    model_config: Any

    @property
    def pad_token_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def frame_inputs(self, frames, fps: float | None = None) -> tuple[dict[str, torch.Tensor], int]:
        """The spec's pixel inputs for uint8 frames sampled at ``fps``, and how many video tokens they make."""
        pixels = self.spec.frame_inputs(frames, self.prep, fps=fps)
        return pixels, self.spec.video_token_count(pixels, self.model_config)

    def tokenize(self, messages: list[dict], video_tokens: int, max_length: int | None) -> dict:
        """A conversation as training tokens with answer-only labels (``max_length``: refuse longer)."""
        from dit_lora.families.videollm.prompts import build_training_example

        return build_training_example(
            self.tokenizer, messages, video_placeholder=self.spec.video_placeholder,
            video_token_id=self.tokenizer.convert_tokens_to_ids(self.spec.video_token),
            video_token_count=video_tokens, max_length=max_length)

    def answer(self, model, question: str, video: Path, num_frames: int) -> str:
        """Greedy answer of ``model`` to ``question`` about ``video``."""
        from dit_lora.families.videollm.data import read_clip
        from dit_lora.families.videollm.prompts import build_generation_prompt

        clip = read_clip(video, num_frames)
        pixels, count = self.frame_inputs(clip.frames, clip.fps)
        prompt = build_generation_prompt(
            self.tokenizer, [{"role": "user", "content": question}], video_placeholder=self.spec.video_placeholder,
            video_token_id=self.tokenizer.convert_tokens_to_ids(self.spec.video_token), video_token_count=count)
        device = next(model.parameters()).device
        inputs = {k: v[None].to(device) for k, v in prompt.items()}
        inputs.update({k: v.to(device) for k, v in self.spec.collate_pixels([pixels]).items()})
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                 pad_token_id=self.pad_token_id)
        return self.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()


@dataclass
class VideoQAPipe:
    """A base model with a loaded adapter, and what it needs to answer a question about a clip."""

    model: torch.nn.Module
    processing: VideoQAProcessing
    family: "VideoChatFamily"


def skip_placeholder_count_check(model: torch.nn.Module) -> None:
    """Stop transformers from reading a device tensor in every forward of a video LLM.

    ``get_placeholder_mask`` checks that the video tokens match the features with a tensor condition
    and an f-string that formats the token count (two host syncs per step, even when the check
    passes). It skips both when no features are passed, so the instance's method is wrapped to drop
    them; the spec already counts the video tokens on the host when each prompt is built.
    """
    inner = getattr(model, "model", model)
    original = getattr(inner, "get_placeholder_mask", None)
    if original is None:
        return

    def placeholder_mask(*args, **kwargs):
        kwargs.pop("image_features", None)
        kwargs.pop("video_features", None)
        return original(*args, **kwargs)

    inner.get_placeholder_mask = placeholder_mask


class VideoChatFamily(ModelFamily):
    """LoRA for one video-LLM architecture, described by ``spec``."""

    library_name = "peft"
    pipeline_tag = "video-text-to-text"
    adapter_weight_name = PEFT_ADAPTER_FILE
    gradient_checkpointing_default = True
    compile_dynamic = True  # the text length changes nearly every batch
    card_tags = ("video-text-to-text", "videochat")
    capabilities = (Demo, ModelDefaults, Precision, RunSetup, Trainables, Samples, MemoryPlan, ModelCard,
                    AdapterExtras, VideoQA)

    def __init__(self, spec) -> None:
        self.spec = spec
        self.name = spec.name
        self.pipeline_class_name = spec.model_class

    # ---- setup ----------------------------------------------------------------------------
    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """One clip per step: a clip's frames are hundreds to thousands of vision tokens."""
        return {"train_batch_size": (1, "video: one clip per step (a clip is hundreds of vision tokens)")}

    def validate_config(self, cfg: TrainConfig) -> None:
        if not cfg.pretrained_model_name_or_path:
            raise UserError("--pretrained_model_name_or_path is required: the video LLM to fine-tune.")
        from dit_lora.setup.tokenizer_check import check_tokenizer_packages

        from dit_lora.modelfiles.pipeline_files import check_safetensors

        check_safetensors(cfg, ("",), "video LLM")
        check_tokenizer_packages(cfg.pretrained_model_name_or_path, "", cfg.revision)
        if cfg.family_options.validation_video and not Path(cfg.family_options.validation_video).is_file():
            raise UserError(f"--validation_video `{cfg.family_options.validation_video}` does not exist. Point it at a "
                            "clip, or "
                            "leave it unset to ask about the first training clip.")

    def prepare_demo(self, cfg: TrainConfig) -> None:
        from dit_lora.families.videollm.demo_clips import make_qa_dataset
        from dit_lora.families.videollm.registry import build_demo_model

        build_demo_model(self.spec.name, cfg.pretrained_model_name_or_path)
        folder = Path(cfg.train_data_dir)
        layout = "chat" if folder.suffix == ".jsonl" else "videochat2"
        root = folder.parent if folder.suffix in (".json", ".jsonl") else folder
        make_qa_dataset(root, n=cfg.demo_num_images, num_frames=cfg.family_options.num_frames, layout=layout,
                        seed=cfg.seed)

    def load_processing(self, path: str, model_config=None) -> VideoQAProcessing:
        """Tokenizer, frame preprocessing and model config of ``path``, without the weights (``check-data``)."""
        from transformers import AutoConfig

        return VideoQAProcessing(self.spec, self.spec.load_tokenizer(path), self.spec.load_preprocessing(path),
                                 model_config if model_config is not None else AutoConfig.from_pretrained(path))

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        path = cfg.pretrained_model_name_or_path
        # bf16 whatever the checkpoint holds (VideoChat2's fp16 Mistral is where its NaN reports come from), or fp32
        # when --mixed_precision no asks for it (fp16 was refused in validation).
        model = self.spec.load_model(path, cfg.weight_dtype,
                                     quantization_config=quantize.transformers_config(cfg, self.quantize_skip_modules(cfg)))
        model.requires_grad_(False)
        quantize.keep_4bit_layout(model)
        skip_placeholder_count_check(model)
        model.to(device)
        return Components(model=model, extras={"processing": self.load_processing(path, model.config)})

    # ---- memory plan ----------------------------------------------------------------------
    depth_key = ("config.json", "num_hidden_layers")  # the language model's layers (text_config in LLaVA)
    #: text tokens (question, answer, template) the plan assumes beside the video tokens
    PLAN_TEXT_TOKENS = 256

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        import transformers

        from dit_lora.plan.fake import transformers_on_meta, with_depth

        config = with_depth(read("", "config.json"), "num_hidden_layers", depth)
        model_class = getattr(transformers, self.spec.model_class)
        model = transformers_on_meta(config, cfg.weight_dtype, model_class)
        return Components(model=model)

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """The language model's input embeddings for ``--num_frames`` frames plus :attr:`PLAN_TEXT_TOKENS`.

        The video-token count comes from the spec's own preprocessing of a clip of ``--height`` x ``--width``
        (default 448 x 448; LLaVA crops every clip to its tower's size anyway).
        """
        import numpy as np

        model_config = comps.model.config
        path = cfg.pretrained_model_name_or_path
        local = path is not None and Path(path).is_dir()
        prep = self.spec.load_preprocessing(path) if local else {"resize_to": None, **self.spec.default_preprocessing}
        vision = getattr(model_config, "vision_config", None)
        if not local and getattr(vision, "image_size", None):  # LLaVA: the tower's own size, not the spec default
            prep.update(shortest_edge=vision.image_size, crop_size=(vision.image_size, vision.image_size))
        height, width = cfg.height or 448, cfg.width or 448
        frames = np.zeros((cfg.family_options.num_frames, height, width, 3), dtype=np.uint8)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # the spec's real preprocessing of one small clip: counts need values
            video = self.spec.video_token_count(self.spec.frame_inputs(frames, prep), model_config)
        length = min(video + self.PLAN_TEXT_TOKENS, self.max_length(cfg))
        hidden = getattr(model_config, "text_config", model_config).hidden_size
        batch = {"inputs_embeds": torch.empty(cfg.train_batch_size, length, hidden, dtype=cfg.weight_dtype,
                                              requires_grad=True),  # they carry the projector's gradient
                 "labels": torch.zeros(cfg.train_batch_size, length, dtype=torch.long)}
        return [(f"{cfg.family_options.num_frames} frames of {height} x {width}: {video} video + "
                 f"{length - video} text tokens", batch)]

    def plan_loss(self, comps: Components, batch: dict[str, Any], generator: torch.Generator,
                  cfg: TrainConfig) -> torch.Tensor:
        """The language model and its loss on the batch's embeddings, as the model's own forward runs them.

        The full forward merges video features by the token ids' values and places Qwen's 3-D positions by
        the grid's, which fake tensors do not have. What it leaves out: the frozen vision tower, which keeps no
        activations (nothing in it trains) and whose transient peak is one layer's.
        """
        import torch.nn.functional as F

        model = comps.model
        language_model = self.spec.module(model, self.spec.language_model)
        hidden = language_model(inputs_embeds=batch["inputs_embeds"], use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(hidden)
        return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), batch["labels"][:, 1:].flatten(),
                               ignore_index=-100)

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """The run's loss function in ``comps.extras["loss_fn"]``: Liger's fused one with --use_liger_kernel."""
        from dit_lora.families.videollm.liger import apply_liger, plain_loss

        loss_fn = plain_loss
        if cfg.family_options.use_liger_kernel:
            loss_fn = apply_liger(self.spec, comps.model, print) or plain_loss
        comps.extras["loss_fn"] = loss_fn

    def data_handler(self, cfg: TrainConfig):
        """Question-answer samples with their clips, tokenized by the dataset (nothing is cached)."""
        from dit_lora.families.videollm.media import VideoQAMedia

        return VideoQAMedia(cfg, self)

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """The QA data, tokenized with the loaded model's processing (``comps.extras["processing"]``)."""
        from dit_lora.data.prepare import prepare_data
        from dit_lora.families.videollm.media import VideoQAMedia

        return prepare_data(cfg, self, comps, accelerator, media=VideoQAMedia(cfg, self, comps.extras["processing"]))

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        if samples:
            chosen = cfg.family_options.validation_video
            comps.extras["validation_video"] = Path(chosen) if chosen else samples[0].video

    def max_length(self, cfg: TrainConfig) -> int:
        return cfg.max_sequence_length or DEFAULT_MAX_LENGTH

    # ---- what trains ----------------------------------------------------------------------
    def lora_targets(self, model: torch.nn.Module, cfg: TrainConfig) -> list[str]:
        """Full names of the language model's projections (suffixes would also hit the vision tower)."""
        wanted = set(cfg.lora_layers or self.spec.lora_projections)
        prefix = self.spec.language_model + "."
        names = [n for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and n.startswith(prefix) and n.rsplit(".", 1)[-1] in wanted]
        if not names:
            raise UserError(f"--lora_layers {sorted(wanted)} match no Linear layer of the language model "
                            f"({self.spec.language_model}); valid: {', '.join(self.spec.lora_projections)}.")
        return names

    def backbone_patterns(self, cfg: TrainConfig) -> list[str]:
        return list(cfg.train_backbone) or [re.escape(self.spec.projector) + r"\..*"]

    def quantize_skip_modules(self, cfg: TrainConfig) -> list[str]:
        """The language model is quantized; the vision tower, projector and output head stay in the weight dtype
        (small beside it), so --train_vision_tower and the projector still train on a quantized base."""
        return [m for m in (self.spec.vision_tower, self.spec.projector, "lm_head") if m]

    def extra_trainable(self, cfg: TrainConfig) -> list[tuple[str, list[str], float]]:
        if not cfg.family_options.train_vision_tower:
            return []
        return [("vision_tower", [re.escape(self.spec.vision_tower) + r"\..*"],
                 cfg.family_options.vision_tower_learning_rate)]

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # ---- loss -----------------------------------------------------------------------------
    def compute_loss(self, comps: Components, model: torch.nn.Module, batch: dict[str, Any],
                     generator: torch.Generator, cfg: TrainConfig) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "sample_index")}
        from dit_lora.families.videollm.liger import plain_loss

        loss_fn = comps.extras.get("loss_fn") or plain_loss  # configure() chose it
        return loss_fn(self.spec, model, self.spec.step_inputs(inputs, comps.model.config), batch["labels"])

    @staticmethod
    def _qa(processing: VideoQAProcessing, model, question: str, cfg: TrainConfig, video: Path | None) -> str:
        if video is None:
            raise UserError("Video-LLM validation needs a clip: set --validation_video.")
        answer = processing.answer(model, question, video, cfg.family_options.num_frames)
        return f"video: {video.name}\nQ: {question}\nA: {answer}"

    @staticmethod
    def _validation_video(cfg: TrainConfig, comps: Components | None) -> Path | None:
        """The clip validation asks about: the run's (:meth:`inspect_samples`), else ``--validation_video``."""
        if comps is not None and comps.extras.get("validation_video") is not None:
            return comps.extras["validation_video"]
        chosen = cfg.family_options.validation_video
        return Path(chosen) if chosen else None

    def validation_inputs(self, comps: Components, cfg: TrainConfig) -> dict[str, Any]:
        return {"question": cfg.validation_prompt}

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict, cfg: TrainConfig, seed: int) -> list:
        return [self._qa(comps.extras["processing"], model, cond["question"], cfg, self._validation_video(cfg, comps))]

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        from dit_lora.core.fileio import write_text_atomic

        path = Path(stem).with_suffix(".txt")
        write_text_atomic(path, str(sample) + "\n")  # replaces a link there, never follows it
        return path

    # ---- output ---------------------------------------------------------------------------
    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        from dit_lora.output.adapter import save_peft_adapter

        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def save_adapter_extras(self, output_dir: Path, comps: Components, cfg: TrainConfig) -> None:
        """The base model named in ``adapter_config.json``."""
        from dit_lora.output.adapter import set_peft_base_model

        set_peft_base_model(Path(output_dir), cfg.pretrained_model_name_or_path)

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device) -> VideoQAPipe:
        model = self.spec.load_model(cfg.pretrained_model_name_or_path, cfg.weight_dtype)
        attach_adapter(self, model, adapter_dir)
        model.to(device).eval()
        return VideoQAPipe(model, self.load_processing(cfg.pretrained_model_name_or_path, model.config), self)

    def generate_with_pipeline(self, pipe: VideoQAPipe, prompt: str, cfg: TrainConfig, seed: int,
                               num_images: int, comps: Components | None = None) -> list:
        return [self._qa(pipe.processing, pipe.model, prompt, cfg, self._validation_video(cfg, comps))]

    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """The model in the run's weight dtype."""
        return {"model": cfg.weight_dtype}

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        """Not known for video LLMs."""
        return None

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        base = cfg.pretrained_model_name_or_path
        question = cfg.validation_prompt or "What happens in this video?"
        num_frames = cfg.family_options.num_frames
        return f'''import av, numpy as np, torch
from transformers import AutoProcessor, {self.spec.model_class}
from dit_lora import load_adapter  # LoRA + the trained projector; PeftModel.from_pretrained loads the LoRA alone

model = {self.spec.model_class}.from_pretrained("{base}", dtype=torch.bfloat16, device_map="cuda")
load_adapter(model, "{repo_or_dir}")
processor = AutoProcessor.from_pretrained("{base}")

with av.open("clip.mp4") as container:  # {num_frames} frames, uniformly over the clip, as in training
    stream = container.streams.video[0]
    fps = float(stream.average_rate)
    frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
indices = [(2 * i + 1) * len(frames) // {2 * num_frames} for i in range({num_frames})]
video = np.stack([frames[i] for i in indices])
conversation = [{{"role": "user", "content": [{{"type": "video"}}, {{"type": "text", "text": {question!r}}}]}}]
prompt = processor.apply_chat_template(conversation, add_generation_prompt=True)
{self._snippet_timing()}inputs = processor(text=prompt, videos=video, {"**timing, " if self.spec.positions_encode_time else ""}return_tensors="pt").to(model.device, torch.bfloat16)
out = model.generate(**inputs, max_new_tokens=64, do_sample=False)
print(processor.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
'''

    def _snippet_timing(self) -> str:
        """The snippet's lines that tell the processor the rate the frames were sampled at (time positions)."""
        if not self.spec.positions_encode_time:
            return ""
        return ("# The clip's time positions use the rate these frames were sampled at, as in training (without\n"
                "# metadata the processor assumes 24 fps).\n"
                "timing = dict(video_metadata={\"total_num_frames\": len(frames), \"fps\": fps, "
                "\"frames_indices\": indices}, do_sample_frames=False)\n")

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        return {"num_frames": cfg.family_options.num_frames,
                "projector": f"{self.spec.projector} (full, lr {cfg.backbone_learning_rate})",
                "vision_tower": "trained" if cfg.family_options.train_vision_tower else "frozen",
                "use_liger_kernel": cfg.family_options.use_liger_kernel or None}
