"""Tiny random diffusers pipelines built from a short description: what every diffusion family's ``demo.py`` shares.

A family states its tiny model as a :class:`TinyPipeline`: the pipeline class ``model_index.json`` names, the
marker that makes the build idempotent, the tokenizer, the scheduler, and each module as a :class:`Part` (how it is
built, the seed offset it is built under, the dtype it is stored in). :func:`build_components` builds the parts in
memory, each under ``torch.manual_seed(seed * 1000 + part.seed)`` inside a forked RNG (so changing one part's config
changes no other part's weights, and the caller's RNG state is left alone), and :func:`build_pipeline` writes what
the pipeline's ``save_pretrained`` writes, plus the family's extra files and the marker, atomically and idempotently
(:func:`~dit_lora.data.synthetic.build_directory_atomically`).

The measurements a random VAE needs so that training sees latents of about unit scale (the scaling factor, the
per-channel statistics) are the helpers below, on the demo's own pictures and clips. Classes are named as
``"module:Class"`` strings and imported on use: importing a family's ``demo.py`` imports neither diffusers nor
transformers.
"""

from __future__ import annotations

import importlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.data.synthetic import build_directory_atomically
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA, build_tiny_gemma_tokenizer

if TYPE_CHECKING:
    from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "MARKER",
    "Part",
    "TinyPipeline",
    "build_components",
    "build_pipeline",
    "builders",
    "byte_level_bpe",
    "channel_statistics",
    "clip_statistics",
    "clip_tokenizer",
    "described",
    "instruction_tokenizer",
    "measured_scaling",
    "module",
    "moving_square_clips",
    "padded_vocab",
    "qwen2_tokenizer",
    "qwen3_vl",
    "resolve",
    "rewrite_json",
    "scaling_factor",
    "shapes_pixels",
    "text_model",
    "vision_language_model",
]

#: the marker file of a tiny folder: an identical one means the folder is complete and is not rebuilt
MARKER = "dit_lora_tiny.json"


def resolve(name: str) -> Any:
    """The object ``"package.module:Attribute"`` names (imported now)."""
    module_name, _, attr = name.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class Part:
    """One module of a tiny pipeline: its keyword in the pipeline (``transformer``, ``vae``, ``text_encoder`` ...),
    the seed offset it is built under, ``make(tokenizer)`` that builds it (and measures what it needs to), and the
    dtype it is stored in (None: as built)."""

    name: str
    seed: int
    make: Callable[[Any], Any]
    dtype: torch.dtype | None = None
    #: the tokenizer ``make`` is given: ``"tokenizer"``, or another of :attr:`TinyPipeline.tokenizers`
    tokenizer: str = "tokenizer"


@dataclass(frozen=True)
class TinyPipeline:
    """A family's tiny pipeline, stated as data.

    ``pipeline``: the class whose ``save_pretrained`` writes the folder (``"diffusers:SanaPipeline"``); ``marker``:
    what the folder's marker records (kind, variant, seed, version: a different one rebuilds); ``seed``: the build's
    seed; ``tokenizer``: builds the tokenizer (None: the pipeline has none); ``parts``: the modules; ``scheduler``:
    the scheduler class and its config; ``pipeline_kwargs``: further arguments of the pipeline (Wan's
    ``boundary_ratio``); ``processors(components)``: components built after the parts, without a seed (processors);
    ``apart``: components saved by ``after_save`` rather than by the pipeline; ``after_save(folder, components)``:
    the family's files beside the saved pipeline (another class name, a processor folder); ``tokenizers``: further
    tokenizers by their pipeline keyword (FLUX.1's ``tokenizer_2``), each built once, given to the parts that name it.
    """

    pipeline: str
    marker: Mapping[str, Any]
    seed: int
    parts: tuple[Part, ...]
    scheduler: tuple[str, Mapping[str, Any]]
    tokenizer: Callable[[], Any] | None = None
    pipeline_kwargs: Mapping[str, Any] = field(default_factory=dict)
    processors: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    apart: tuple[str, ...] = ()
    after_save: Callable[[Path, dict[str, Any]], None] | None = None
    tokenizers: Mapping[str, Callable[[], Any]] = field(default_factory=dict)


