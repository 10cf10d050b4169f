"""The diffusers family kit's adapter and card: one writer of the adapter file, one loader of the consumer pipeline and
one model-card base, each taking the pipeline class; a family states only what differs.

:class:`KitAdapter` (``FamilySpec.adapter``) saves through the pipeline's own ``save_lora_weights`` (diffusers'
``transformer.*`` keys, the PEFT config as metadata) and loads the base model into the stock pipeline (a VAE kept in
fp32 where the family decodes in fp32, the run's revision, variant and dtype, safetensors only), fits it (a family's
``FamilySpec.fitting``), loads the adapter with diffusers' own loader, turns the progress bar off and moves it to the
device. A pipeline without a LoRA loader (``DiTPipeline``, ``PixArtAlphaPipeline``) is told by the family's adapter file
name, PEFT's ``adapter_model.safetensors`` (:func:`peft_format`): the adapter is then saved in PEFT's own format and the
card loads it with ``dit_lora.load_adapter``. A family overrides :meth:`KitAdapter.pipeline_class` (a class chosen from
the folder),
:meth:`KitAdapter.pipeline_parts` (components loaded before the pipeline) or :meth:`KitAdapter.fit_loaded` (switches
set once the adapter is in).

:class:`KitCard` (``FamilySpec.card``) writes the card's usage snippet from a :class:`Snippet`: the pipeline class,
the VAE it loads in fp32 first, the call's arguments (:meth:`KitCard.call_args`); a family states its own arguments,
rows and license. :class:`VideoCard` is a video family's, built with its task: the snippet's video written at the
checkpoint's frame rate, an image-to-video run's first frame loaded (:func:`first_frame_line`), the clip rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.catalogue import license_of
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.data.frames import describe_buckets
from dit_lora.kit.conditioning import card_input_source
from dit_lora.kit.loader import folder_pipeline
from dit_lora.output.adapter import adapter_folder, attach_adapter, save_peft_adapter
from dit_lora.output.names import PEFT_ADAPTER_FILE
from dit_lora.output.video import snippet_write_video

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, FamilyOptions, ModelOptions, TrainConfig, ValidationOptions
    from dit_lora.kit.info_cache import VideoTask
    from dit_lora.modeling.timestep_options import FlowMatchingOptions

#: the seed argument every snippet's pipeline call ends with (the same image on every run of it)
SEED_ARGUMENT = "generator=torch.manual_seed(0),"


def diffusers_class(name: str) -> Any:
    """The diffusers class ``name`` (imported on use: diffusers' pipelines import slowly)."""
    import diffusers

    return getattr(diffusers, name)


def peft_format(info: FamilyInfo) -> bool:
    """Whether the family's adapter is PEFT's own files (its pipeline has no LoRA loader), told by its file name."""
    return info.adapter_weight_name == PEFT_ADAPTER_FILE


class KitAdapter:
    """``FamilySpec.adapter``: the pipeline's ``save_lora_weights`` and ``load_lora_weights``.

    ``fp32_vae``: the diffusers VAE class the reloaded pipeline takes in fp32 (None: the VAE in the run's dtype, as
    the pipeline loads it); ``fitting``: the family's ``FamilySpec.fitting``, run on the pipeline before the adapter
    loads; ``lora_prefix``: the save call's model argument (``transformer`` -> ``transformer_lora_layers``).
    """

    def __init__(
        self,
        info: FamilyInfo,
        *,
        fp32_vae: str | None = None,
        fitting: Any = None,
        lora_prefix: str = "transformer",
    ) -> None:
        self.info, self.fp32_vae, self.fitting, self.lora_prefix = info, fp32_vae, fitting, lora_prefix

    def pipeline_class(self, model: ModelOptions | None = None) -> Any:
        """The diffusers pipeline class that saves and reloads: ``info.pipeline_class_name`` when saving (``model``
        None), the run's folder's own among ``info.pipeline_classes`` when reloading (``model``: the run's
        ``cfg.model``; :func:`folder_pipeline`)."""
        pipelines = self.info.pipeline_classes
        return diffusers_class(pipelines[0] if model is None else folder_pipeline(model, pipelines))

    def write_lora_file(self, output_dir: Path, lora_state: dict, lora_config: dict, weight_name: str) -> Path:
        """One LoRA file through the pipeline's own saver: the model's LoRA layers and their PEFT config. A pipeline
        without one (HunyuanVideo 1.5's, in diffusers 0.42.1) gets diffusers' own writer behind every saver: the same
        ``transformer.``-prefixed keys and metadata, which the model's ``load_lora_adapter`` reads."""
        pipeline = self.pipeline_class()
        if not hasattr(pipeline, "save_lora_weights"):
            from diffusers.loaders.lora_base import LoraBaseMixin

            LoraBaseMixin._save_lora_weights(
                save_directory=output_dir,
                lora_layers={self.lora_prefix: lora_state},
                lora_metadata={self.lora_prefix: lora_config},
                weight_name=weight_name,
                safe_serialization=True,
            )
            return Path(output_dir) / weight_name
        pipeline.save_lora_weights(
            output_dir,
            **{f"{self.lora_prefix}_lora_layers": lora_state},
            **{f"{self.lora_prefix}_lora_adapter_metadata": lora_config},
            weight_name=weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / weight_name

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The LoRA file under the family's weight name (``info.adapter_weight_name``): PEFT's files
        (``PeftModel.save_pretrained``'s) where that is PEFT's name (:func:`peft_format`), whose pipeline has no saver."""
        if peft_format(self.info):
            return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)
        return self.write_lora_file(output_dir, lora_state, lora_config, self.info.adapter_weight_name)

    def pipeline_parts(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """Components handed to ``from_pretrained`` (``common``: revision and safetensors): the VAE in fp32 where the
        family keeps it there, loaded so directly (a low-precision load followed by ``.to(fp32)`` would already
        have lost precision)."""
        if self.fp32_vae is None:
            return {}
        vae = diffusers_class(self.fp32_vae).from_pretrained(
            cfg.model.pretrained_model_name_or_path,
            subfolder="vae",
            **dtype_kwarg("diffusers", torch.float32),
            **common,
        )
        return {"vae": vae}

    def fit_loaded(self, pipe, options: FamilyOptions) -> None:
        """Switches set on the pipeline once the adapter is in, from the run's family options
        (``cfg.family_options``; none here)."""

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        """The base model's stock pipeline in the run's dtype (with :meth:`pipeline_parts`), fitted, with the saved
        adapter loaded by diffusers, its progress bar off, on ``device``."""
        common = {"revision": cfg.model.revision, "use_safetensors": True}
        parts = self.pipeline_parts(cfg, common)
        pipe = self.pipeline_class(cfg.model).from_pretrained(
            cfg.model.pretrained_model_name_or_path,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            **parts,
            **common,
        )
        if self.fitting is not None:
            self.fitting.prepare_pipeline_for_adapter(pipe, adapter_folder(adapter_dir))
        attach_adapter(None, pipe, adapter_dir)  # fitted just above, where the family fits
        self.fit_loaded(pipe, cfg.family_options)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


def quoted(text: str) -> str:
    """``text`` in double quotes as it stands (the older snippets' quoting; :func:`json.dumps` escapes)."""
    return f'"{text}"'


@dataclass
class Snippet:
    """A card's usage snippet as facts: which pipeline loads which base model (a VAE first in fp32), how the adapter
    loads, the call's arguments and what is written; :meth:`text` lays them out the same way for every family."""

    #: the diffusers pipeline class
    pipeline: str
    #: the base model (a Hub name or a folder)
    base: str
    #: the adapter's repository or folder
    repo: str
    #: the call's arguments, one line each without the indent (commas and comments included)
    call_args: list[str]
    #: the variable holding the base model's name (None: the name in the ``from_pretrained`` call itself)
    base_name: str | None = "base"
    #: how names are quoted in the code (:func:`json.dumps`, or :func:`quoted`)
    quote: Callable[[str], str] = json.dumps
    #: the VAE class loaded first, in fp32 (None: the pipeline's own)
    vae: str | None = None
    #: the comment after the VAE line
    vae_comment: str = ""
    #: import lines after the diffusers one
    imports: list[str] = field(default_factory=list)
    #: lines after the base model's name, before the VAE and the pipeline
    before_pipe: str = ""
    #: ``from_pretrained`` arguments after the VAE, before the dtype (each ending ", ")
    pipe_kwargs: str = ""
    #: the pipeline's dtype in the code
    dtype: str = "torch.bfloat16"
    #: the lines loading the adapter (None: ``pipe.load_lora_weights(repo)``)
    load: str | None = None
    #: lines after the adapter loads, before the pipeline moves
    before_to: str = ""
    #: the comment after ``pipe.to(...)``
    to_comment: str = ""
    #: lines before the call
    before_call: str = ""
    #: ``image`` (``.images[0]``), ``video`` (``.frames[0]``) or ``result`` (the pipeline's whole output: LTX-2's
    #: frames and sound)
    output: str = "image"
    #: the lines after the call (None: the image saved as ``sample.png``)
    tail: str | None = None

    def text(self) -> str:
        """The snippet's code."""
        quote = self.quote
        base = self.base_name or quote(self.base)
        vae_import = f"{self.vae}, " if self.vae else ""
        lines = ["import torch\n", f"from diffusers import {vae_import}{self.pipeline}\n", *self.imports, "\n"]
        if self.base_name:
            lines.append(f"{self.base_name} = {quote(self.base)}\n")
        lines.append(self.before_pipe)
        if self.vae:
            lines.append(
                f'vae = {self.vae}.from_pretrained({base}, subfolder="vae", torch_dtype=torch.float32){self.vae_comment}\n'
            )
        vae_arg = "vae=vae, " if self.vae else ""
        lines.append(
            f"pipe = {self.pipeline}.from_pretrained({base}, {vae_arg}{self.pipe_kwargs}torch_dtype={self.dtype})\n"
        )
        lines.append(self.load if self.load is not None else f"pipe.load_lora_weights({quote(self.repo)})\n")
        lines.append(self.before_to)
        lines.append(f'pipe.to("cuda" if torch.cuda.is_available() else "cpu"){self.to_comment}\n')
        lines.append(self.before_call)
        lines.append(f"{self.output} = pipe(\n")
        lines.extend(f"    {arg}\n" for arg in self.call_args)
        lines.append({"image": ").images[0]\n", "video": ").frames[0]\n"}.get(self.output, ")\n"))
        lines.append(self.tail if self.tail is not None else 'image.save("sample.png")\n')
        return "".join(lines)


def image_call_args(data: DataOptions, validation: ValidationOptions) -> list[str]:
    """An image call's arguments after the prompt: the run's square size, steps and guidance (``data``,
    ``validation``: its ``cfg.data`` and ``cfg.validation``), and the seed."""
    return [
        f"height={data.resolution}, width={data.resolution},",
        f"num_inference_steps={validation.validation_inference_steps}, guidance_scale={validation.validation_guidance_scale},",
        SEED_ARGUMENT,
    ]


def image_lines(extra_import: str, image_arg: str) -> tuple[list[str], list[str]]:
    """(import lines, call arguments) of a video card's conditioning image, from its ``snippet_image`` parts
    (``", load_image"`` and ``"\\n    image=image,"``; empty for text-to-video)."""
    imports = [f"from diffusers.utils import {extra_import.removeprefix(', ')}\n"] if extra_import else []
    return imports, [image_arg.strip()] if image_arg else []


def first_frame_line() -> str:
    """The snippet line an image-to-video card loads its first frame with: the run's own (``--validation_image``, else
    its first clip's first frame), written beside the adapter (:func:`~.conditioning.card_input_source`)."""
    return f"image = load_image({card_input_source()})  # the first frame to animate\n"


def first_frame_image() -> tuple[str, str, str]:
    """An image-to-video card's ``snippet_image`` parts (:func:`image_lines`): ``load_image`` imported, the first
    frame loaded (:func:`first_frame_line`), passed as ``image=``."""
    return ", load_image", first_frame_line(), "\n    image=image,"


class KitCard:
    """``FamilySpec.card``: the usage snippet from :meth:`snippet`, no rows and no license by default. A family
    states what its snippet adds (:attr:`snippet_fields`, :meth:`snippet_parts`, :meth:`prompt_args`,
    :meth:`extra_call_args`) and its rows (:meth:`card_settings`, with :meth:`flow_rows`)."""

    #: the snippet's prompt without ``--validation_prompt``
    placeholder_prompt = "a photo"
    #: how the snippet quotes names (:func:`json.dumps`, or :func:`quoted`)
    quote: Callable[[str], str] = staticmethod(json.dumps)
    #: the comment after a PEFT-format adapter's ``load_adapter`` line (what else it restores)
    load_comment = ""
    #: whether the call names its prompt (``prompt="..."``) or passes it first (the pipelines whose docs do)
    prompt_keyword = True
    #: :class:`Snippet` fields of every run of the family (``vae``, ``vae_comment``, ``to_comment``, ``base_name``)
    snippet_fields: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def prompt(self, validation: ValidationOptions) -> str:
        """The snippet's prompt, quoted: the first ``--validation_prompt``, else :attr:`placeholder_prompt`
        (``validation``: the run's ``cfg.validation``)."""
        return json.dumps((validation.prompts or [self.placeholder_prompt])[0])

    def prompt_args(self, data: DataOptions, validation: ValidationOptions) -> list[str]:
        """The call's first arguments: the prompt (a family adds what goes with it: an image to edit, at the size
        ``data`` gives; ``data``, ``validation``: the run's ``cfg.data`` and ``cfg.validation``)."""
        return [f"prompt={self.prompt(validation)}," if self.prompt_keyword else f"{self.prompt(validation)},"]

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The family's arguments after the size, steps and guidance, before the seed (none here)."""
        return []

    def call_args(self, cfg: TrainConfig) -> list[str]:
        """The call's arguments: :meth:`prompt_args`, :func:`image_call_args`'s size, steps and guidance,
        :meth:`extra_call_args`, the seed."""
        *size_and_steps, seed = image_call_args(cfg.data, cfg.validation)
        return [*self.prompt_args(cfg.data, cfg.validation), *size_and_steps, *self.extra_call_args(cfg), seed]

    def snippet_parts(self, cfg: TrainConfig) -> dict[str, Any]:
        """:class:`Snippet` fields this run adds or replaces (imports, lines before the call, the pipeline class)."""
        return {}

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The family's pipeline with the adapter loaded (by ``dit_lora.load_adapter`` where the pipeline has no
        loader: :func:`peft_format`), one image at the run's validation settings."""
        pipeline = self.info.pipeline_class_name
        loads: dict[str, Any] = {}
        if peft_format(self.info):
            loads = {
                "imports": [f"from dit_lora import load_adapter  # {pipeline} has no load_lora_weights\n"],
                "load": f"load_adapter(pipe, {self.quote(repo_or_dir)}){self.load_comment}\n",
            }
        parts = self.snippet_parts(cfg)
        fields = {"pipeline": pipeline, "quote": self.quote, **loads, **self.snippet_fields, **parts}
        # a family's imports come beside the kit's load_adapter import, never in its place
        fields["imports"] = [*loads.get("imports", []), *parts.get("imports", [])]
        return Snippet(base=cfg.model.path, repo=repo_or_dir, call_args=self.call_args(cfg), **fields)

    def flow_rows(
        self, options: FlowMatchingOptions, shift: str | None = None, unset: str = "the scheduler's"
    ) -> dict[str, Any]:
        """The rows of a flow-matching family's timesteps (``options``: the run's ``cfg.family_options``): its density
        and, where it has one, its ``shift`` option (``unset``: what a shift left unset means)."""
        rows = {"weighting_scheme": options.weighting_scheme}
        if shift is not None:
            value = getattr(options, shift)
            rows[shift] = value if value is not None else unset
        return rows

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        """:meth:`snippet`'s code."""
        return self.snippet(cfg, repo_or_dir).text()

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The family's rows (none here)."""
        return {}

    def base_model_license(self, model: ModelOptions) -> str | None:
        """The base model's license as the family's catalogue states it for its Hub id (``licenses`` in its
        ``catalogue.json``: :func:`~dit_lora.catalogue.license_of`); None for a local folder or an unnamed model."""
        return license_of(model.family, model.path)


class VideoCard:
    """``FamilySpec.card`` of a video family, a mixin before :class:`KitCard` (``class WanCard(VideoCard, KitCard)``),
    built with its task (a :class:`~dit_lora.kit.info_cache.VideoTask`, which names the pipeline: no ``info``): a
    video as the placeholder prompt, the snippet's common fields (:meth:`video_snippet`) and the rows every video
    card starts and ends with (:meth:`video_rows`)."""

    placeholder_prompt = "a video"

    def __init__(self, task: VideoTask) -> None:
        self.task = task

    def video_snippet(self, cfg: TrainConfig, repo_or_dir: str, **fields: Any) -> Snippet:
        """The task's pipeline from the base model (named ``model_id``) with the adapter, its one video written at
        the checkpoint's frame rate; ``fields``: the family's own :class:`Snippet` fields (they win)."""
        common = {
            "pipeline": self.task.pipeline_class_name,
            "base": cfg.model.pretrained_model_name_or_path or "",  # set: the parser requires it
            "repo": repo_or_dir,
            "base_name": "model_id",
            "output": "video",
            "tail": snippet_write_video(self.task.model_fps(cfg.model)),
        }
        return Snippet(**{**common, **fields})

    def video_rows(self, cfg: TrainConfig, **rows: Any) -> dict[str, Any]:
        """The card's rows: the clip buckets, the model, the family's ``rows``, the frame sampling."""
        buckets = describe_buckets(self.task.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        return {
            "resolution": f"{buckets} (frames x height x width)",
            "model": self.task.info(cfg.model).describe(),
            **rows,
            "frame_sampling": cfg.video.frame_sampling,
        }
