"""Per-architecture specs for video-language models, and the frame preprocessing they share.

A :class:`VideoLLMSpec` subclass tells the rest of dit-lora everything that differs between
video-LLM architectures: the transformers class to load, where the vision tower, projector and
language model live inside it (dotted module paths), which linear layers LoRA adapts, how the
chat template marks the video, and how raw frames become the pixel tensors and the number of
video tokens the model's forward expects.

Frame preprocessing is our own code on purpose: transformers' video processors need
torchvision, which is not installable everywhere dit-lora runs.  The helpers below follow what
the CLIP-style image processors do (resize the shortest edge, center crop, rescale by 1/255,
normalise with mean/std) using ``torch.nn.functional.interpolate(antialias=True)`` on uint8
frames, whose kernels are a port of PIL's resampling: resized frames equal what PIL's
``Image.resize`` (the slow processors' path) returns to within 1/255, so the pixel values are
what the real preprocessors feed the model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dit_lora.config.schema import ModelOptions
from dit_lora.core.collective import main_process_check
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.hub_snapshot import model_snapshot, pin
from dit_lora.modelfiles.pipeline_files import is_local

__all__ = [
    "OPENAI_CLIP_MEAN",
    "OPENAI_CLIP_STD",
    "VideoLLMSpec",
    "center_crop",
    "check_frames",
    "model_folder",
    "frames_to_tensor",
    "normalize",
    "read_preprocessor_json",
    "resize_frames",
    "resize_shortest_edge",
    "shortest_edge_size",
]

# CLIP's normalisation constants (every CLIP/LLaVA preprocessor config ships these).
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# The preprocessor JSON files a model folder may hold, most specific first: a video processor's
# values win over the image processor's when both exist (they agree in the real repos).
PREPROCESSOR_FILES = ("video_preprocessor_config.json", "preprocessor_config.json")

# PIL resample codes as stored in preprocessor configs -> interpolate modes.  Nearest (0) and
# box/hamming/lanczos have no antialiased interpolate mode; bicubic is the closest stand-in.
_RESAMPLE_MODES = {0: "nearest", 2: "bilinear", 3: "bicubic"}


# --------------------------------------------------------------------------------------
# Frame helpers (shared by every spec)
# --------------------------------------------------------------------------------------
def check_frames(frames: np.ndarray) -> np.ndarray:
    """Validate one clip: a uint8 array of shape (F, H, W, 3) with F >= 1; returns it."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames must have shape (F, H, W, 3) with F >= 1, got {tuple(frames.shape)}")
    if frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 RGB, got dtype {frames.dtype}")
    return frames


def frames_to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 (F, H, W, 3) frames -> float32 (F, 3, H, W) tensor with values in [0, 255]."""
    frames = check_frames(frames)
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()


def shortest_edge_size(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    """Output (height, width) when the shorter side is scaled to ``shortest_edge``.

    The longer side is ``int(shortest_edge * long / short)`` (truncated, not rounded), which is
    the rule of transformers' CLIP-style processors for ``size={"shortest_edge": N}``.
    """
    short, long = (height, width) if height <= width else (width, height)
    new_long = int(shortest_edge * long / short)
    return (shortest_edge, new_long) if height <= width else (new_long, shortest_edge)


def resize_frames(frames: torch.Tensor, size: tuple[int, int], mode: str = "bicubic") -> torch.Tensor:
    """Resize float (F, 3, H, W) frames in [0, 255] to ``size`` = (height, width).

    Antialiased (so downscaling averages like PIL instead of aliasing); the result is whole
    numbers in [0, 255] like PIL's uint8 output (bicubic overshoots at edges, so it is
    clamped).  A no-op when the frames already have that size.
    """
    height, width = int(size[0]), int(size[1])
    if tuple(frames.shape[-2:]) == (height, width):
        return frames
    if mode == "nearest":
        return F.interpolate(frames, size=(height, width), mode="nearest")
    if frames.device.type == "cpu":
        # torch's uint8 antialiased kernels are a port of PIL's resampling (two separable passes
        # with the intermediate rounded to uint8): they match PIL to +-1, where the float kernels
        # differ by up to ~14/255 at sharp edges.  Frames are whole numbers here, so the cast is
        # lossless.
        as_uint8 = frames.clamp(0.0, 255.0).round().to(torch.uint8)
        try:
            out = F.interpolate(as_uint8, size=(height, width), mode=mode, align_corners=False, antialias=True)
            return out.float()
        except (RuntimeError, NotImplementedError):
            pass  # a torch build without the uint8 kernel: use the float one
    out = F.interpolate(frames, size=(height, width), mode=mode, align_corners=False, antialias=True)
    return out.clamp_(0.0, 255.0).round_()


def resize_shortest_edge(frames: torch.Tensor, shortest_edge: int, mode: str = "bicubic") -> torch.Tensor:
    """Resize (F, 3, H, W) frames so the shorter side is ``shortest_edge``, keeping the aspect ratio."""
    height, width = frames.shape[-2:]
    return resize_frames(frames, shortest_edge_size(height, width, shortest_edge), mode)


def center_crop(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Crop the central (height, width) window of (F, 3, H, W) frames.

    Frames smaller than the crop are zero-padded symmetrically first (what transformers'
    ``center_crop`` does), so the output always has exactly ``size``.
    """
    crop_h, crop_w = int(size[0]), int(size[1])
    height, width = frames.shape[-2:]
    if height < crop_h or width < crop_w:
        pad_h, pad_w = max(crop_h - height, 0), max(crop_w - width, 0)
        frames = F.pad(frames, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        height, width = frames.shape[-2:]
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return frames[..., top : top + crop_h, left : left + crop_w]


def normalize(
    frames: torch.Tensor, mean: Iterable[float], std: Iterable[float], rescale_factor: float = 1 / 255
) -> torch.Tensor:
    """Rescale [0, 255] frames by ``rescale_factor`` then normalise per channel: (x * r - mean) / std."""
    mean_t = torch.tensor(list(mean), dtype=torch.float32).view(-1, 1, 1)
    std_t = torch.tensor(list(std), dtype=torch.float32).view(-1, 1, 1)
    return (frames.float() * float(rescale_factor) - mean_t) / std_t


def read_preprocessor_json(path: str | Path, names: Iterable[str] = PREPROCESSOR_FILES) -> dict[str, Any]:
    """Merge the preprocessor config JSON files found in model folder ``path``.

    Files earlier in ``names`` win key by key.  Missing files are skipped (an empty dict when
    there are none); a file that is not valid JSON raises :class:`UserError` naming it.
    """
    merged: dict[str, Any] = {}
    for name in reversed(tuple(names)):
        file = Path(path) / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text())
        except ValueError as err:
            raise UserError(f"{file} is not valid JSON ({err}); fix or delete it") from err
        if isinstance(data, dict):
            merged.update(data)
    return merged


