"""LLaVA-NeXT-Video spec, answer-only chat prompts and the tiny offline model (CPU, no downloads)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from dit_lora.errors import UserError
from dit_lora.families.videochat.llava_next_video import LlavaNextVideoSpec
from dit_lora.families.videochat.prompts import (
    IGNORE_INDEX,
    ChatTemplateError,
    build_generation_prompt,
    build_training_example,
    pad_batch,
)

SPEC = LlavaNextVideoSpec()
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

SINGLE = [
    {"role": "user", "content": "What colour is the square?"},
    {"role": "assistant", "content": "The square is red."},
]
MULTI = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What colour is the square?"},
    {"role": "assistant", "content": "The square is red."},
    {"role": "user", "content": "Which way does the square move?"},
    {"role": "assistant", "content": "It moves left to right."},
]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    from dit_lora.families.videochat.demo_llava import build_tiny_llava_next_video

    return build_tiny_llava_next_video(tmp_path_factory.mktemp("vlm") / "tiny-llava-next-video", seed=0)


@pytest.fixture(scope="module")
def model(tiny_path):
    return SPEC.load_model(tiny_path, torch.float32)


@pytest.fixture(scope="module")
def tokenizer(tiny_path):
    return SPEC.load_tokenizer(tiny_path)


@pytest.fixture(scope="module")
def prep(tiny_path):
    return SPEC.load_preprocessing(tiny_path)


def _frames(n: int = 4, height: int = 40, width: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (n, height, width, 3), dtype=np.uint8)


def _example(tokenizer, model, messages, count=16, **kwargs):
    return build_training_example(
        tokenizer,
        messages,
        video_placeholder=SPEC.video_placeholder,
        video_token_id=model.config.video_token_id,
        video_token_count=count,
        **kwargs,
    )


def _answer_runs(example) -> list[list[int]]:
    """Contiguous runs of labelled tokens."""
    runs, current = [], []
    for token, label in zip(example["input_ids"].tolist(), example["labels"].tolist()):
        if label != IGNORE_INDEX:
            assert label == token
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


# --------------------------------------------------------------------------------------
# Tiny model folder
# --------------------------------------------------------------------------------------
def test_tiny_folder_looks_like_the_real_repo(tiny_path, model, tokenizer):
    from safetensors import safe_open

    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "preprocessor_config.json", "video_preprocessor_config.json", "dit_lora_tiny.json"):
        assert (tiny_path / name).is_file(), name
    with safe_open(tiny_path / "model.safetensors", "pt") as handle:
        assert {handle.get_tensor(k).dtype for k in handle.keys()} == {torch.bfloat16}
    assert type(model).__name__ == SPEC.model_class
    assert [n for n, _ in model.named_children()] == ["model", "lm_head"]
    assert {n for n, _ in model.model.named_children()} == {
        "vision_tower", "multi_modal_projector", "language_model", "vision_resampler"}
    for dotted in (SPEC.vision_tower, SPEC.projector, SPEC.language_model):
        assert isinstance(SPEC.module(model, dotted), torch.nn.Module)
    with pytest.raises(AttributeError, match="no module"):
        SPEC.module(model, "model.nope")
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    assert model.config.text_config.vocab_size == len(tokenizer)
    assert tokenizer.convert_tokens_to_ids(SPEC.video_token) == model.config.video_token_id
    assert tokenizer.chat_template


def test_tiny_build_is_cached_and_deterministic(tiny_path, tmp_path):
    from dit_lora.families.videochat import demo_llava as tiny_videochat

    mtime = (tiny_path / "model.safetensors").stat().st_mtime_ns
    assert tiny_videochat.build_tiny_llava_next_video(tiny_path, seed=0) == tiny_path
    assert (tiny_path / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rewritten

    other = tiny_videochat.build_tiny_llava_next_video(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (other / name).read_bytes() == (tiny_path / name).read_bytes(), name
    # A marker from another version is rebuilt in place.
    marker = json.loads((other / "dit_lora_tiny.json").read_text())
    (other / "dit_lora_tiny.json").write_text(json.dumps(dict(marker, version=-1)))
    tiny_videochat.build_tiny_llava_next_video(other, seed=0)
    assert json.loads((other / "dit_lora_tiny.json").read_text()) == marker
    reseeded = tiny_videochat.build_tiny_llava_next_video(tmp_path / "seed1", seed=1)
    assert (reseeded / "model.safetensors").read_bytes() != (tiny_path / "model.safetensors").read_bytes()


# --------------------------------------------------------------------------------------
# Spec: LoRA targets, loading, preprocessing
# --------------------------------------------------------------------------------------
def _lora_targets(model) -> set[str]:
    """The module names the family puts LoRA on (the language model's projections)."""
    from dit_lora.config import TrainConfig
    from dit_lora.families import get_family

    return set(get_family("llava_next_video").lora_targets(model, TrainConfig(family="llava_next_video")))


def test_lora_targets_are_only_language_model_projections(model):
    targets = _lora_targets(model)
    names = [name for name, _ in model.named_modules()]
    matched = [name for name in names if name in targets]
    layers = model.config.text_config.num_hidden_layers
    expected = {
        f"model.language_model.layers.{i}.{block}.{proj}"
        for i in range(layers)
        for block, projs in (("self_attn", PROJECTIONS[:4]), ("mlp", PROJECTIONS[4:]))
        for proj in projs
    }
    assert set(matched) == expected and len(matched) == 7 * layers
    # The CLIP tower has q_proj/k_proj/v_proj too: none may match.
    vision_projs = [n for n in names if n.startswith(SPEC.vision_tower) and n.rsplit(".", 1)[-1] in PROJECTIONS]
    assert vision_projs and not any(n in targets for n in vision_projs)


def test_lora_targets_with_peft(tiny_path):
    from peft import LoraConfig, get_peft_model

    fresh = SPEC.load_model(tiny_path, torch.float32)
    peft_model = get_peft_model(fresh, LoraConfig(r=4, lora_alpha=4, target_modules=sorted(_lora_targets(fresh))))
    wrapped = {n for n, m in peft_model.named_modules() if hasattr(m, "lora_A")}
    assert len(wrapped) == 7 * fresh.config.text_config.num_hidden_layers
    assert all(".language_model.layers." in n for n in wrapped)


def test_load_model_and_tokenizer_need_local_folders(tiny_path, tmp_path):
    with pytest.raises(UserError, match="local"):
        SPEC.load_model("llava-hf/LLaVA-NeXT-Video-7B-hf", torch.float32)
    # A template only in the processor's chat_template.json is picked up.
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_path / name, folder / name)
    template = (tiny_path / "chat_template.jinja").read_text()
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    assert SPEC.load_tokenizer(folder).chat_template == template
    (folder / "chat_template.json").unlink()
    with pytest.raises(UserError, match="no chat template"):
        SPEC.load_tokenizer(folder)


