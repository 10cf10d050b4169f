"""Checkpoint folders laid out exactly as the Hub has them, built offline from the catalogue's configs.

Real widths, head counts, scheduler and tokenizer file sets; only the depth is cut (and the vocabulary, which a
locally trained tokenizer sets) so a CPU can train them; random weights, saved as safetensors. Tokenizers are
trained here with ``sentencepiece`` / ``tokenizers`` and written in the Hub's file set: CogVideoX's T5 folder
holds ``spiece.model`` and no ``tokenizer.json``; Sana's Gemma folder holds both.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import torch
from layout_weights import (
    NARROW_GEMMA2,
    NARROW_T5,
    _built_in,
    _quickly_initialised,
    quick_init,
)

from dit_lora.catalogue import by_hub_id

CORPUS = [
    "a red square on a dark background", "a green circle", "a blue triangle moving left to right",
    "a yellow square moving top to bottom", "a photo of a cat", "an orange shape in the middle of the frame",
] * 20


def sentencepiece_model(vocab_size: int = 96) -> bytes:
    """A small unigram SentencePiece model (T5's ids: pad 0, eos 1, unk 2)."""
    import sentencepiece

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=out, vocab_size=vocab_size, hard_vocab_limit=False,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )
    return out.getvalue()


def t5_tokenizer_folder(folder: Path, max_length: int = 226) -> Path:
    """CogVideoX's tokenizer/ as the Hub has it: spiece.model plus JSON, no tokenizer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spiece.model").write_bytes(sentencepiece_model())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "T5Tokenizer", "model_max_length": max_length, "extra_ids": 0, "pad_token": "<pad>",
        "eos_token": "</s>", "unk_token": "<unk>"}))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}))
    (folder / "added_tokens.json").write_text("{}")
    return folder


def gemma_tokenizer_folder(folder: Path) -> Path:
    """Sana's tokenizer/ as the Hub has it: tokenizer.model, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json (GemmaTokenizerFast converted from a local SentencePiece model)."""
    from transformers import GemmaTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "tokenizer.model"
    model.write_bytes(sentencepiece_model())
    tokenizer = GemmaTokenizerFast(vocab_file=str(model), pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   bos_token="<unk>")
    tokenizer.save_pretrained(folder)
    return folder


def write_configs(hub_id: str, folder: Path, **changes: dict) -> Path:
    """Every config the catalogue records for ``hub_id``; ``changes`` maps a file key to values to replace."""
    for file, config in by_hub_id(hub_id).configs.items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**config, **changes.get(file, {})}, indent=1))
    return folder