def overlay_preprocessing(prep: dict[str, Any], raw: dict[str, Any]) -> None:
    """Set in ``prep`` the normalisation and switches the preprocessor JSON ``raw`` gives: ``image_mean`` and
    ``image_std`` (as float tuples), ``do_resize``, ``do_center_crop``, ``do_rescale``, ``do_normalize`` (as bools)
    and ``rescale_factor`` (as a float); the rest of ``prep`` stays."""
    for key in ("image_mean", "image_std"):
        if key in raw:
            prep[key] = tuple(float(v) for v in raw[key])
    for key in ("do_resize", "do_center_crop", "do_rescale", "do_normalize"):
        if key in raw:
            prep[key] = bool(raw[key])
    if "rescale_factor" in raw:
        prep["rescale_factor"] = float(raw["rescale_factor"])


def device_causal_mask(inputs: dict[str, torch.Tensor], window: int | None) -> dict[str, torch.Tensor]:
    """``inputs`` with its 2-D padding mask as a 4-D causal mask built on the device (given a 2-D one, transformers
    asks the host whether there is padding, to use SDPA's ``is_causal``: a sync every step); ``window``: the text
    model's sliding window, part of the mask (None: none). Any other mask is used as it is."""
    mask = inputs.get("attention_mask")
    if mask is None or mask.dim() != 2:
        return inputs
    n = mask.shape[1]
    pos = torch.arange(n, device=mask.device)
    allowed = pos[None, :] <= pos[:, None]
    if window:
        allowed &= pos[:, None] - pos[None, :] < window
    return {**inputs, "attention_mask": allowed[None, None] & mask[:, None, None, :].bool()}