def module(
    name: str,
    seed: int,
    cls: str,
    config: Mapping[str, Any],
    *,
    config_class: str | None = None,
    dtype: torch.dtype | None = None,
    then: Callable[[Any], None] | None = None,
) -> Part:
    """A part built as ``cls(**config)`` (``cls(config_class(**config))`` for a transformers model) in eval mode,
    then ``then(module)`` (a measurement: the VAE's statistics)."""

    def make(_tokenizer: Any) -> Any:
        built = resolve(cls)(resolve(config_class)(**config)) if config_class else resolve(cls)(**config)
        built.eval()
        if then is not None:
            then(built)
        return built

    return Part(name, seed, make, dtype)


def padded_vocab(tokenizer: Any) -> int:
    """An embedding row for every token id, rounded up to a multiple of 64 as real vocabularies are."""
    return -(-len(tokenizer) // 64) * 64


def text_model(
    seed: int,
    model: str,
    config: str,
    values: Mapping[str, Any],
    ids: Mapping[str, str],
    *,
    dtype: torch.dtype | None = None,
    name: str = "text_encoder",
    tokenizer: str = "tokenizer",
) -> Part:
    """A transformers text model ``model(config(**values, vocab_size=..., **token ids))``: its vocabulary covers the
    tokenizer (:func:`padded_vocab`; ``tokenizer``: which of the pipeline's) and ``ids`` maps each config keyword to
    the tokenizer attribute it takes (``{"pad_token_id": "pad_token_id"}``)."""

    def make(tokenizer: Any) -> Any:
        token_ids = {key: getattr(tokenizer, attr) for key, attr in ids.items()}
        built = resolve(model)(resolve(config)(**values, vocab_size=padded_vocab(tokenizer), **token_ids))
        return built.eval()

    return Part(name, seed, make, dtype, tokenizer)


def vision_language_model(
    seed: int,
    model: str,
    config: str,
    *,
    text_config: Mapping[str, Any],
    vision_config: Mapping[str, Any],
    tokens: Mapping[str, str],
    text_tokens: Mapping[str, str],
    dtype: torch.dtype | None = None,
    **values: Any,
) -> Part:
    """A transformers vision-language model as a pipeline's text encoder, ``model(config(text_config=...,
    vision_config=..., **token ids, **values))``: its ``text_config`` with a vocabulary covering the tokenizer
    (:func:`padded_vocab`); ``tokens`` (the top level's) and ``text_tokens`` (the text config's) map each config
    keyword to the token whose id it takes (``{"image_token_index": "[IMG]"}``)."""

    def make(tokenizer: Any) -> Any:
        ids = tokenizer.convert_tokens_to_ids
        text = {**text_config, "vocab_size": padded_vocab(tokenizer), **{k: ids(t) for k, t in text_tokens.items()}}
        top = {key: ids(token) for key, token in tokens.items()}
        built = resolve(model)(resolve(config)(text_config=text, vision_config=vision_config, **top, **values))
        return built.eval()

    return Part("text_encoder", seed, make, dtype)


def qwen3_vl(seed: int, text_config: Mapping[str, Any], vision_config: Mapping[str, Any]) -> Part:
    """A ``Qwen3VLModel`` as a pipeline's text encoder (Krea 2's, Ideogram 4's): :func:`vision_language_model` with
    Qwen's vision and chat tokens (the tokenizer's ``<|image_pad|>``, ``<|video_pad|>``, ``<|vision_start|>``,
    ``<|vision_end|>``; ``<|endoftext|>`` and ``<|im_end|>`` for its text config's bos and eos)."""
    return vision_language_model(
        seed,
        "transformers:Qwen3VLModel",
        "transformers:Qwen3VLConfig",
        text_config=text_config,
        vision_config=vision_config,
        tokens={
            "image_token_id": "<|image_pad|>",
            "video_token_id": "<|video_pad|>",
            "vision_start_token_id": "<|vision_start|>",
            "vision_end_token_id": "<|vision_end|>",
        },
        text_tokens={"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>"},
    )


def build_components(description: TinyPipeline) -> dict[str, Any]:
    """The pipeline's components in memory: the tokenizer, every part (each from its own seed, in eval mode, in its
    dtype; the caller's torch RNG state restored), the scheduler and the processors."""
    builders = {"tokenizer": description.tokenizer, **description.tokenizers}
    tokenizers = {name: build() for name, build in builders.items() if build is not None}
    components: dict[str, Any] = dict(tokenizers)
    with torch.random.fork_rng(devices=[]):
        for part in description.parts:
            torch.manual_seed(description.seed * 1000 + part.seed)
            components[part.name] = part.make(tokenizers.get(part.tokenizer))
    for part in description.parts:
        if part.dtype is not None:
            # nn.Module.to rather than ModelMixin.to: the latter warns about casting with .to()
            torch.nn.Module.to(components[part.name], part.dtype)
    scheduler_class, scheduler_config = description.scheduler
    components["scheduler"] = resolve(scheduler_class)(**scheduler_config)
    if description.processors is not None:
        components.update(description.processors(components))
    return components


def build_pipeline(path: str | Path, description: TinyPipeline) -> Path:
    """Write the tiny pipeline to ``path`` and return ``path``: what ``save_pretrained`` writes (safetensors), the
    family's extra files, then the marker. Idempotent (an identical marker: nothing is rewritten) and atomic (built
    in a sibling temporary folder and renamed into place); a folder we did not build is refused
    (``FileExistsError``)."""

    def build(tmp: Path) -> None:
        components = build_components(description)
        saved = {name: part for name, part in components.items() if name not in description.apart}
        pipe = resolve(description.pipeline)(**saved, **description.pipeline_kwargs)
        pipe.save_pretrained(tmp, safe_serialization=True)
        if description.after_save is not None:
            description.after_save(tmp, components)

    return build_directory_atomically(path, MARKER, dict(description.marker), build)


def instruction_tokenizer(pipeline: str, words: list[str]) -> Any:
    """A tiny Gemma tokenizer (:func:`~dit_lora.data.synthetic.tokenizers.build_tiny_gemma_tokenizer`) whose merges
    are trained on the default complex human instruction of ``pipeline`` (a diffusers class name, read from the
    installed pipeline so the vocabulary follows diffusers' default), the shared extra words and the family's demo
    ``words`` (its captions' words, repeated so BPE merges them into single tokens even where the instruction text
    is rare in them)."""
    from dit_lora.kit.prompts import default_instruction  # imports diffusers: only when built

    corpus = " ".join(default_instruction(pipeline)).split() + TOKENIZER_CORPUS_EXTRA.split()
    return build_tiny_gemma_tokenizer(corpus + words)


def byte_level_bpe(
    texts: list[str] | tuple[str, ...], vocab_size: int, specials: tuple[str, ...] = ()
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE vocabulary (``specials`` first) and its merges, trained on ``texts`` with ``tokenizers``:
    the Qwen- and Mistral-style demo tokenizers are built from them offline, deterministically."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    trainer_tok.train_from_iterator(texts, trainer=trainer)
    merges = json.loads(trainer_tok.to_str())["model"]["merges"]
    pairs: list[tuple[str, str]] = []
    for merge in merges:  # "a b" in older tokenizers' JSON, ["a", "b"] in newer ones
        first, second = merge.split(" ") if isinstance(merge, str) else merge
        pairs.append((first, second))
    return trainer_tok.get_vocab(with_added_tokens=True), pairs


def qwen2_tokenizer(
    texts: list[str] | tuple[str, ...],
    vocab_size: int,
    specials: tuple[str, ...],
    *,
    learned_specials: bool = False,
    chat_template: str | None = None,
):
    """A ``Qwen2Tokenizer`` (Qwen's byte-level BPE) from :func:`byte_level_bpe` on ``texts`` (``learned_specials``:
    ``specials`` lead its vocabulary), padding on the right, ``specials`` after the first (``<|endoftext|>``, the
    class's own) added as special tokens, and ``chat_template`` when given: the Qwen demo tokenizers, offline."""
    from transformers import Qwen2Tokenizer

    vocab, merges = byte_level_bpe(texts, vocab_size, specials if learned_specials else ())
    # merges as pairs, which Qwen2Tokenizer reads though its annotation names strings
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, padding_side="right")  # type: ignore[arg-type]
    tokenizer.add_special_tokens({"additional_special_tokens": list(specials[1:])})
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def clip_tokenizer(texts: list[str] | tuple[str, ...], vocab_size: int, model_max_length: int = 77):
    """A ``CLIPTokenizer`` (CLIP's lower-cased byte-level BPE, words ending in ``</w>``) built from ``texts`` offline:
    ``<|startoftext|>`` and ``<|endoftext|>`` first, every byte alone and as a word's last symbol (so punctuation and
    words never seen still encode, as in CLIP's own vocabulary), then each word of ``texts`` merged left to right into
    one token (words in sorted order, at most ``vocab_size`` merges), ``model_max_length`` CLIP's 77.

    Built, not trained: ``tokenizers``' BpeTrainer with an end-of-word suffix numbers the initial symbols and breaks
    ties between merges differently in every process, and a tokenizer that differs between two builds makes the
    same seed train another adapter."""
    from tokenizers import normalizers, pre_tokenizers
    from transformers import CLIPTokenizer

    suffix = "</w>"
    normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    pieces = (piece for text in texts for piece in normalizer.normalize_str(text).split())  # CLIP splits on spaces
    words = sorted({w for piece in pieces for w, _ in split.pre_tokenize_str(piece)})
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(["<|startoftext|>", "<|endoftext|>", *alphabet])}
    for symbol in alphabet:
        vocab[symbol + suffix] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in words:
        symbols = [*word[:-1], word[-1] + suffix]
        merged = symbols[0]
        for symbol in symbols[1:]:
            if merged + symbol not in vocab:
                if len(merges) >= vocab_size:
                    break
                vocab[merged + symbol] = len(vocab)
                merges.append((merged, symbol))
            merged += symbol
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges)  # type: ignore[arg-type]
    tokenizer.model_max_length = model_max_length
    return tokenizer


