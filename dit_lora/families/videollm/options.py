"""The video LLMs' own options (``--family llava_next_video``, ``qwen2_5_vl``, ``internvl``, ``qwen3_vl`` or
``qwen3_vl_moe``): frames, video paths, the vision tower, Liger.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt


@dataclass(frozen=True)
class VideoChatOptions(FamilyOptions):
    """Options only the video LLMs read."""

    TITLE = "video LLM options (--family llava_next_video, qwen2_5_vl, internvl, qwen3_vl or qwen3_vl_moe)"

    num_frames: int = opt(
        8,
        "Video LLMs: frames sampled uniformly from each clip (VideoChat2 and LLaVA-NeXT-Video use 8-16).",
        section="videollm",
        resume="fixed",
        valid=POSITIVE,
    )
    video_folder: str | None = opt(
        None,
        "Video LLMs: folder that relative video paths in the annotation file are under (default: the "
        "annotation file's folder; for LLaMA-Factory's dataset_info.json, its folder, as its media_dir).",
        section="videollm",
        resume="free",
    )
    dataset_info_name: str | None = opt(
        None,
        "Video LLMs: the dataset to train of LLaMA-Factory's dataset_info.json in --train_data_dir (LLaMA-Factory's "
        "--dataset; --train_data_dir is its --dataset_dir); not needed when the file lists one dataset.",
        section="videollm",
        resume="free",
    )
    train_vision_tower: bool = opt(
        False,
        "Video LLMs: also train the vision tower (fully), at --vision_tower_learning_rate.",
        section="videollm",
        resume="fixed",
    )
    vision_tower_learning_rate: float = opt(
        2e-6,
        "Video LLMs: learning rate of the vision tower with --train_vision_tower.",
        section="videollm",
        resume="free",
        valid=POSITIVE,
    )
    use_liger_kernel: bool = opt(
        False,
        "Video LLMs: apply Liger-Kernel to the language model (RMSNorm, SwiGLU, RoPE, fused linear "
        "cross-entropy) when it is installed and a CUDA GPU is present; otherwise a note and the plain path.",
        section="videollm",
        resume="free",
    )
    validation_video: str | None = opt(
        None,
        "Video LLMs: clip the validation question (--validation_prompt) is asked about (default: the first "
        "training clip).",
        section="videollm",
        resume="free",
    )