class Blocked:
    """A ``sys.meta_path`` finder that makes ``import <name>`` fail, as on a machine without the package."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


def block_packages(monkeypatch, *names: str) -> None:
    """Hide installed packages from this process for one test (imports and find_spec both fail)."""
    for module in list(sys.modules):
        if module.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [Blocked(*names), *sys.meta_path])


class LayoutCache:
    """Hub-layout folders built once per test session and shared by the tests that read the same layout (a
    recipe run reads its model folder and writes only its own output folder). ``cache(build, *args, **kwargs)``
    returns ``build(<a fresh folder>, *args, **kwargs)``, building it the first time these arguments come.

    Only the ``keep`` most recently used folders stay on disk: a real-width layout is up to 3 GB, and the tests
    of one layout run one after another (one ``xdist_group``, which the conftest also keeps together without
    xdist), so a folder is dropped once another layout is asked for."""

    def __init__(self, root: Path, keep: int = 1) -> None:
        self.root, self.keep = Path(root), keep
        self.builds = 0  # how many folders were built (tests check the sharing)
        self._folders: dict[tuple, Path] = {}

    def __call__(self, build, *args, **kwargs) -> Path:
        key = (build.__name__, args, tuple(sorted(kwargs.items())))
        if key in self._folders:
            self._folders[key] = self._folders.pop(key)  # most recently used last
            return self._folders[key]
        while self._folders and len(self._folders) >= self.keep:
            oldest = next(iter(self._folders))
            shutil.rmtree(self._folders.pop(oldest).parent, ignore_errors=True)
        self.builds += 1
        root = self.root / f"layout-{self.builds}"
        root.mkdir(parents=True)
        self._folders[key] = build(root, *args, **kwargs)
        return self._folders[key]


def _folder(root: Path, hub_id: str) -> Path:
    folder = root / hub_id.split("/")[-1]
    write_configs(hub_id, folder)  # model_index.json, scheduler and the rest as published
    return folder


def _text_encoder(config: dict, **changes):
    from transformers import AutoConfig, AutoModel

    return AutoModel.from_config(AutoConfig.for_model(**{**config, **changes}))


@_quickly_initialised
def sana_pipeline(root: Path, hub_id: str = "Efficient-Large-Model/Sana_600M_1024px_diffusers", layers: int = 1,
                  narrow_text_encoder: bool = False) -> Path:
    """Sana as the Hub lays it out: the published transformer (real widths and heads, ``layers`` deep, fp32 main
    files), the DC-AE with its published stages, latent channels and compression but narrow channels and one
    layer per stage, Gemma-2 (real widths, or its model width in a :data:`NARROW_GEMMA2` layer with
    ``narrow_text_encoder``; one layer, the local tokenizer's vocabulary) in bf16, and the GemmaTokenizerFast file
    set."""
    from diffusers import AutoencoderDC, SanaTransformer2DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    SanaTransformer2DModel.from_config({**entry.configs["transformer/config.json"], "num_layers": layers}) \
        .save_pretrained(folder / "transformer")
    narrow = {"encoder_block_out_channels": [8, 8, 8, 32, 32, 32], "decoder_block_out_channels": [8, 8, 8, 32, 32, 32],
              "encoder_layers_per_block": [1] * 6, "decoder_layers_per_block": [1] * 6}
    AutoencoderDC.from_config({**entry.configs["vae/config.json"], **narrow}).save_pretrained(folder / "vae")
    tokenizer = gemma_tokenizer_folder(folder / "tokenizer")
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    _text_encoder(entry.configs["text_encoder/config.json"], num_hidden_layers=1, vocab_size=vocab,
                  **(NARROW_GEMMA2 if narrow_text_encoder else {})) \
        .to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    return folder


@_quickly_initialised
def cogvideox_pipeline(root: Path, hub_id: str = "THUDM/CogVideoX-5b", layers: int = 1,
                       narrow_text_encoder: bool = False) -> Path:
    """CogVideoX as the Hub lays it out: the published transformer (real widths and heads, ``layers`` deep, bf16),
    the VAE with its published stages and compression but narrow channels and one layer per block (fp32, as
    uploaded), T5-XXL's widths (or its model width in a :data:`NARROW_T5` layer with ``narrow_text_encoder``) with
    one layer in bf16, and the spiece.model-only tokenizer folder."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    CogVideoXTransformer3DModel.from_config({**entry.configs["transformer/config.json"], "num_layers": layers}) \
        .to(torch.bfloat16).save_pretrained(folder / "transformer")
    AutoencoderKLCogVideoX.from_config({**entry.configs["vae/config.json"], "block_out_channels": [32, 32, 32, 32],
                                        "layers_per_block": 1}).save_pretrained(folder / "vae")
    t5_tokenizer_folder(folder / "tokenizer")
    _text_encoder(entry.configs["text_encoder/config.json"], num_layers=1, vocab_size=128,
                  **(NARROW_T5 if narrow_text_encoder else {})) \
        .to(torch.bfloat16).save_pretrained(folder / "text_encoder")
    return folder


@_quickly_initialised
def dit_pipeline(root: Path, hub_id: str = "facebook/DiT-XL-2-256", layers: int = 1,
                 labels: dict[str, str] | None = None) -> Path:
    """DiT-XL/2 as the Hub lays it out (the legacy ``Transformer2DModel`` config name, 1000 classes, real widths,
    ``layers`` deep; the SD VAE with its published widths and one layer per block), with ``id2label`` in
    model_index.json: ImageNet's synonym strings for the ``labels`` given, placeholders for the rest. Weights in
    safetensors (the Hub's main branch has pickle files only, which dit-lora refuses)."""
    from diffusers import AutoencoderKL, DiTTransformer2DModel

    entry = by_hub_id(hub_id)
    folder = _folder(root, hub_id)
    transformer = entry.configs["transformer/config.json"]
    DiTTransformer2DModel.from_config({**transformer, "num_layers": layers}).save_pretrained(folder / "transformer")
    config = json.loads((folder / "transformer" / "config.json").read_text())
    config["_class_name"] = "Transformer2DModel"  # as published; diffusers remaps it for ada_norm_zero
    (folder / "transformer" / "config.json").write_text(json.dumps(config))
    AutoencoderKL.from_config({**entry.configs["vae/config.json"], "layers_per_block": 1}).save_pretrained(folder / "vae")
    index = json.loads((folder / "model_index.json").read_text())
    index["id2label"] = {str(i): (labels or {}).get(str(i), f"class number {i}") for i in range(1000)}
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


# ---- video LLMs (transformers layout: everything in the repo root) -------------------------------------------------

#: CLIP's normalisation, as every llava-hf and Qwen2.5-VL preprocessor config writes it
_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

#: llava-hf's LLaVA-NeXT-Video chat template (the repos' chat_template.json): roles upper-cased, images then videos
#: then text of each message, the assistant's text in a generation block, no end-of-turn token after answers.
LLAVA_NEXT_VIDEO_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{# Render all video then #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

#: Qwen2-VL / Qwen2.5-VL Instruct chat template (chat_template.json and tokenizer_config.json of the Qwen repos)
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: "
    "{% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)

#: Qwen2.5's added tokens from id 151643 on (tokenizer.json / added_tokens.json of the Qwen2.5-VL repos); the
#: last eight are not special (tool calls and fill-in-the-middle markers, normal text to the tokenizer)
QWEN_ADDED_TOKENS = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
)
QWEN_FIRST_ADDED_ID = 151643  # the regular byte-level BPE vocabulary holds ids 0..151642


def _padded_vocab(vocab: dict[str, int], size: int, filler: str) -> dict[str, int]:
    """``vocab`` grown to exactly ``size`` entries with tokens no merge produces, so the added tokens after it get
    the real checkpoint's ids (the locally learned vocabulary is a few hundred tokens; the real one fills the gap)."""
    out = dict(vocab)
    i = 0
    while len(out) < size:
        out.setdefault(filler.format(i), len(out))
        i += 1
    return out


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _save_weights(config, folder: Path, model_class: str, seed: int) -> None:
    """Random bf16 weights in the Hub's sharded safetensors layout (``model-0000i-of-0000n.safetensors`` and the
    index); built in bf16 so a 7B-wide layer costs its bf16 bytes only once."""
    import transformers

    cls = getattr(transformers, model_class)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with quick_init(seed):  # transformers' own init: normal(0, initializer_range) weights, nothing all-zero
                model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="400MB")