def rewrite_json(file: Path, change: Callable[[dict[str, Any]], None], *, sort_keys: bool = False) -> None:
    """Read ``file``, apply ``change`` to its object in place and write it back (indent 2, a final newline)."""
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data, indent=2, sort_keys=sort_keys) + "\n")


# --------------------------------------------------------------------------------------
# What a random VAE is measured on: the demo's pictures and clips
# --------------------------------------------------------------------------------------
def shapes_pixels(resolution: int, seed: int, n: int = 8) -> torch.Tensor:
    """``n`` shapes pictures (the demo data set's kind) of ``resolution`` px, ``[n, 3, H, W]`` in [-1, 1]."""
    from dit_lora.data.synthetic.shapes import render_shape_example

    rng = random.Random(seed)
    images = [render_shape_example(rng, resolution)[0] for _ in range(n)]
    pixels = torch.stack(
        [torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(resolution, resolution, 3) for im in images]
    )
    return pixels.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def moving_square_clips(seed: int, n: int, frames: int, height: int, width: int) -> torch.Tensor:
    """``n`` clips of a square crossing a plain background, like the demo's training clips
    (``dit_lora.data.synthetic.clips``), ``[n, 3, F, H, W]`` in [-1, 1]."""
    rng = random.Random(seed)
    clips = torch.empty(n, 3, frames, height, width)
    side = height // 4
    for clip in clips:
        clip[:] = torch.tensor([rng.uniform(-1, 0) for _ in range(3)])[:, None, None, None]
        color = torch.tensor([rng.uniform(0, 1) for _ in range(3)])[:, None, None]
        row = rng.randrange(height - side)
        for f in range(frames):
            col = round(f * (width - side) / (frames - 1))
            clip[:, f, row : row + side, col : col + side] = color
    return clips


