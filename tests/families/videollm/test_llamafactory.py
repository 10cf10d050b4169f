"""LLaMA-Factory's data for the video LLMs: sharegpt (``messages`` role/content, ``conversations`` from/value, tags
from dataset_info.json) and alpaca (instruction/input/output, system, history) with ``videos`` and ``<video>``,
read as LLaMA-Factory reads them; what dit-lora cannot train refused by entry; each family's own video tokens in the
prompt, never a literal placeholder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("av")

from dit_lora.config import TrainConfig  # noqa: E402
from dit_lora.core.errors import UserError  # noqa: E402
from dit_lora.families.videollm.spec import ARCHITECTURES, build_demo_model  # noqa: E402
from dit_lora.families.videollm.data import (  # noqa: E402
    check_qa_samples,
    load_qa_samples,
    read_clip,
    screen_qa_samples,
)
from dit_lora.families.videollm.demo_clips import make_qa_dataset  # noqa: E402
from dit_lora.families.videollm.media import VideoQAMedia  # noqa: E402
from dit_lora.registry import get_spec  # noqa: E402


def _text(content) -> str:
    return content if isinstance(content, str) else next(p["text"] for p in content if p.get("type") == "text")


@pytest.fixture(scope="module")
def lf(tmp_path_factory) -> dict:
    """Three tiny clips as dit-lora's chat JSONL, and the same conversations as LLaMA-Factory writes them: sharegpt
    with role/content (its video demo), sharegpt with from/value and a system turn, alpaca with history, and a
    dataset_info.json naming them (custom tags for one)."""
    root = tmp_path_factory.mktemp("lf")
    chat = make_qa_dataset(root, n=3, num_frames=4, size=32, layout="chat", seed=0)
    rows = [json.loads(line) for line in chat.read_text().splitlines() if line.strip()]
    turns = [[{"role": m["role"], "content": _text(m["content"])} for m in row["messages"]] for row in rows]
    share = [{"messages": [{**t[0], "content": "<video>" + t[0]["content"]}, *t[1:]], "videos": [row["video"]]}
             for t, row in zip(turns, rows)]
    conv = [{"conversations": [{"from": "system", "value": "Answer briefly."}]
             + [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in e["messages"]],
             "videos": e["videos"]} for e in share]
    pairs = [[[m["content"] for m in e["messages"][i:i + 2]] for i in range(0, len(e["messages"]), 2)] for e in share]
    alpaca = [{"instruction": p[-1][0], "input": "", "output": p[-1][1], "system": "Answer briefly.",
               "history": p[:-1], "videos": row["video"]} for p, row in zip(pairs, rows)]
    assert any(len(p) > 1 for p in pairs) and any(len(p) == 1 for p in pairs)  # with and without history
    tagged = [{"dialog": [{"speaker": "asker" if m["role"] == "user" else "answerer", "text": m["content"]}
                          for m in e["messages"]], "clips": e["videos"]} for e in share]
    files = {"share": "lf_share.json", "conv": "lf_conv.jsonl", "alpaca": "lf_alpaca.json", "tagged": "lf_tagged.json"}
    for key, data in (("share", share), ("alpaca", alpaca), ("tagged", tagged)):
        (root / files[key]).write_text(json.dumps(data))
    (root / files["conv"]).write_text("\n".join(json.dumps(e) for e in conv))
    info = {
        "videos_demo": {"file_name": files["share"], "formatting": "sharegpt",
                        "columns": {"messages": "messages", "videos": "videos"},
                        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                 "assistant_tag": "assistant"}},
        "tagged": {"file_name": files["tagged"], "formatting": "sharegpt",
                   "columns": {"messages": "dialog", "videos": "clips"},
                   "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "asker",
                            "assistant_tag": "answerer"}},
        "alpaca": {"file_name": files["alpaca"], "columns": {"system": "system", "history": "history",
                                                              "videos": "videos"}},
    }
    (root / "dataset_info.json").write_text(json.dumps(info))
    return {"root": root, "chat": chat, "files": files, "share": share, "turns": turns}


def _media(family: str, data: Path, **options) -> VideoQAMedia:
    cfg = TrainConfig.for_family(family=family, train_data_dir=str(data), num_frames=2, **options)
    return VideoQAMedia(cfg, get_spec(family))


def test_each_llamafactory_format_reads_as_the_native_conversation(lf):
    """sharegpt role/content and from/value (its system turn first), alpaca (history, then instruction, system) and
    a dataset_info.json entry with its own column and tag names give the native chat JSONL's conversations; the
    system prompt is kept as LLaMA-Factory keeps it; one line says what the conversion did."""
    native = load_qa_samples(lf["chat"])
    system = [{"role": "system", "content": "Answer briefly."}]
    for key in ("share", "conv", "alpaca"):
        notes: list[str] = []
        samples = load_qa_samples(lf["root"] / lf["files"][key], notes=notes)
        assert [s.video for s in samples] == [s.video for s in native], key
        want = [([] if key == "share" else system) + s.messages for s in native]
        assert [s.messages for s in samples] == want, key
        assert len(notes) == 1 and notes[0].startswith("LLaMA-Factory entries of") and "<video>" in notes[0]
        assert ": 3 read;" in notes[0]
    for name, prefix in (("videos_demo", []), ("tagged", []), ("alpaca", system)):
        samples = _media("qwen3_vl", lf["root"], dataset_info_name=name).list_samples()
        assert [s.messages for s in samples] == [prefix + s.messages for s in native], name
        assert [s.video for s in samples] == [s.video for s in native]


def test_dataset_info_names_the_dataset_and_its_folder_holds_the_media(lf, tmp_path):
    """--train_data_dir at dataset_info.json's folder and --dataset_info_name (LLaMA-Factory's --dataset); the clips
    resolve against that folder (its media_dir default) or --video_folder; names it does not list are refused."""
    with pytest.raises(UserError, match=r"lists 3 datasets \(`videos_demo`, `tagged`, `alpaca`\)\. Name the one"):
        _media("internvl", lf["root"]).list_samples()
    with pytest.raises(UserError, match="'nope' is not a dataset of .* it lists `videos_demo`"):
        _media("internvl", lf["root"], dataset_info_name="nope").list_samples()
    with pytest.raises(UserError, match="several datasets; dit-lora trains one per run"):
        _media("internvl", lf["root"], dataset_info_name="videos_demo,alpaca").list_samples()
    with pytest.raises(UserError, match="no folder holding one"):
        _media("internvl", lf["chat"], dataset_info_name="videos_demo").list_samples()
    # dataset_info.json itself given as --train_data_dir: read as its folder
    itself = _media("internvl", lf["root"] / "dataset_info.json", dataset_info_name="videos_demo").list_samples()
    assert [s.video for s in itself] == [s.video for s in load_qa_samples(lf["chat"])]
    media = tmp_path / "media"
    media.mkdir()
    moved = _media("internvl", lf["root"], dataset_info_name="videos_demo", video_folder=str(media)).list_samples()
    assert {s.video.parent for s in moved} == {media}


@pytest.mark.parametrize("attrs,match", [
    ({"hf_hub_url": "someone/videos"}, "loads from `hf_hub_url`; dit-lora reads local files only"),
    ({"file_name": "lf_share.json", "ranking": True}, "is preference data"),
    ({"file_name": "lf_share.json", "formatting": "openai"}, "has formatting `openai`"),
    ({"file_name": "lf_share.json", "formatting": "sharegpt", "num_samples": 2}, "draws that many entries at random"),
    ({"file_name": "missing.json"}, "does not exist"),
])
def test_dataset_info_entries_dit_lora_cannot_read_are_refused(lf, tmp_path, attrs, match):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "lf_share.json").write_text(json.dumps(lf["share"]))
    (folder / "dataset_info.json").write_text(json.dumps({"mine": attrs}))
    with pytest.raises(UserError, match=match) as err:
        _media("qwen2_5_vl", folder).list_samples()
    assert "\n" not in str(err.value)


def _entry(lf, **changes) -> dict:
    return {**lf["share"][0], **changes}


@pytest.mark.parametrize("change,match", [
    ({"videos": []}, r"has no video in `videos`.* Give it one clip path"),
    ({"videos": ["a.mp4", "b.mp4"]}, r"has 2 videos in `videos`.*one entry per clip"),
    ({"videos": [["f0.jpg", "f1.jpg"]]}, "its video is a list of frame images, not a video file's path"),
    ({"images": ["a.png"]}, r"has 1 image\(s\) in `images`.*without images"),
    ({"messages": [{"role": "user", "content": "What colour?"}, {"role": "assistant", "content": "red"}]},
     r"has 1 video but 0 `<video>` placeholders.*LLaMA-Factory stops on this too"),
    ({"messages": [{"role": "user", "content": "<video><video>What?"}, {"role": "assistant", "content": "red"}]},
     "has 1 video but 2 `<video>` placeholders"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                   {"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "red"}]},
     r"`<video>` is in turn 3 \(user\); dit-lora attaches the clip to the first question"),
    ({"messages": [{"role": "user", "content": "<video>What?"}, {"role": "user", "content": "Well?"}]},
     r"turn 2 has role 'user' where \"assistant\" belongs"),
    ({"messages": [{"role": "user", "content": "<video>What?"}, {"role": "function_call", "content": "{}"}]},
     r"turn 2 is a tool turn \(role 'function_call'\)"),
    ({"messages": [{"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "red"},
                   {"role": "user", "content": "And?"}]}, "ends with a question"),
])
def test_what_dit_lora_cannot_train_is_refused_by_entry(lf, tmp_path, change, match):
    """Each refusal names the entry (its number in the file) and the fix, in one paragraph; the entry is a bad
    sample of its own (LLaMA-Factory skips it), quarantined with that reason and never opened, never dropped."""
    data = [lf["share"][1], _entry(lf, **change)]
    file = tmp_path / "lf.json"
    file.write_text(json.dumps(data))
    notes: list[str] = []
    good, bad = load_qa_samples(file, lf["root"], notes=notes)
    assert good.refused is None and bad.unconverted and bad.key == "lf.json:2"
    assert re.search(match, bad.refused) and bad.refused.startswith(f"Entry 2 of {file}") and "\n" not in bad.refused
    assert "1 cannot be trained (lf.json:2) and are left out as bad samples" in notes[0]
    quarantine: list[dict] = []
    lines: list[str] = []
    kept = screen_qa_samples([good, bad], num_frames=2, log=lines.append, quarantine=quarantine, num_workers=1)
    assert kept == [good] and quarantine == [{"key": "lf.json:2", "reason": bad.refused}]
    assert f"skipping lf.json:2: {bad.refused}" in lines


def test_check_data_lists_every_bad_entry_in_one_run(lf, tmp_path):
    """check-data: one BLOCK row per entry that cannot be converted (entry number and reason), one WARN row per
    entry whose <video> stands inside the question, the good ones ok; --max_train_samples said as "read, kept"."""
    moved = _entry(lf, messages=[{"role": "user", "content": "What is in <video>?"},
                                 {"role": "assistant", "content": "red"}])
    data = [lf["share"][0], _entry(lf, videos=[]), _entry(lf, images=["a.png"]), moved,
            _entry(lf, messages=[{"role": "user", "content": "<video>Q"}, {"role": "tool", "content": "x"}])]
    file = tmp_path / "lf.json"
    file.write_text(json.dumps(data))
    rows = check_qa_samples(load_qa_samples(file, lf["root"]), num_frames=2, num_workers=1)
    assert [(r.key, r.status) for r in rows] == [("lf.json:1", "ok"), ("lf.json:2", "block"), ("lf.json:3", "block"),
                                                 ("lf.json:4", "warn"), ("lf.json:5", "block")]
    assert "has no video in `videos`" in rows[1].problem and "(video" not in rows[1].problem
    assert "stands inside the question" in rows[3].problem
    notes: list[str] = []
    assert len(load_qa_samples(file, max_samples=2, notes=notes)) == 2
    assert ": 5 read, the first 2 kept;" in notes[0]


def test_an_alpaca_placeholder_out_of_place_is_named_as_alpaca_names_it(lf, tmp_path):
    entry = {"instruction": "<video>And now?", "output": "red", "history": [["Hi", "Hello"]], "videos": ["a.mp4"]}
    file = tmp_path / "lf.json"
    file.write_text(json.dumps([entry, {**entry, "history": [["<video>Hi", "Hello"]], "instruction": "Now?"}]))
    first, second = load_qa_samples(file)
    assert '`<video>` is in "instruction", after 1 history round;' in first.refused
    assert second.refused is None  # in the first history question: the conversation's first question


def test_a_placeholder_inside_the_question_is_taken_out_and_said(lf, tmp_path):
    entry = _entry(lf, messages=[{"role": "user", "content": "What colour is the square in <video>?"},
                                 {"role": "assistant", "content": "red"}])
    file = tmp_path / "lf.json"
    file.write_text(json.dumps([entry]))
    notes: list[str] = []
    (sample,) = load_qa_samples(file, notes=notes)
    assert sample.messages[0] == {"role": "user", "content": "What colour is the square in ?"}
    assert "1 had it elsewhere in the question (lf.json:1)" in notes[0]
    assert "stands inside the question" in sample.note


@pytest.mark.parametrize("family", list(ARCHITECTURES))
def test_a_literal_media_token_in_a_text_is_refused_by_name(lf, tmp_path, family):
    """Any family: a `<video>` (LLaMA-Factory's, renamed to dit-lora's "video") or the family's own media tokens
    left in a text stop the listing (check-data and training read the data through it) with the sample, the
    token and the fix; Qwen3-VL trained on `<video>` as words before."""
    spec = get_spec(family)
    for token in dict.fromkeys(("<video>", "<image>", *spec.video_qa.arch.media_tokens)):
        row = {"video": lf["share"][0]["videos"][0], "messages": [
            {"role": "user", "content": f"{token}What colour is the square?"}, {"role": "assistant", "content": "red"}]}
        file = lf["root"] / "literal" / "chat.jsonl"
        file.parent.mkdir(exist_ok=True)
        file.write_text(json.dumps(row))
        with pytest.raises(UserError) as err:
            _media(family, file, video_folder=str(lf["root"])).list_samples()
        text = str(err.value)
        assert text.startswith("chat.jsonl:1 (") and f"message 1 (user) holds `{token}` as text" in text, text
        assert f"--family {family} places the clip" in text and "Remove it from the text" in text


@pytest.fixture(scope="module")
def processings(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("lfmodels")
    return {name: get_spec(name).video_qa.load_processing(str(build_demo_model(name, root / name)))
            for name in ARCHITECTURES}


@pytest.mark.parametrize("family", list(ARCHITECTURES))
def test_each_family_tokenizes_a_converted_entry_as_its_native_sample(lf, processings, family):
    """The converted sharegpt entry becomes exactly the tokens of the native chat sample: the family's own video
    tokens where its template puts them, once, and no literal `<video>`."""
    processing = processings[family]
    native = load_qa_samples(lf["chat"])[0]
    converted = load_qa_samples(lf["root"] / lf["files"]["share"])[0]
    clip = read_clip(native.video, 2)
    _, count = processing.frame_inputs(clip.frames, clip.fps)
    ids = processing.tokenize(converted.messages, count, None, clip.times)["input_ids"]
    assert ids.tolist() == processing.tokenize(native.messages, count, None, clip.times)["input_ids"].tolist()
    tok, arch = processing.tokenizer, processing.spec
    text = tok.decode(ids)
    if family.startswith("qwen3_vl"):  # one video block: per temporal patch its seconds and its tokens
        assert "<video>" not in text and text.count("<|vision_start|>") == text.count("seconds>") + 1
        assert text.count("<|vision_end|>") == text.count("<|vision_start|>")
    elif family == "internvl":  # the processor's frame lines, no <video> token left
        assert tok.convert_tokens_to_ids("<video>") not in ids.tolist() and text.count("Frame1: <img>") == 1
    else:  # the placeholder is the video token itself, repeated per feature and nowhere else
        video_id = tok.convert_tokens_to_ids(arch.video_token)
        positions = [i for i, t in enumerate(ids.tolist()) if t == video_id]
        assert len(positions) == count and positions == list(range(positions[0], positions[0] + count))
