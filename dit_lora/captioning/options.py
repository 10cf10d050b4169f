"""The options of ``dit-lora caption``, one field each (the command's flags are built from them, help texts
included), and the default prompts. Imports no torch: ``dit-lora --help`` builds the flags from it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.core.errors import UserError

if TYPE_CHECKING:
    import torch

    from dit_lora.captioning.media import MediaFile

__all__ = ["DEFAULT_PROMPTS", "CaptionOptions"]

#: the prompt each kind of file gets when --prompt/--prompt_file is not given: what a text-to-image or
#: text-to-video model is trained to follow (subject, action, setting, light, style, and for a clip its camera)
DEFAULT_PROMPTS = {
    "image": (
        "Describe this image in one detailed paragraph for training a text-to-image model: the main subject and "
        "its appearance, what it is doing, the setting and background, the lighting, the colours and the style "
        "(photo, painting, render). Write only the description."
    ),
    "video": (
        "Describe this video in one detailed paragraph for training a text-to-video model: the subjects and their "
        "appearance, what happens from start to end, how the camera moves, the setting, the lighting and the style. "
        "Write only the description."
    ),
}


def _help(text: str, default: Any = None, **extra: Any) -> Any:
    """A flag's field: its default and, for the command's parser, its help text and choices."""
    return field(default=default, metadata={"help": text, **extra})


@dataclass(frozen=True)
class CaptionOptions:
    """What ``dit-lora caption`` is asked to do."""

    path: Path = _help("the folder of images and clips to caption (its subfolders too), or one file")
    model: str | None = _help(
        "the captioner: a video LLM's folder or Hub id (Qwen2.5-VL, Qwen3-VL, InternVL3.5, LLaVA-NeXT-Video); with "
        "--adapter, defaults to the base the adapter was trained from"
    )
    family: str | None = _help("the captioner's family, when its folder does not say it (e.g. qwen2_5_vl)")
    adapter: str | None = _help(
        "a video-LLM LoRA trained by dit-lora (its output folder or Hub repo): captions in the style it learned"
    )
    prompt: str | None = _help("the instruction given with every file (default: one for images, one for clips)")
    prompt_file: str | None = _help("a text file holding the instruction (instead of --prompt)")
    max_new_tokens: int = _help(
        "the longest caption, in tokens; a caption cut there is flagged at the end", default=200
    )
    batch_size: int = _help("files captioned at once (images and clips are batched apart)", default=1)
    num_frames: int = _help("frames sampled from each clip, at the centres of equal segments (as training)", default=8)
    max_pixels: int = _help(
        "an image or frame larger than this many pixels is scaled down to it (aspect kept) before the model sees "
        "it, which bounds the tokens and memory a file takes (a 720p frame's area; 0: full size, as training feeds "
        "the video LLMs)",
        default=1280 * 720,
    )
    quantize_base: str | None = _help(
        "load the captioner's language model quantized: nf4 (a 7B-8B model fits a 16 GB card), int8, fp8, fp8_scaled",
        choices=("nf4", "int8", "fp8", "fp8_scaled"),
    )
    mixed_precision: str = _help(
        "the weights' dtype: bf16 (default), or no for fp32", default="bf16", choices=("bf16", "no")
    )
    caption_extension: str = _help("the caption file beside each file", default=".txt")
    metadata: bool = _help(
        "write one metadata.jsonl (file_name, text) in the folder instead of a file each", default=False
    )
    overwrite: bool = _help("replace existing captions (default: keep them, and say how many were kept)", default=False)
    dry_run: int = _help("caption the first N files and print the captions, writing nothing", default=0)
    prefix: str = _help("text put before every caption, as given (a trigger word: --prefix 'sks, ')", default="")
    suffix: str = _help("text put after every caption, as given", default="")
    training_file: str | None = _help(
        "instead of captioning: write the folder's captions as a chat JSONL of this name in the folder (each file "
        "asked this run's prompt, its caption the answer), to train a captioner LoRA on your own captions with "
        "recipes/videollm_lora.py; loads no model"
    )
    device: str | None = _help("where the captioner runs: cuda (default when there is one) or cpu")
    #: the prompt each kind of file gets, resolved from --prompt/--prompt_file (set by :meth:`resolved`)
    prompts: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PROMPTS), metadata={"flag": False})

    @classmethod
    def flags(cls) -> list[Any]:
        """The fields that are flags (all but the resolved prompts)."""
        return [f for f in fields(cls) if f.metadata.get("flag", True)]

    def resolved(self) -> CaptionOptions:
        """These options checked, the prompts read: each bad value is one paragraph naming its flag."""
        from dataclasses import replace

        if self.prompt and self.prompt_file:
            raise UserError("dit-lora caption: give --prompt or --prompt_file, not both.")
        for name, value in (
            ("max_new_tokens", self.max_new_tokens),
            ("batch_size", self.batch_size),
            ("num_frames", self.num_frames),
        ):
            if value < 1:
                raise UserError(f"dit-lora caption: --{name} {value} must be 1 or more.")
        if self.max_pixels < 0:
            raise UserError(f"dit-lora caption: --max_pixels {self.max_pixels} must be 0 (full size) or more.")
        if self.dry_run < 0:
            raise UserError(f"dit-lora caption: --dry_run {self.dry_run} must be a number of files, 1 or more.")
        self._check_extension()
        if not self.model and not self.adapter and not self.training_file:
            raise UserError(
                "dit-lora caption needs a captioner: --model with a video LLM's folder or Hub id (e.g. "
                "Qwen/Qwen2.5-VL-7B-Instruct), or --adapter with a video-LLM LoRA trained by dit-lora."
            )
        self._check_paths()
        text = self.prompt or (self._read_prompt_file() if self.prompt_file else None)
        prompts = {kind: text for kind in DEFAULT_PROMPTS} if text else dict(DEFAULT_PROMPTS)
        return replace(self, prompts=prompts)

    def _check_extension(self) -> None:
        """--caption_extension: a dot and a plain name, not a media or metadata extension (a caption written as
        ``a.png`` would replace the image)."""
        from dit_lora.captioning.media import MEDIA_EXTENSIONS  # here: media's module imports the frame decoders

        ext = self.caption_extension
        if not re.fullmatch(r"\.[A-Za-z0-9_-]+", ext) or ext.lower() in MEDIA_EXTENSIONS | {".json", ".jsonl", ".csv"}:
            raise UserError(
                f"dit-lora caption: --caption_extension `{ext}` must be a dot and a name that is not a media or "
                "metadata file's (.txt, the default, or .caption): a caption is written as the file's name with it."
            )

    def _check_paths(self) -> None:
        """--model and --adapter: a local path that does not exist is one paragraph (a Hub id is fetched later)."""
        for flag, given in (("--model", self.model), ("--adapter", self.adapter)):
            if given and not _is_hub_id(given) and not Path(given).expanduser().exists():
                raise UserError(
                    f"dit-lora caption: {flag} {given} does not exist (a folder, absolute or relative to "
                    f"{Path.cwd()}; a Hub id is written owner/name). Point it at the folder."
                )

    def _read_prompt_file(self) -> str:
        path = Path(str(self.prompt_file)).expanduser()
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(
                f"dit-lora caption: --prompt_file {path} cannot be read ({err}). Point it at a UTF-8 text file."
            )
        if not text:
            raise UserError(f"dit-lora caption: --prompt_file {path} is empty. Write the instruction in it.")
        return text

    def prompt_for(self, item: MediaFile) -> str:
        """The instruction ``item`` is captioned with."""
        return self.prompts[item.kind]

    def journal_options(self) -> dict[str, Any]:
        """What shapes a caption's words: a run resumed with other values would mix two kinds of caption. How much
        of a file the model sees and how it is stored (--max_pixels, --num_frames, --quantize_base,
        --mixed_precision) may change between a run and its rerun: that is how a file that did not fit gets through."""
        return {
            "model": self.model,
            "adapter": self.adapter,
            "prompt": self.prompts,
            "max_new_tokens": self.max_new_tokens,
            "prefix": self.prefix,
            "suffix": self.suffix,
            "caption_extension": None if self.metadata else self.caption_extension,
            "metadata": self.metadata,
        }

    def torch_device(self) -> torch.device:
        """``--device``, else the GPU when there is one, else the CPU."""
        import torch  # here: the options (and `dit-lora --help`) load without torch

        if self.device:
            if self.device.startswith("cuda") and not torch.cuda.is_available():
                raise UserError(
                    f"dit-lora caption: --device {self.device}, but this machine has no CUDA GPU torch sees."
                )
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def model_path(self) -> str:
        """``--model``, else the base recorded in ``--adapter``'s folder."""
        if self.model:
            return self.model
        from dit_lora.output.adapter import adapter_folder  # a Hub repo's files, fetched once (torch: on use only)

        base = _adapter_base(adapter_folder(str(self.adapter)))
        if base is None:
            raise UserError(
                f"dit-lora caption: --adapter {self.adapter} does not say which model it was trained from (no "
                "base_model_name_or_path in its adapter_config.json). Pass the base with --model."
            )
        if not _is_hub_id(base) and not Path(base).expanduser().exists():
            raise UserError(
                f"dit-lora caption: --adapter {self.adapter} was trained from `{base}` (its adapter_config.json), which "
                f"is not here (a relative path is read from {Path.cwd()}, and the run may have started elsewhere). "
                "Pass the base model's folder with --model."
            )
        return base


def _is_hub_id(text: str) -> bool:
    """``owner/name`` as the Hub writes ids (what ``from_pretrained`` would fetch), not a path on this machine."""
    return text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).exists()


def _adapter_base(folder: Path) -> str | None:
    try:
        data = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    return base if isinstance(base, str) and base else None