def _size_pair(value: Any, what: str) -> tuple[int, int]:
    """A preprocessor size entry (int, [h, w] or {"height", "width"}) as (height, width)."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    if isinstance(value, dict) and "height" in value and "width" in value:
        return int(value["height"]), int(value["width"])
    raise UserError(f"cannot read {what} {value!r} from the preprocessor config; expected an int or height/width")


def model_folder(model: ModelOptions, *, weights: bool) -> Path:
    """The folder the video LLM ``model`` (the run's ``cfg.model``) loads from: a local folder, or a Hub id's
    snapshot in the Hub cache (:func:`~dit_lora.modelfiles.hub_snapshot.model_snapshot`: config, tokenizer and
    processor files; with ``weights`` the safetensors too). Train, check-data and plan all read the model here.

    Several processes (``dit-lora launch``): the main one downloads while the others wait, then they take its folder
    (a failure there is every rank's paragraph, not a rank waiting forever).
    """
    path = str(model.pretrained_model_name_or_path or "")
    if is_local(path) or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return model_snapshot(model, "video LLM", weights=weights)
    from accelerate import PartialState

    # cpu=: as the run's Accelerator asks, so the process group is the one it joins (as --demo's build does)
    state = PartialState(cpu=not torch.cuda.is_available())
    folder = main_process_check(
        state,
        lambda: model_snapshot(model, "video LLM", weights=weights),
        what=f"downloading the video LLM `{path}`",
        share_result=True,
    )
    assert folder is not None  # shared from the main process, which raised if it had none
    pin(model, folder, weights)
    return folder


# --------------------------------------------------------------------------------------
# The spec base class
# --------------------------------------------------------------------------------------
class VideoLLMSpec:
    """What dit-lora needs to know about one video-LLM architecture (one subclass per architecture).

    Subclasses set the class attributes and implement :meth:`frame_inputs`,
    :meth:`video_token_count` and :meth:`collate_pixels`; the loaders, the LoRA target regex
    and CLIP-style :meth:`load_preprocessing` are shared.
    """

    name: str = ""  # "llava_next_video"
    model_class: str = ""  # transformers class name
    vision_tower: str = ""  # dotted module paths inside the model
    projector: str = ""
    language_model: str = ""
    lora_projections: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    video_placeholder: str = ""  # what the chat template renders where the video goes
    video_token: str = ""  # the token repeated once per video feature
    #: the media tokens its template and processor write (a message text holding one is refused: the prompt
    #: builder writes them, one in the text would be trained as words or read as a second video)
    media_tokens: tuple[str, ...] = ()
    positions_encode_time: bool = False  # positions depend on the clip's sampled fps (the processor needs it)
    #: Liger's ``apply_liger_kernel_to_<name>``; None: the language model's ``model_type``
    liger_patch: str | None = None
    liger_swiglu: bool = True  # whether that patch replaces the MLP (the log says what was applied)
    pipeline_tag = "video-text-to-text"

    @property
    def decoder_layers(self) -> str:
        """The language model's decoder layers: the blocks ``--blocks_to_swap`` swaps."""
        return f"{self.language_model}.layers"

    # Defaults for load_preprocessing when the folder's JSON lacks a key (CLIP values, 224 px).
    default_preprocessing: dict[str, Any] = {
        "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD,
        "shortest_edge": 224,
        "crop_size": (224, 224),
        "do_resize": True,
        "do_center_crop": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "resample": "bicubic",
    }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # -- modules ------------------------------------------------------------------------
    def module(self, model: torch.nn.Module, dotted: str) -> torch.nn.Module:
        """Resolve a dotted module path such as ``"model.vision_tower"`` inside ``model``."""
        try:
            return model.get_submodule(dotted)
        except AttributeError as err:
            children = [name for name, _ in model.named_children()]
            raise AttributeError(
                f"{type(model).__name__} has no module {dotted!r} (top-level children: {children}); "
                f"the {self.name} spec does not match this transformers version"
            ) from err

    # -- loading ------------------------------------------------------------------------
    @staticmethod
    def _local_dir(path: str | Path, what: str) -> Path:
        """``path`` as a folder: :func:`model_folder` turned a Hub id into its cache snapshot before this."""
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise UserError(
                f"{what} {str(path)!r} is not a folder, and not a Hub id (`org/name`) either. Pass the folder that "
                f"holds the model's config.json, or its Hub id (`hf download <repo> --local-dir DIR` fetches one "
                f"into DIR)."
            )
        return folder

    def load_model(
        self, path: str | Path, dtype: torch.dtype = torch.bfloat16, quantization_config=None
    ) -> torch.nn.Module:
        """Load the model from local folder ``path`` in ``dtype`` (no Hub access), quantized by
        ``quantization_config`` (transformers' own) when one is given."""
        import transformers

        folder = self._local_dir(path, "model path")
        cls = getattr(transformers, self.model_class, None) or transformers.AutoModelForImageTextToText
        extra = {} if quantization_config is None else {"quantization_config": quantization_config}
        return cls.from_pretrained(folder, dtype=dtype, local_files_only=True, use_safetensors=True, **extra)

    def load_tokenizer(self, path: str | Path):
        """Load the tokenizer of local folder ``path``, with ``chat_template`` set.

        Real repos keep the template in ``tokenizer_config.json``, ``chat_template.jinja`` or
        the processor's ``chat_template.json``; the tokenizer loads only the first two itself,
        so the processor file is read here.  No template at all is a :class:`UserError`:
        prompts are rendered with it, and guessing a format would train the wrong one.
        """
        from transformers import AutoTokenizer

        folder = self._local_dir(path, "model path")
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        if not getattr(tokenizer, "chat_template", None):
            jinja, js = folder / "chat_template.jinja", folder / "chat_template.json"
            if jinja.is_file():
                tokenizer.chat_template = jinja.read_text()
            elif js.is_file():
                try:
                    tokenizer.chat_template = json.loads(js.read_text())["chat_template"]
                except (ValueError, KeyError, TypeError) as err:
                    raise UserError(f"{js} has no readable 'chat_template' entry ({err})") from err
        if not getattr(tokenizer, "chat_template", None):
            raise UserError(
                f"the tokenizer in {folder} has no chat template (none in tokenizer_config.json, "
                f"chat_template.jinja or chat_template.json); use an instruction-tuned checkpoint"
            )
        return tokenizer

    def load_preprocessing(self, path: str | Path) -> dict[str, Any]:
        """CLIP-style preprocessing settings from the folder's preprocessor JSON, with defaults.

        Returns ``image_mean``, ``image_std`` (3-tuples), ``shortest_edge`` (int or None),
        ``crop_size`` ((h, w) or None), ``do_resize``, ``do_center_crop``, ``do_rescale``,
        ``rescale_factor``, ``do_normalize`` and ``resample`` (an interpolate mode).
        ``size`` may be ``{"shortest_edge": N}`` or an exact ``{"height", "width"}``; the latter
        is stored as ``resize_to`` (h, w) with ``shortest_edge`` None.
        """
        raw = read_preprocessor_json(self._local_dir(path, "model path"))
        prep = dict(self.default_preprocessing)
        prep["resize_to"] = None
        overlay_preprocessing(prep, raw)
        if "size" in raw:
            size = raw["size"]
            if isinstance(size, dict) and "shortest_edge" in size:
                prep["shortest_edge"] = int(size["shortest_edge"])
            elif isinstance(size, int):
                prep["shortest_edge"] = size  # old configs: an int means the shortest edge
            else:
                prep["resize_to"], prep["shortest_edge"] = _size_pair(size, "size"), None
        if "crop_size" in raw:
            prep["crop_size"] = _size_pair(raw["crop_size"], "crop_size")
        if "resample" in raw:
            prep["resample"] = _RESAMPLE_MODES.get(raw["resample"], "bicubic")
        return prep

    def preprocess_frames(self, frames: np.ndarray, prep: dict[str, Any]) -> torch.Tensor:
        """uint8 (F, H, W, 3) frames -> float32 (F, 3, h, w) per ``prep`` (see :meth:`load_preprocessing`).

        Order as in the CLIP image processors: resize, center crop, rescale, normalise.
        """
        x = frames_to_tensor(frames)
        mode = prep.get("resample", "bicubic")
        if prep.get("do_resize", True):
            if prep.get("resize_to"):
                x = resize_frames(x, prep["resize_to"], mode)
            elif prep.get("shortest_edge"):
                x = resize_shortest_edge(x, prep["shortest_edge"], mode)
        if prep.get("do_center_crop", True) and prep.get("crop_size"):
            x = center_crop(x, prep["crop_size"])
        factor = prep.get("rescale_factor", 1 / 255) if prep.get("do_rescale", True) else 1.0
        if prep.get("do_normalize", True):
            x = normalize(x, prep["image_mean"], prep["image_std"], factor)
        else:
            x = x * factor
        return x.contiguous().float()

    # -- per-architecture ---------------------------------------------------------------
    def frame_inputs(
        self, frames: np.ndarray, prep: dict[str, Any], *, fps: float | None = None
    ) -> dict[str, torch.Tensor]:
        """One sample's pixel tensors (unbatched, float32) from uint8 frames (F, H, W, 3).

        ``fps``: the rate the frames were sampled at (:attr:`~dit_lora.families.videollm.data.SampledClip.fps`), for
        architectures whose positions encode time; None when unknown.
        """
        raise NotImplementedError

    def video_token_count(self, frame_inputs: dict[str, torch.Tensor], config: Any) -> int:
        """How many video tokens the model expects for ``frame_inputs`` (``config`` = model.config)."""
        raise NotImplementedError

    def video_prompt_ids(
        self, tokenizer, video_tokens: int, config: Any, times: Sequence[float] | None = None
    ) -> list[int] | None:
        """The token ids that replace the chat template's one video token, or None: ``video_tokens`` copies of it.

        An architecture whose processor writes more than the feature tokens there (InternVL's per-frame lines,
        Qwen3-VL's per-frame seconds) returns them; its labels are masked like the video tokens. ``times``: each
        sampled frame's second in the clip (:attr:`~dit_lora.families.videollm.data.SampledClip.times`), None when
        the container states no rate.
        """
        return None

    def step_inputs(self, inputs: dict[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
        """The model's keyword inputs for one training step, from the batch's (on the device).

        The default passes them unchanged; a spec whose language model would read the padding mask on
        the host (a sync per step) builds the attention mask on the device itself.
        """
        return inputs

    def collate_pixels(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Batch per-sample :meth:`frame_inputs` dicts into model forward kwargs."""
        raise NotImplementedError