def clip_statistics(seed: int, geometry: Mapping[str, int]) -> Callable[[Any], None]:
    """A clip VAE part's ``then``: its ``latents_mean`` / ``latents_std`` measured per channel
    (:func:`channel_statistics`) on four moving-square clips of ``geometry``'s ``num_frames``, ``height`` and
    ``width`` (what the published lists are for a real video VAE), so the diffusion targets stay at about unit
    variance."""

    def measure(vae: Any) -> None:
        clips = moving_square_clips(seed, 4, geometry["num_frames"], geometry["height"], geometry["width"])
        with torch.no_grad():
            mean, std = channel_statistics(vae.encode(clips).latent_dist.mean)
        vae.register_to_config(latents_mean=mean, latents_std=std)

    return measure


def scaling_factor(latents: torch.Tensor) -> float:
    """1 / std of ``latents`` to four digits: a VAE's ``scaling_factor`` as SD, DC-AE and CogVideoX define it (a
    random VAE's latent scale is arbitrary; this keeps the diffusion targets at about unit variance)."""
    return float(f"{1.0 / latents.float().std().item():.4g}")


def measured_scaling(resolution: int, seed: int, *, shift: bool = False) -> Callable[[Any], None]:
    """A tiny VAE's ``then``: its :func:`scaling_factor` measured on a few :func:`shapes_pixels` of ``resolution`` px
    (an ``AutoencoderKL``'s posterior mode, a DC-AE's latent) and registered in its config; ``shift``: its
    ``shift_factor`` too, the latents' mean (as the FLUX.1 VAE defines both), so a random VAE's latents train at unit
    scale like the real one's."""

    def measure(vae: Any) -> None:
        with torch.no_grad():
            encoded = vae.encode(shapes_pixels(resolution, seed))
            latents = encoded.latent if hasattr(encoded, "latent") else encoded.latent_dist.mode()
        shifted = {"shift_factor": float(f"{latents.mean().item():.4g}")} if shift else {}
        vae.register_to_config(**shifted, scaling_factor=scaling_factor(latents))

    return measure