def llama_tokenizer_files(folder: Path, vocab_size: int = 32000, added: dict[str, int] | None = None,
                          template: str | None = None) -> Path:
    """llava-hf's Llama tokenizer files: ``tokenizer.model`` (SentencePiece BPE with byte fallback, ids 0-2 =
    ``<unk> <s> </s>``), ``tokenizer.json`` (the same pieces as a ``tokenizers`` BPE, the vocabulary grown to
    ``vocab_size`` so ``added`` keep their real ids), ``tokenizer_config.json``, ``special_tokens_map.json``,
    ``added_tokens.json``; pad is ``<unk>`` (id 0, the text config's ``pad_token_id``)."""
    import sentencepiece
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    added = added if added is not None else {"<video>": 32000, "<image>": 32001}
    folder.mkdir(parents=True, exist_ok=True)
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=out, vocab_size=400, model_type="bpe", byte_fallback=True,
        hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(out.getvalue())
    pieces = SentencePieceExtractor(str(folder / "tokenizer.model")).extract(models.BPE)
    vocab = _padded_vocab(pieces["vocab"], vocab_size, "▁<filler{}>")
    backend = Tokenizer(models.BPE(vocab=vocab, merges=pieces["merges"], unk_token="<unk>", fuse_unk=True,
                                   byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    for token, _ in sorted(added.items(), key=lambda kv: kv[1]):
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False)])
    assert {t: backend.token_to_id(t) for t in added} == added, "added tokens did not get the real ids"
    backend.save(str(folder / "tokenizer.json"))
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for t, i in [("<unk>", 0), ("<s>", 1), ("</s>", 2), *added.items()]}
    config = {"add_bos_token": True, "add_eos_token": False, "add_prefix_space": None, "added_tokens_decoder": decoder,
              "bos_token": "<s>", "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": True,
              "model_max_length": 1000000000000000019884624838656, "pad_token": "<unk>", "padding_side": "left",
              "processor_class": "LlavaNextVideoProcessor", "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
              "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False}
    if template is not None:
        config["chat_template"] = template
    _write_json(folder / "tokenizer_config.json", config)
    _write_json(folder / "special_tokens_map.json", {
        "bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "eos_token": {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "pad_token": "<unk>",
        "unk_token": {"content": "<unk>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}})
    _write_json(folder / "added_tokens.json", dict(sorted(added.items())))
    return folder


def llava_next_video_folder(root: Path, hub_id: str = "llava-hf/LLaVA-NeXT-Video-7B-hf", layers: int = 1,
                            vision_layers: int = 1, seed: int = 0) -> Path:
    """LLaVA-NeXT-Video as llava-hf lays it out: the catalogue's ``config.json`` (real widths, heads and the full
    32064-token vocabulary; ``layers`` language-model layers and ``vision_layers`` CLIP layers), random bf16
    weights in sharded safetensors, ``generation_config.json``, the Llama tokenizer files
    (:func:`llama_tokenizer_files`: ``<video>`` 32000, ``<image>`` 32001), ``chat_template.json`` (the template is
    not in ``tokenizer_config.json``, as in the current repos), and the CLIP 336 px ``preprocessor_config.json`` and
    ``video_preprocessor_config.json``."""
    from transformers import LlavaNextVideoConfig

    entry = by_hub_id(hub_id)
    config = json.loads(json.dumps(entry.configs["config.json"]))
    config["text_config"]["num_hidden_layers"] = layers
    config["vision_config"]["num_hidden_layers"] = vision_layers
    folder = root / hub_id.split("/")[-1]
    folder.mkdir(parents=True, exist_ok=True)
    video, image = config["video_token_index"], config["image_token_index"]
    _save_weights(LlavaNextVideoConfig.from_dict(config), folder, "LlavaNextVideoForConditionalGeneration", seed)
    _write_json(folder / "config.json", config)  # as published (save_pretrained writes transformers' own spelling)
    _write_json(folder / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    llama_tokenizer_files(folder, vocab_size=video, added={"<video>": video, "<image>": image})
    _write_json(folder / "chat_template.json", {"chat_template": LLAVA_NEXT_VIDEO_CHAT_TEMPLATE})
    size = config["vision_config"]["image_size"]
    common = {"crop_size": {"height": size, "width": size}, "do_center_crop": True, "do_convert_rgb": True,
              "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": _CLIP_MEAN,
              "image_std": _CLIP_STD, "processor_class": "LlavaNextVideoProcessor", "resample": 3,
              "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": size}}
    _write_json(folder / "preprocessor_config.json", {
        **common, "aspect_ratio_setting": "anyres", "image_grid_pinpoints": config["image_grid_pinpoints"],
        "image_processor_type": "LlavaNextImageProcessor"})
    _write_json(folder / "video_preprocessor_config.json", {**common, "video_processor_type": "LlavaNextVideoVideoProcessor"})
    return folder


def qwen_tokenizer_files(folder: Path, template: str = QWEN2_5_VL_CHAT_TEMPLATE) -> Path:
    """Qwen2.5's tokenizer files: ``vocab.json`` + ``merges.txt`` (Qwen2's byte-level BPE: its split regex, NFC,
    every byte a token; merges learned on the demo's words, the vocabulary grown to 151643 entries) and
    ``tokenizer.json`` with :data:`QWEN_ADDED_TOKENS` at their real ids (``<|vision_start|>`` 151652,
    ``<|video_pad|>`` 151656 ...), ``tokenizer_config.json`` (Qwen2Tokenizer, eos ``<|im_end|>``, pad
    ``<|endoftext|>``, no bos, the chat template), ``added_tokens.json``, ``special_tokens_map.json``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    from dit_lora.families.videollm.demo_qwen import _QWEN_SPLIT_REGEX, _bytes_to_unicode, _corpus_words, _learn_merges

    folder.mkdir(parents=True, exist_ok=True)
    alphabet = _bytes_to_unicode()
    merges = _learn_merges(_corpus_words(), alphabet)
    vocab: dict[str, int] = {alphabet[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab = _padded_vocab(vocab, QWEN_FIRST_ADDED_ID, "filler{}")
    _write_json(folder / "vocab.json", vocab)
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for token, special in QWEN_ADDED_TOKENS:
        backend.add_tokens([AddedToken(token, special=special, normalized=False)])
    ids = {t: QWEN_FIRST_ADDED_ID + i for i, (t, _) in enumerate(QWEN_ADDED_TOKENS)}
    assert {t: backend.token_to_id(t) for t in ids} == ids, "added tokens did not get the real ids"
    backend.save(str(folder / "tokenizer.json"))
    _write_json(folder / "added_tokens.json", dict(sorted(ids.items())))
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": s} for (t, s), i in zip(QWEN_ADDED_TOKENS, ids.values())}
    _write_json(folder / "tokenizer_config.json", {
        "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                      "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                      "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                      "<|video_pad|>"],
        "bos_token": None, "chat_template": template, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    _write_json(folder / "special_tokens_map.json", {
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                      "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                      "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                      "<|video_pad|>"],
        "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False},
        "pad_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False}})
    return folder


def qwen2_5_vl_folder(root: Path, hub_id: str = "Qwen/Qwen2.5-VL-3B-Instruct", layers: int = 1,
                      vision_layers: int = 1, seed: int = 0) -> Path:
    """Qwen2.5-VL as the Qwen repos lay it out: the catalogue's ``config.json`` (real widths, heads, the full
    vocabulary; ``layers`` language-model layers, ``vision_layers`` vision blocks with the last one full
    attention as in every published file), random bf16 weights in sharded safetensors, ``generation_config.json``,
    the tokenizer files (:func:`qwen_tokenizer_files`), ``chat_template.json`` and the published
    ``preprocessor_config.json`` (min_pixels 3136, max_pixels 12845056, patch 14, temporal patch 2, merge 2)."""
    from transformers import Qwen2_5_VLConfig

    entry = by_hub_id(hub_id)
    config = json.loads(json.dumps(entry.configs["config.json"]))
    config.update(num_hidden_layers=layers, max_window_layers=layers)
    config["vision_config"].update(depth=vision_layers, fullatt_block_indexes=[vision_layers - 1])
    folder = root / hub_id.split("/")[-1]
    folder.mkdir(parents=True, exist_ok=True)
    _save_weights(Qwen2_5_VLConfig.from_dict(config), folder, "Qwen2_5_VLForConditionalGeneration", seed)
    _write_json(folder / "config.json", config)  # as published (save_pretrained writes transformers' own spelling)
    _write_json(folder / "generation_config.json", {
        "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
        "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1})
    qwen_tokenizer_files(folder)
    _write_json(folder / "chat_template.json", {"chat_template": QWEN2_5_VL_CHAT_TEMPLATE})
    _write_json(folder / "preprocessor_config.json", {
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": _CLIP_MEAN, "image_std": _CLIP_STD, "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor"})
    return folder


# ---- Wan 2.1 / 2.2 (diffusers layout; the configs are dit_lora/families/wan/catalogue.json's) -------------------------

def umt5_tokenizer_folder(folder: Path) -> Path:
    """Wan's tokenizer/ as the Hub has it: ``special_tokens_map.json``, ``spiece.model``, ``tokenizer.json`` and
    ``tokenizer_config.json``. google/umt5-xxl's own 256384-piece model cannot be had offline, so the pieces are a
    small SentencePiece model trained here (T5's ids: pad 0, eos 1, unk 2) and ``tokenizer.json`` is transformers'
    conversion of it: the real file set, not the real vocabulary."""
    from transformers import AutoTokenizer

    t5_tokenizer_folder(folder, max_length=512)
    (folder / "added_tokens.json").unlink()  # the Wan repos have none
    tokenizer = AutoTokenizer.from_pretrained(folder)  # converts spiece.model (sentencepiece + protobuf)
    tokenizer.backend_tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _wan_entry(hub_id: str):
    """The catalogue entry of ``hub_id`` (read from the family's data file, so this works before the registry
    lists the wan family)."""
    from dit_lora.families.wan.catalogue import ENTRIES

    found = [e for e in ENTRIES if e.hub_id.lower() == hub_id.lower()]
    if not found:
        raise ValueError(f"{hub_id} is not a catalogued Wan checkpoint: {', '.join(e.hub_id for e in ENTRIES)}")
    return found[0]


def wan_pipeline(root: Path, hub_id: str = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", layers: int = 1,
                 dtype: torch.dtype = torch.bfloat16, narrow_text_encoder: bool = False) -> Path:
    """A Wan checkpoint as the Hub lays it out: every published config (model_index.json with its
    ``boundary_ratio`` / ``expand_timesteps``, the UniPC scheduler, the tokenizer config), the transformer at real
    widths and heads, ``layers`` deep (the A14B repos: ``transformer`` and ``transformer_2``, different seeds), in
    ``dtype`` (the Hub ships fp32; bf16 keeps a 14B-wide folder at ~0.7 GB per expert); the VAE with its published
    z_dim, stages, temporal/spatial compression and latent statistics but 8/16 base channels and one residual block
    per stage (fp32, as published); UMT5-XXL's widths (or its model width in a :data:`NARROW_T5` layer with
    ``narrow_text_encoder``) with one layer, the local tokenizer's vocabulary, in bf16; the
    UMT5 tokenizer file set (:func:`umt5_tokenizer_folder`); for the 2.1 I2V repos the CLIP ViT-H/14 vision tower at
    its widths with two layers (the pipeline reads the penultimate hidden state) in bf16 and the published
    ``image_processor/preprocessor_config.json``. Weights are safetensors."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoTokenizer, CLIPVisionConfig, CLIPVisionModelWithProjection, UMT5Config, \
        UMT5EncoderModel

    from dit_lora.families.wan.catalogue import IMAGE_PROCESSOR_CONFIG

    entry = _wan_entry(hub_id)
    folder = root / hub_id.split("/")[-1]
    for file, config in entry.configs.items():  # model_index.json, scheduler and the rest as published
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(config, indent=1))
    for seed, sub in enumerate(s for s in ("transformer", "transformer_2") if f"{s}/config.json" in entry.configs):
        config = {**entry.configs[f"{sub}/config.json"], "num_layers": layers}
        _built_in(dtype, seed, lambda: WanTransformer3DModel.from_config(config)).save_pretrained(folder / sub)
    vae = entry.configs["vae/config.json"]
    narrow = {"base_dim": 8, "num_res_blocks": 1, **({"decoder_base_dim": 16} if vae.get("decoder_base_dim") else {})}
    AutoencoderKLWan.from_config({**vae, **narrow}).save_pretrained(folder / "vae")
    vocab = len(AutoTokenizer.from_pretrained(umt5_tokenizer_folder(folder / "tokenizer")))
    text = UMT5Config(**{**entry.configs["text_encoder/config.json"], "num_layers": 1, "vocab_size": vocab,
                         **(NARROW_T5 if narrow_text_encoder else {})})
    _built_in(torch.bfloat16, 10, lambda: UMT5EncoderModel(text)).save_pretrained(folder / "text_encoder")
    if "image_encoder/config.json" in entry.configs:
        clip = CLIPVisionConfig(**{**entry.configs["image_encoder/config.json"], "num_hidden_layers": 2})
        _built_in(torch.bfloat16, 11, lambda: CLIPVisionModelWithProjection(clip)).save_pretrained(
            folder / "image_encoder")
        (folder / "image_processor").mkdir(exist_ok=True)
        (folder / "image_processor" / "preprocessor_config.json").write_text(json.dumps(IMAGE_PROCESSOR_CONFIG,
                                                                                        indent=1))
    return folder