def test_load_preprocessing_reads_the_json(tiny_path, prep, tmp_path):
    raw = json.loads((tiny_path / "video_preprocessor_config.json").read_text())
    assert prep["image_mean"] == pytest.approx(raw["image_mean"])
    assert prep["image_std"] == pytest.approx(raw["image_std"])
    assert prep["shortest_edge"] == 32 and prep["crop_size"] == (32, 32)
    assert prep["rescale_factor"] == pytest.approx(1 / 255) and prep["resample"] == "bicubic"

    # The video processor's file wins over the image processor's; missing keys get defaults.
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.1, 0.2, 0.3], "crop_size": 20}))
    (tmp_path / "video_preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.5, 0.5, 0.5], "size": {"height": 24, "width": 30}}))
    custom = SPEC.load_preprocessing(tmp_path)
    assert custom["image_mean"] == (0.5, 0.5, 0.5) and custom["crop_size"] == (20, 20)
    assert custom["resize_to"] == (24, 30) and custom["shortest_edge"] is None
    assert custom["image_std"] == pytest.approx(SPEC.default_preprocessing["image_std"])
    assert SPEC.load_preprocessing(tmp_path / ".." / tmp_path.name)["crop_size"] == (20, 20)


def test_frame_inputs_normalise_and_crop(prep):
    frames = np.zeros((3, 40, 56, 3), dtype=np.uint8)
    frames[..., 0], frames[..., 1], frames[..., 2] = 255, 128, 0
    pixels = SPEC.frame_inputs(frames, prep)["pixel_values_videos"]
    assert pixels.shape == (3, 3, 32, 32) and pixels.dtype == torch.float32
    for c, value in enumerate((255, 128, 0)):  # a flat colour survives resize + crop exactly
        expected = (value / 255 - prep["image_mean"][c]) / prep["image_std"][c]
        assert torch.allclose(pixels[:, c], torch.full_like(pixels[:, c], expected), atol=1e-5)
    # Centre crop: a marker column in the middle of a wide frame stays in the middle.
    wide = np.zeros((1, 32, 64, 3), dtype=np.uint8)
    wide[:, :, 30:34] = 255
    out = SPEC.frame_inputs(wide, dict(prep, do_normalize=False))["pixel_values_videos"]
    assert out[0, 0, 0, 14:18].min() == pytest.approx(1.0) and out[0, 0, 0, :10].max() == 0.0
    with pytest.raises(ValueError, match="uint8"):
        SPEC.frame_inputs(frames.astype(np.float32), prep)


@pytest.mark.parametrize("height,width,edge", [(40, 48, 32), (240, 320, 32), (20, 30, 32)])
def test_resize_matches_pil(height, width, edge):
    from PIL import Image

    from dit_lora.families.videochat.specs import frames_to_tensor, resize_shortest_edge, shortest_edge_size

    image = np.random.RandomState(height).randint(0, 256, (height, width, 3), dtype=np.uint8)
    out_h, out_w = shortest_edge_size(height, width, edge)
    assert min(out_h, out_w) == edge and (out_h, out_w) == ((edge, int(edge * width / height)))
    pil = np.asarray(Image.fromarray(image).resize((out_w, out_h), Image.BICUBIC)).astype(np.float32)
    ours = resize_shortest_edge(frames_to_tensor(image[None]), edge)[0].permute(1, 2, 0).numpy()
    assert np.abs(ours - pil).max() <= 1.0


@pytest.mark.parametrize(
    "image_size,patch,stride,mode",
    [(32, 8, 2, "average"), (56, 8, 2, "max"), (40, 8, 3, "conv"), (56, 8, 4, "average")],
)
def test_video_token_count_matches_the_model(image_size, patch, stride, mode):
    """Odd grids (56 / 8 = 7) floor when pooled: 9 tokens a frame, not the processor's 49 // 4."""
    from transformers import CLIPVisionConfig, LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration, MistralConfig

    config = LlavaNextVideoConfig(
        vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, image_size=image_size, patch_size=patch),
        text_config=MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=16, vocab_size=100),
        video_token_index=99, image_token_index=98, spatial_pool_mode=mode, spatial_pool_stride=stride,
    )
    torch.manual_seed(0)
    model = LlavaNextVideoForConditionalGeneration(config).eval()
    pixels = torch.randn(3, 3, image_size, image_size)
    count = SPEC.video_token_count({"pixel_values_videos": pixels}, config)
    assert count == 3 * ((image_size // patch) // stride) ** 2
    with torch.no_grad():
        for n in (count - 1, count, count + 1):
            ids = torch.tensor([[1] + [99] * n + [5, 6]])
            if n == count:
                model(input_ids=ids, pixel_values_videos=pixels[None])
            else:
                with pytest.raises(ValueError, match="do not match"):
                    model(input_ids=ids, pixel_values_videos=pixels[None])


def test_video_token_count_checks_the_frame_size(model):
    with pytest.raises(ValueError, match="vision tower takes 32x32"):
        SPEC.video_token_count({"pixel_values_videos": torch.zeros(2, 3, 48, 48)}, model.config)
    with pytest.raises(ValueError, match="equal shape"):
        SPEC.collate_pixels([{"pixel_values_videos": torch.zeros(2, 3, 32, 32)},
                             {"pixel_values_videos": torch.zeros(3, 3, 32, 32)}])


# --------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------
def test_single_turn_labels_only_the_answer(tokenizer, model):
    ex = _example(tokenizer, model, SINGLE)
    ids, labels = ex["input_ids"], ex["labels"]
    assert ids.dtype == labels.dtype == ex["attention_mask"].dtype == torch.long
    assert ids.dim() == 1 and ex["attention_mask"].eq(1).all()
    runs = _answer_runs(ex)
    assert [tokenizer.decode(run) for run in runs] == [" The square is red." + tokenizer.eos_token]
    assert runs[0][-1] == tokenizer.eos_token_id
    video = ids == model.config.video_token_id
    assert int(video.sum()) == 16 and labels[video].eq(IGNORE_INDEX).all()
    # Everything before the answer is masked: it is exactly the generation prompt.
    first = int((labels != IGNORE_INDEX).nonzero()[0])
    assert labels[:first].eq(IGNORE_INDEX).all() and labels[first:].ne(IGNORE_INDEX).all()
    assert int((ids == tokenizer.bos_token_id).sum()) == 1 and ids[0] == tokenizer.bos_token_id
    # The video tokens are contiguous and sit where the template put "<video>".
    positions = video.nonzero().flatten()
    assert positions[-1] - positions[0] == 15
    assert tokenizer.decode(ids[: positions[0]]) == "<s>[INST] "


def test_multi_turn_with_system_unmasks_each_answer(tokenizer, model):
    ex = _example(tokenizer, model, MULTI, count=8)
    eos = tokenizer.eos_token
    assert [tokenizer.decode(run) for run in _answer_runs(ex)] == [
        " The square is red." + eos, " It moves left to right." + eos]
    masked = tokenizer.decode([t for t, l in zip(ex["input_ids"].tolist(), ex["labels"].tolist()) if l == IGNORE_INDEX])
    assert "You are a helpful assistant." in masked  # the system prompt is there, masked
    assert "Which way does the square move?" in masked
    assert int((ex["input_ids"] == model.config.video_token_id).sum()) == 8
    assert int((ex["input_ids"] == tokenizer.bos_token_id).sum()) == 1


def test_generation_prompt_is_the_training_prefix(tokenizer, model):
    kwargs = dict(video_placeholder=SPEC.video_placeholder, video_token_id=model.config.video_token_id,
                  video_token_count=8)
    ex = _example(tokenizer, model, MULTI, count=8)
    labelled = (ex["labels"] != IGNORE_INDEX).nonzero().flatten().tolist()
    first = labelled[0]
    prompt = build_generation_prompt(tokenizer, MULTI[:2], **kwargs)
    assert torch.equal(prompt["input_ids"], ex["input_ids"][:first])
    assert prompt["attention_mask"].eq(1).all() and prompt["input_ids"].dim() == 1
    # Second turn: the history (first answer included) is tokenized identically.
    second = [i for i in labelled if i - 1 not in labelled][1]
    prompt2 = build_generation_prompt(tokenizer, MULTI[:4], **kwargs)
    assert torch.equal(prompt2["input_ids"], ex["input_ids"][:second])
    with pytest.raises(ValueError, match="end with a user turn"):
        build_generation_prompt(tokenizer, MULTI, **kwargs)


def test_prompt_errors(tokenizer, model):
    with pytest.raises(ValueError, match=r"--max_sequence_length 20") as info:
        _example(tokenizer, model, SINGLE, max_length=20)
    length = len(_example(tokenizer, model, SINGLE)["input_ids"])
    assert f"{length} tokens" in str(info.value)
    assert len(_example(tokenizer, model, SINGLE, max_length=length)["input_ids"]) == length
    # Two placeholders: one from the template, one typed by the user.
    two = [{"role": "user", "content": "<video> What colour is it?"}, SINGLE[1]]
    with pytest.raises(ValueError, match="exactly one"):
        _example(tokenizer, model, two)
    # No video token: a placeholder that does not tokenize to the video token.
    with pytest.raises(ValueError, match="exactly one video token"):
        build_training_example(tokenizer, SINGLE, video_placeholder="<image>",
                               video_token_id=model.config.video_token_id, video_token_count=4)
    with pytest.raises(ValueError, match="end with a assistant turn"):
        _example(tokenizer, model, SINGLE[:1])
    with pytest.raises(ValueError, match="no user turn"):
        _example(tokenizer, model, [{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}])


def test_template_fallbacks(tokenizer, model):
    plain = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    # A template that only concatenates strings cannot take list content: the placeholder is
    # written into the text instead.
    plain.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}"
        "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    ex = _example(plain, model, SINGLE, count=4)
    assert [plain.decode(run) for run in _answer_runs(ex)] == ["The square is red.\n</s>"]
    assert int((ex["input_ids"] == model.config.video_token_id).sum()) == 4
    # Templates that rewrite earlier turns are refused, not mislabelled: one that marks the
    # last message (so the answer's rendering does not extend the generation prompt) ...
    plain.chat_template = (
        "{% for m in messages %}{% if loop.last %}[LAST]{% endif %}{{ m['role'] }}: {{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="answer span cannot be located"):
        _example(plain, model, SINGLE, count=4)
    # ... and one that marks the last user turn (like templates moving the system prompt there).
    plain.chat_template = (
        "{% set ns = namespace(last=0) %}{% for m in messages %}{% if m['role'] == 'user' %}"
        "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}"
        "{% if loop.index0 == ns.last %}[LAST]{% endif %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    assert _answer_runs(_example(plain, model, SINGLE, count=4))
    with pytest.raises(ChatTemplateError, match="not prefix-stable"):
        _example(plain, model, MULTI, count=4)


# Written for this test in the layout of the llava-hf LLaVA-NeXT-Video templates: it iterates
# list content only (string content would render nothing), writes no BOS, and ends answers with a
# space instead of an end-of-turn token.
LLAVA_HF_STYLE_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>\\n' }}{% endfor %}"
    "{% if message['role'] != 'assistant' %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}{{ part['text'] + ' ' }}{% endfor %}"
    "{% else %}{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ part['text'] + ' ' }}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def test_llava_hf_style_template(tokenizer, model):
    """List content everywhere, BOS added (the tokenizer adds it) and EOS appended to each answer."""
    plain = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    plain.chat_template = LLAVA_HF_STYLE_TEMPLATE
    ex = _example(plain, model, MULTI, count=4)
    ids = ex["input_ids"]
    assert ids[0] == plain.bos_token_id and int((ids == plain.bos_token_id).sum()) == 1
    assert [plain.decode(run) for run in _answer_runs(ex)] == [
        " The square is red. </s>", " It moves left to right. </s>"]
    first_video = int((ids == model.config.video_token_id).nonzero()[0])
    assert plain.decode(ids[:first_video]) == "<s>You are a helpful assistant. USER: "
    prompt = build_generation_prompt(plain, MULTI[:4], video_placeholder="<video>",
                                     video_token_id=model.config.video_token_id, video_token_count=4)
    second = int((ex["labels"] != IGNORE_INDEX).nonzero().flatten()[-1]) - len(_answer_runs(ex)[1]) + 1
    assert torch.equal(prompt["input_ids"], ids[:second])


def test_pad_batch():
    ones = torch.ones(3, dtype=torch.long)
    a = {"input_ids": torch.tensor([5, 6, 7]), "labels": torch.tensor([-100, 6, 7]), "attention_mask": ones}
    b = {"input_ids": torch.tensor([8]), "labels": torch.tensor([8]), "attention_mask": ones[:1]}
    out = pad_batch([a, b], pad_token_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert out["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    left = pad_batch([{"input_ids": a["input_ids"]}, {"input_ids": b["input_ids"]}], 0, padding_side="left")
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]


# --------------------------------------------------------------------------------------
# Forward / backward
# --------------------------------------------------------------------------------------
def _per_sample_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    losses = torch.nn.functional.cross_entropy(
        shift_logits.transpose(1, 2), shift_labels, ignore_index=IGNORE_INDEX, reduction="none")
    return losses.sum(1) / shift_labels.ne(IGNORE_INDEX).sum(1)


def test_forward_backward_and_padding(tiny_path, tokenizer, prep):
    model = SPEC.load_model(tiny_path, torch.float32)
    samples = []
    for seed, messages in ((0, SINGLE), (1, MULTI)):
        pixels = SPEC.frame_inputs(_frames(seed=seed), prep)
        count = SPEC.video_token_count(pixels, model.config)
        assert count == 4 * (32 // 8 // 2) ** 2
        samples.append((pixels, _example(tokenizer, model, messages, count=count)))

    out = model(**pad_batch([samples[0][1]], tokenizer.pad_token_id), **SPEC.collate_pixels([samples[0][0]]))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    lm_grad = SPEC.module(model, SPEC.language_model).layers[0].self_attn.q_proj.weight.grad
    vision_grad = next(SPEC.module(model, SPEC.projector).parameters()).grad
    assert lm_grad is not None and lm_grad.abs().sum() > 0 and vision_grad is not None
    model.zero_grad(set_to_none=True)

    model.eval()
    with torch.no_grad():
        batch = pad_batch([ex for _, ex in samples], tokenizer.pad_token_id)
        assert batch["input_ids"].shape[0] == 2 and batch["attention_mask"][0].eq(0).any()  # sample 0 is padded
        batched = model(**batch, **SPEC.collate_pixels([p for p, _ in samples])).logits
        batched_loss = _per_sample_loss(batched, batch["labels"])
        for row, (pixels, ex) in enumerate(samples):
            alone = model(**pad_batch([ex], tokenizer.pad_token_id), **SPEC.collate_pixels([pixels]))
            n = ex["input_ids"].shape[0]
            assert torch.allclose(batched[row, :n], alone.logits[0], atol=1e-4)
            assert torch.allclose(batched_loss[row], alone.loss, atol=1e-5)