def channel_statistics(latents: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and std (at least 1e-3) of ``[n, C, ...]`` latents to four digits: a VAE's ``latents_mean``
    and ``latents_std`` (the pipelines normalise latents as ``(z - mean) / std``)."""
    per_channel = latents.float().transpose(0, 1).flatten(1)
    mean = [float(f"{m:.4g}") for m in per_channel.mean(1).tolist()]
    std = [float(f"{max(s, 1e-3):.4g}") for s in per_channel.std(1).tolist()]
    return mean, std


def builders(
    describe: Callable[..., TinyPipeline], default: str | None = None
) -> tuple[Callable[..., dict[str, Any]], Callable[..., Path]]:
    """A family's two builders of its tiny pipeline ``describe(variant, seed)`` (``default``: the variant built when
    none is named; None: a family of one variant, ``describe(seed)``): ``components([variant,] seed)``, its
    components in memory (:func:`build_components`), and ``pipeline(path, [variant,] seed)``, the pipeline written
    to ``path`` and returned (:func:`build_pipeline`: idempotent, a marker names variant, seed and version; atomic,
    built beside and renamed into place)."""
    if default is None:
        return (lambda seed=0: build_components(describe(seed))), (
            lambda path, seed=0: build_pipeline(path, describe(seed))
        )

    def components(variant: str = default, seed: int = 0) -> dict[str, Any]:
        return build_components(describe(variant, seed))

    def pipeline(path: str | Path, variant: str = default, seed: int = 0) -> Path:
        return build_pipeline(path, describe(variant, seed))

    return components, pipeline


def described(
    demo: DemoFile,
    pipeline: str,
    seed: int,
    config: Mapping[str, Any],
    variant: tuple[str, str] | None = None,
    **fields: Any,
) -> TinyPipeline:
    """The :class:`TinyPipeline` of the diffusers class ``pipeline`` that ``demo`` (the family's
    :class:`~dit_lora.kit.demo_file.DemoFile`) describes: its marker names the family, the
    ``variant`` (its key and value) where it has several, ``seed`` and the file's version; its flow-matching
    scheduler configured by ``config["scheduler"]``; ``fields``: the other fields (``tokenizer``, ``parts``, ...)."""
    family = demo.package.rpartition(".")[2]
    marker = {"kind": family, **dict([variant] if variant else []), "seed": seed, "version": demo.read().version}
    scheduler = ("diffusers:FlowMatchEulerDiscreteScheduler", config["scheduler"])
    return TinyPipeline(pipeline=f"diffusers:{pipeline}", marker=marker, seed=seed, scheduler=scheduler, **fields)
