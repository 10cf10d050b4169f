"""Data preflight: corrupt, truncated, missing, empty-caption and NaN-carrying samples, through
`dit-lora check-data` and through training's data preparation (quarantine, fraction stop, cache recompute)."""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
import json
import os
import random
import shutil
import subprocess
import sys
import types

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from helpers import DEFAULT_CAPTIONS, ROOT, base_args
from dit_lora.commands.cli import main as cli_main
from dit_lora.config import parse_config
from dit_lora.data.cache import cache_file_name, cache_namespace
from dit_lora.data.prepare import prepare_data
from dit_lora.output.names import QUARANTINE_FILE
from dit_lora.data.sources import load_samples
from dit_lora.data.transforms import crop_seed, preprocess_image
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family

BAD = ("corrupt.png", "truncated.png", "missing.png", "blank.png")


def _namespace(cfg, family) -> str:
    """The latent-cache folder a run with ``cfg`` uses (what its handler's identity hashes to)."""
    return cache_namespace(family.data.data_handler(cfg, family).namespace_identity())


def _accelerator():
    return types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1, wait_for_everyone=lambda: None)


def _add_rows(data, rows):
    with open(data / "metadata.jsonl", "a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def make_bad_data(shapes_data, dest):
    """The 16 shapes plus a corrupt file, a truncated PNG, a metadata row without its file and an empty caption."""
    shutil.copytree(shapes_data, dest)
    (dest / "corrupt.png").write_bytes(random.Random(0).randbytes(400))
    png = io.BytesIO()
    Image.effect_noise((64, 64), 60).convert("RGB").save(png, format="PNG")
    (dest / "truncated.png").write_bytes(png.getvalue()[: len(png.getvalue()) // 2])
    Image.new("RGB", (64, 64), (10, 200, 10)).save(dest / "blank.png")
    _add_rows(dest, [{"file_name": "corrupt.png", "text": "a corrupt image"},
                     {"file_name": "truncated.png", "text": "a truncated image"},
                     {"file_name": "missing.png", "text": "an image that is not there"},
                     {"file_name": "blank.png", "text": "   "}])
    return dest


def _nan_entry(like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {k: v.clone() for k, v in like.items()}
    out["latents"] = out["latents"].float()
    out["latents"].view(-1)[0] = float("nan")
    return out


def _run_cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out + captured.err


@pytest.fixture(scope="module")
def sana(tiny_sana, shapes_data, tmp_path_factory):
    """One loaded tiny Sana component set for the whole module."""
    scratch = tmp_path_factory.mktemp("load")
    cfg = parse_config(base_args(tiny_sana, shapes_data, scratch / "out", scratch / "cache", **DEFAULT_CAPTIONS))
    family = get_family("sana")
    comps = family.model.load_components(cfg, torch.device("cpu"))
    family.setup.configure(comps, cfg)
    return comps


def _cfg(tiny_sana, data, tmp_path, **overrides):
    return parse_config(base_args(tiny_sana, data, tmp_path / "out", tmp_path / "cache", **{**DEFAULT_CAPTIONS, **overrides}))


def _nan_for(monkeypatch, family, cfg, data, keys):
    """Make the family's image encoder return NaN latents for the samples ``keys``, every time."""
    targets = []
    for s in load_samples(train_data_dir=data):
        if s.key in keys:
            px = preprocess_image(s.open_image(), cfg.data.resolution, center_crop=cfg.data.center_crop, flip=False,
                                  crop_rng_seed=crop_seed(cfg.training.seed, s.key))
            targets += [px, px.flip(-1)]
    original = family.encoders.encode_images
    calls = []

    def encode_images(comps, pixels):
        latents = original(comps, pixels)
        for r in range(pixels.shape[0]):
            if any(torch.equal(pixels[r], t) for t in targets):
                latents[r] = float("nan")
                calls.append(r)
        return latents

    # The spec is immutable: patch its class for the test (the family object itself is never written to).
    monkeypatch.setattr(type(family.encoders), "encode_images", lambda self, comps, pixels: encode_images(comps, pixels))
    return calls


# ---------------------------------------------------------------------------------------------
# dit-lora check-data
# ---------------------------------------------------------------------------------------------


def test_check_data_good_data_exits_0(shapes_data, capsys):
    code, out = _run_cli(["check-data", "--train_data_dir", str(shapes_data), "--resolution", "64"], capsys)
    assert code == 0, out
    assert "16 sample(s): 16 ok, 0 warning(s), 0 blocking" in out
    assert "16 ok row(s) not shown" in out
    code, out = _run_cli(["check-data", "--train_data_dir", str(shapes_data), "--resolution", "64", "--all"], capsys)
    assert code == 0 and "00000.png" in out and "00015.png" in out
    # Smaller than the resolution: a warning, not a block.
    code, out = _run_cli(["check-data", "--train_data_dir", str(shapes_data), "--resolution", "128"], capsys)
    assert code == 0 and "WARN" in out and "upscaled" in out


def test_check_data_missing_folder_is_one_paragraph(tmp_path, capsys):
    code, out = _run_cli(["check-data", "--train_data_dir", str(tmp_path / "nope")], capsys)
    text = " ".join(out.split())
    assert code == 2 and "does not exist" in text and "--train_data_dir" in text and "Traceback" not in text


def test_check_data_names_every_bad_file_and_cache_entry(tmp_path, shapes_data):
    data = make_bad_data(shapes_data, tmp_path / "data")
    samples = {s.key: s for s in load_samples(train_data_dir=data)}
    # A cache namespace (any name: check-data matches entries to samples by content) with good entries,
    # one carrying NaN, and one whose shapes differ from the rest.
    ns = "0123456789abcdef0123"
    folder = tmp_path / "cache" / ns
    folder.mkdir(parents=True)
    good = {"latents": torch.zeros(4, 2, 2), "prompt_embeds": torch.zeros(8, 16, dtype=torch.bfloat16),
            "prompt_attention_mask": torch.ones(8, dtype=torch.int64)}
    names = {}
    for key in ("00000.png", "00001.png", "00002.png", "00003.png", "00004.png"):
        # an image's entry is named by its content and its bucket: these squares train in the 64 x 64 one
        names[key] = cache_file_name(ns, dataclasses.replace(samples[key], bucket=(64, 64)).cache_key())
        entry = good
        if key == "00001.png":
            entry = _nan_entry(good)
        elif key == "00002.png":
            entry = {**good, "latents": torch.zeros(4, 3, 3)}
        save_file(entry, str(folder / names[key]))

    proc = subprocess.run(
        [sys.executable, "-m", "dit_lora.commands.cli", "check-data", "--train_data_dir", str(data), "--resolution", "64",
         "--cache_dir", str(tmp_path / "cache")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("BLOCK")}
    assert "not a readable image" in rows["corrupt.png"]
    assert "truncated" in rows["truncated.png"]
    assert "file not found" in rows["missing.png"]
    assert "empty caption" in rows["blank.png"]  # load_samples strips, so whitespace-only is empty
    nan_rows = [line for line in out.splitlines() if line.startswith("BLOCK") and "00001.png" in line]
    assert nan_rows and "cache" in nan_rows[0] and names["00001.png"] in nan_rows[0] and "NaN" in nan_rows[0]
    shape_rows = [line for line in out.splitlines() if line.startswith("BLOCK") and "00002.png" in line]
    assert shape_rows and "shapes differ" in shape_rows[0]
    assert not any(line.startswith("BLOCK") and key in line for line in out.splitlines()
                   for key in ("00000.png", "00003.png", "00004.png"))
    assert "20 sample(s): 16 ok, 0 warning(s), 4 blocking" in out
    assert "5 cache entries, 2 bad" in out
    assert "Traceback" not in out


def test_check_data_refuses_file_names_outside_the_folder_and_names_absolute_ones_truly(tmp_path, shapes_data,
                                                                                          capsys):
    data = tmp_path / "data"
    shutil.copytree(shapes_data, data)
    Image.new("RGB", (64, 64), (0, 0, 255)).save(tmp_path / "secret.png")
    _add_rows(data, [{"file_name": "../secret.png", "text": "outside"},
                     {"file_name": "../../../../etc/hostname", "text": "host"},
                     {"file_name": str(tmp_path / "secret.png"), "text": "absolute, outside"},
                     {"file_name": str(data / "00003.png"), "text": "absolute, inside"}])
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64"], capsys)
    assert code == 1, out
    rows = {line.split()[1]: " ".join(line.split()) for line in out.splitlines() if line.startswith("BLOCK")}
    assert set(rows) == {"../secret.png", "../../../../etc/hostname", str(tmp_path / "secret.png")}
    for key, row in rows.items():
        assert f"leaves the data folder {data} (refused, never opened)" in row, row
    assert "file not found" not in out and "not a readable image" not in out
    assert "20 sample(s): 17 ok, 0 warning(s), 3 blocking" in out  # the absolute path inside is 00003.png's


def test_check_data_lists_each_bad_caption_file_and_the_links_left_out(tmp_path, capsys):
    """Every caption file that is not UTF-8 is a BLOCK row of its own, and a link out of the folder (the issue's link to
    the parent) is left out with one line: the same listing training reads."""
    from data_files import bad_caption_folder

    data = bad_caption_folder(tmp_path / "parent" / "data")
    Image.new("RGB", (64, 64)).save(tmp_path / "parent" / "outside.png")
    (tmp_path / "parent" / "outside.txt").write_text("outside the data folder")
    os.symlink(tmp_path / "parent", data / "up")
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64"], capsys)
    assert code == 1, out
    rows = {line.split()[1]: " ".join(line.split()) for line in out.splitlines() if line.startswith("BLOCK")}
    assert set(rows) == {"latin1.png", "shift_jis.png", "utf16_no_bom.png"}, out
    assert "caption file utf16_no_bom.txt is not UTF-8 text (NUL bytes" in rows["utf16_no_bom.png"]
    said = [line for line in out.splitlines() if "lead out of the folder" in line]
    assert len(said) == 1 and f"(e.g. 'up' -> {tmp_path / 'parent'})" in said[0]
    assert "outside" not in " ".join(rows) and "6 sample(s)" in out


def _with_bomb(shapes_data, dest, side=9000):
    """The 16 shapes plus a tiny palette PNG of ``side`` x ``side`` pixels (9000: 81 MP, beyond the 67 MP default
    budget at 64 px, and under Pillow's own warning limit, so nothing said a word before)."""
    shutil.copytree(shapes_data, dest)
    Image.new("P", (side, side), 0).save(dest / "bomb.png")
    _add_rows(dest, [{"file_name": "bomb.png", "text": "a small file of a huge image"}])
    return dest


def test_check_data_refuses_a_decompression_bomb_and_the_flag_lifts_the_budget(tmp_path, shapes_data, capsys,
                                                                              monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # a lifted budget raises Pillow's; restore
    data = _with_bomb(shapes_data, tmp_path / "data", side=13000)  # 169 MP: Pillow only warns
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64"], capsys)
    assert code == 1, out
    rows = [" ".join(line.split()) for line in out.splitlines() if line.startswith("BLOCK")]
    assert rows == ["BLOCK bomb.png sample image too large: 13000x13000 pixels (169 MP, 0.6 GiB as RGB pixels) "
                    "is beyond the pixel budget of 67 MP (refused before decoding: a small file can hold a huge "
                    "image). Downscale it, or raise --max_image_pixels (e.g. --max_image_pixels 169000000) if it is "
                    "meant to be used"]
    assert "DecompressionBombWarning" not in out
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64", "--max_image_pixels",
                          "170000000"], capsys)
    assert code == 0 and "17 sample(s): 17 ok" in out and "DecompressionBomb" not in out, out


# ---------------------------------------------------------------------------------------------
# training: prepare_data
# ---------------------------------------------------------------------------------------------


def test_training_quarantines_bad_samples_and_stops_past_the_fraction(tmp_path, tiny_sana, shapes_data, sana,
                                                                     monkeypatch):
    data = make_bad_data(shapes_data, tmp_path / "data")
    family = get_family("sana")
    cfg = _cfg(tiny_sana, data, tmp_path, max_bad_samples_fraction=0.5)
    calls = _nan_for(monkeypatch, family, cfg, data, {"00005.png"})

    prepared = prepare_data(cfg, family, sana, _accelerator())
    reasons = {q["key"]: q["reason"] for q in prepared.quarantine}
    assert set(reasons) == set(BAD) | {"00005.png"}
    assert "not a readable image" in reasons["corrupt.png"]
    assert "truncated" in reasons["truncated.png"]
    assert "file not found" in reasons["missing.png"]
    assert reasons["blank.png"] == "empty caption"
    assert "not finite" in reasons["00005.png"] and "recomputed" in reasons["00005.png"]
    assert len(calls) == 2  # encoded in its batch, then once more alone
    assert len(prepared) == 15 and "00005.png" not in [s.key for s in prepared.samples]
    assert len(prepared.dataset) == 15
    written = json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())
    assert written == prepared.quarantine

    # 4 unreadable of 20 is within 0.2, but with the NaN encoding it is 5 of 20: the run stops, naming
    # the samples, the flag and the quarantine file (which is written before stopping).
    cfg = _cfg(tiny_sana, data, tmp_path, max_bad_samples_fraction=0.2, output_dir=tmp_path / "out2")
    with pytest.raises(UserError) as err:
        prepare_data(cfg, family, sana, _accelerator())
    msg = str(err.value)
    assert "5 of 20" in msg and "--max_bad_samples_fraction" in msg and "00005.png" in msg and "corrupt.png" in msg
    assert QUARANTINE_FILE in msg
    assert len(json.loads((tmp_path / "out2" / QUARANTINE_FILE).read_text())) == 5

    # Unreadable files alone past the fraction stop before anything is encoded.
    cfg = _cfg(tiny_sana, data, tmp_path, max_bad_samples_fraction=0.05, output_dir=tmp_path / "out3")
    with pytest.raises(UserError, match="4 of 20"):
        prepare_data(cfg, family, sana, _accelerator())
    assert len(json.loads((tmp_path / "out3" / QUARANTINE_FILE).read_text())) == 4


def test_training_quarantines_a_decompression_bomb_before_decoding_it(tmp_path, tiny_sana, shapes_data, sana,
                                                                       monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)
    data = _with_bomb(shapes_data, tmp_path / "data")
    cfg = _cfg(tiny_sana, data, tmp_path, max_bad_samples_fraction=0.1)
    prepared = prepare_data(cfg, get_family("sana"), sana, _accelerator())
    assert len(prepared) == 16
    assert prepared.quarantine == [{"key": "bomb.png", "reason": (
        "image too large: 9000x9000 pixels (81 MP, 0.3 GiB as RGB pixels) is beyond the pixel budget of 67 MP (refused "
        "before decoding: a small file can hold a huge image). Downscale it, or raise --max_image_pixels (e.g. "
        "--max_image_pixels 81000000) if it is meant to be used")}]
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == prepared.quarantine
    # The flag lifts it: the image is cached (decoded reduced) and trained on.
    cfg = _cfg(tiny_sana, data, tmp_path, max_image_pixels=81_000_000, output_dir=tmp_path / "out2")
    prepared = prepare_data(cfg, get_family("sana"), sana, _accelerator())
    assert len(prepared) == 17 and prepared.quarantine == []


def _long_and_duplicated(shapes_data, dest):
    """The 16 shapes with a 100,000-character caption on 00000.png and 00001.png listed three times."""
    shutil.copytree(shapes_data, dest)
    rows = [json.loads(line) for line in (dest / "metadata.jsonl").read_text().splitlines()]
    rows[0]["text"] = ("a long caption " * 7000)[:100_000]
    rows += [rows[1], rows[1]]
    (dest / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest


DUPLICATES = ("duplicates: 1 file(s) are listed by more than one metadata row (2 extra row(s)), so each is trained "
              "on once per row every epoch: 00001.png (x3).")


def test_check_data_reports_long_captions_and_duplicates_once(tmp_path, shapes_data, tiny_sana, capsys):
    data = _long_and_duplicated(shapes_data, tmp_path / "data")
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64"], capsys)
    assert code == 0, out
    assert out.count("duplicates:") == 1 and DUPLICATES in out
    assert out.count("long captions:") == 1
    assert ("long captions: 1 of 18 caption(s) exceed the 300-token text length (estimated at 4 characters a token) "
            "and would likely be cut to it; the model never sees the rest: 00000.png (100,000 characters, 25,000 "
            "tokens)") in out
    assert "pass --pretrained_model_name_or_path to count with the model's tokenizer" in out
    code, out = _run_cli(["check-data", "--train_data_dir", str(data), "--resolution", "64",
                          "--pretrained_model_name_or_path", str(tiny_sana)], capsys)
    assert code == 0 and out.count("long captions:") == 1 and out.count("duplicates:") == 1, out
    assert "exceed the 300-token text length (the model's tokenizer) and are cut to it" in out


def test_a_run_reports_long_captions_and_duplicates_once_at_start(tmp_path, tiny_sana, shapes_data, sana, capsys):
    data = _long_and_duplicated(shapes_data, tmp_path / "data")
    cfg = _cfg(tiny_sana, data, tmp_path)
    family = get_family("sana")
    family.setup.configure(sana, cfg)
    prepare_data(cfg, family, sana, _accelerator())
    out = capsys.readouterr().out
    assert out.count(DUPLICATES) == 1
    lines = [line for line in out.splitlines() if line.startswith("long captions:")]
    assert len(lines) == 1 and lines[0].startswith(
        "long captions: 1 of 18 caption(s) exceed the 300-token text length (the model's tokenizer) and are cut to "
        "it; the model never sees the rest: 00000.png (100,000 characters, ")


def test_nan_cache_entry_is_recomputed_then_quarantined(tmp_path, tiny_sana, shapes_data, sana, monkeypatch, capsys):
    data = tmp_path / "data"
    shutil.copytree(shapes_data, data)
    family = get_family("sana")
    cfg = _cfg(tiny_sana, data, tmp_path)
    first = prepare_data(cfg, family, sana, _accelerator())
    assert first.quarantine == [] and len(first) == 16
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == []

    # Poison one cached entry with NaN (and truncate another): check-data finds the run's namespace and blocks.
    victim, torn = first.dataset.files[3], first.dataset.files[7]
    assert victim.parent.name == _namespace(cfg, family)
    good = load_file(str(victim))
    save_file(_nan_entry(good), str(victim))
    torn.write_bytes(torn.read_bytes()[:50])
    argv = ["check-data", "--train_data_dir", str(data), "--resolution", "64", "--center_crop",
            "--cache_dir", str(tmp_path / "cache"), "--pretrained_model_name_or_path", str(tiny_sana)]
    code, out = _run_cli(argv, capsys)
    assert code == 1, out
    assert victim.name in out and "NaN" in out and torn.name in out and "unreadable" in out
    assert f"namespace {victim.parent.name}" in out

    # Training recomputes both: finite files replace them and nothing is left out.
    second = prepare_data(cfg, family, sana, _accelerator())
    assert second.quarantine == [] and len(second) == 16
    for f in (victim, torn):
        assert all(torch.isfinite(t.float()).all() for t in load_file(str(f)).values())
    assert torch.allclose(load_file(str(victim))["latents"], good["latents"], atol=1e-5)
    assert _run_cli(argv, capsys)[0] == 0

    # A NaN that persists after the recompute: the sample is quarantined with both reasons.
    save_file(_nan_entry(good), str(victim))
    key = first.samples[3].key
    _nan_for(monkeypatch, family, cfg, data, {key})
    cfg = _cfg(tiny_sana, data, tmp_path, max_bad_samples_fraction=0.1)
    third = prepare_data(cfg, family, sana, _accelerator())
    assert [q["key"] for q in third.quarantine] == [key]
    reason = third.quarantine[0]["reason"]
    assert "cached entry was bad" in reason and "NaN" in reason and "recomputed" in reason
    assert not victim.exists() and len(third) == 15
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == third.quarantine


def test_uncached_training_quarantines_too(tmp_path, tiny_sana, shapes_data, sana):
    data = make_bad_data(shapes_data, tmp_path / "data")
    cfg = _cfg(tiny_sana, data, tmp_path, cache_latents="false", max_bad_samples_fraction=0.25)
    prepared = prepare_data(cfg, get_family("sana"), sana, _accelerator())
    assert not prepared.cached and len(prepared) == 16
    assert {q["key"] for q in prepared.quarantine} == set(BAD)
    assert {q["key"] for q in json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())} == set(BAD)


# ---------------------------------------------------------------------------------------------
# check-data for video-LLM question answering
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llava_next_video", "qwen2_5_vl"])
def test_check_data_screens_video_qa_as_training_does(tmp_path, capsys, family):
    """check-data on video-QA data (it crashed: QASample has no .caption): the clips it blocks are exactly the
    samples training quarantines, for the same reasons; with the model it fits each conversation to
    --max_sequence_length as the dataset will (a cut round warns, an unfittable first round blocks)."""
    from dit_lora.data.synthetic.clips import write_corrupt_clip
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.data import load_qa_samples
    from dit_lora.families.videollm.media import VideoQAMedia
    from dit_lora.families.videollm.spec import build_demo_model

    annotation = make_qa_dataset(tmp_path / "qa", n=4, num_frames=8, seed=2)
    write_corrupt_clip(tmp_path / "qa" / "corrupt.mp4")
    entries = json.loads(annotation.read_text())
    entries += [{"video": "missing.mp4", "QA": [{"q": "What colour is the square?", "a": "red"}]},
                {"video": "corrupt.mp4", "QA": [{"q": "What colour is the square?", "a": "red"}]}]
    annotation.write_text(json.dumps(entries))
    base = ["check-data", "--family", family, "--train_data_dir", str(annotation), "--num_frames", "4"]

    code, out = _run_cli(base, capsys)
    assert code == 1, out
    assert "Traceback" not in out and "token budget: not checked" in out
    blocked = {line.split()[1]: line for line in out.splitlines() if line.startswith("BLOCK")}
    assert set(blocked) == {"videochat2.json:5", "videochat2.json:6"}, out
    assert "file not found" in blocked["videochat2.json:5"] and "not a readable video" in blocked["videochat2.json:6"]
    assert "6 sample(s): 4 ok, 0 warning(s), 2 blocking" in out

    # Training's screening leaves out the same samples, for the same reasons.
    from dit_lora.config import TrainConfig

    cfg = TrainConfig.for_family(family=family, train_data_dir=str(annotation), num_frames=4)
    quarantine: list = []
    VideoQAMedia(cfg, get_family(family)).screen(load_qa_samples(annotation), log=lambda _: None,
                                                 quarantine=quarantine)
    assert {q["key"]: q["reason"] for q in quarantine} == {
        key: line.split("sample", 1)[1].strip() for key, line in blocked.items()}

    # With the model: the token budget. A length between the first round and the whole two-round conversation
    # cuts the second round (warn); one below the first round blocks.
    model = build_demo_model(family, tmp_path / "model")
    qa_family = get_family(family)
    processing = qa_family.video_qa.load_processing(str(model))
    two_rounds = next(s for s in load_qa_samples(annotation) if len(s.messages) == 4)
    from dit_lora.families.videollm.data import read_clip

    clip = read_clip(two_rounds.video, 4)
    _, count = processing.frame_inputs(clip.frames, clip.fps)
    first = len(processing.tokenize(two_rounds.messages[:2], count, None)["input_ids"])
    whole = len(processing.tokenize(two_rounds.messages, count, None)["input_ids"])
    assert first < whole
    with_model = base + ["--pretrained_model_name_or_path", str(model)]
    code, out = _run_cli(with_model + ["--max_sequence_length", str(first)], capsys)
    warned = [line for line in out.splitlines() if line.startswith("WARN")]
    assert any(two_rounds.key in line and "1 QA round(s) are cut" in line for line in warned), out
    assert code == 1 and "fitted to --max_sequence_length" in out  # the two bad clips still block
    code, out = _run_cli(with_model + ["--max_sequence_length", str(count)], capsys)
    blocked = [line for line in out.splitlines() if line.startswith("BLOCK")]
    assert len(blocked) == 6 and sum("exceed --max_sequence_length" in line for line in blocked) == 4, out

    # Training says the same once, at the start (prepare_data's report, main process): the conversations whose
    # last rounds are cut.
    from dit_lora.data.prepare import report_lines

    cfg = TrainConfig.for_family(family=family, train_data_dir=str(annotation), num_frames=4, max_sequence_length=first)
    media = VideoQAMedia(cfg, qa_family, processing)
    cut = report_lines(media, media.screen(load_qa_samples(annotation), log=lambda _: None, quarantine=[]), None)
    assert len(cut) == 1 and cut[0].startswith("long conversations: ")
    assert f"{two_rounds.key} (last 1 round(s))" in cut[0]
    assert f"do not fit --max_sequence_length {first} with their video tokens" in cut[0]
    media = VideoQAMedia(dataclasses.replace(cfg, max_sequence_length=whole + 1000), qa_family, processing)
    assert report_lines(media, media.screen(load_qa_samples(annotation), log=lambda _: None, quarantine=[]),
                        None) == []


def test_check_data_judges_at_the_size_the_run_would_use(tiny_dit, shape_classes, capsys):
    """No --resolution: check-data resolves the model's defaults as the run does (the tiny DiT's native size),
    instead of judging every image against the schema's 1024 px."""
    args = ["check-data", "--family", "dit", "--pretrained_model_name_or_path", str(tiny_dit),
            "--train_data_dir", str(shape_classes)]
    code, out = _run_cli(args, capsys)
    assert code == 0, out
    assert "upscaled" not in out and "1024" not in out
    code, out = _run_cli(args + ["--resolution", "128"], capsys)  # a flag still wins
    assert "upscaled" in out


def test_check_video_samples_decodes_images_as_one_frame_clips(tmp_path):
    pytest.importorskip("av")
    from dit_lora.data.preflight import BLOCK, OK, WARN, check_video_samples
    from dit_lora.data.video import VideoSample
    from dit_lora.data.synthetic.clips import write_corrupt_clip, write_moving_square_clip

    Image.new("RGB", (128, 64), (10, 200, 30)).save(tmp_path / "wide.png")
    Image.new("RGB", (16, 16), (10, 200, 30)).save(tmp_path / "small.jpg")
    write_corrupt_clip(tmp_path / "broken.png")
    write_moving_square_clip(tmp_path / "clip.mp4", num_frames=5, size=32)
    names = ["wide.png", "small.jpg", "broken.png", "clip.mp4"]
    samples = [VideoSample(key=n, caption="c", path=str(tmp_path / n)) for n in names]
    rows, usable = check_video_samples(samples, buckets=[(5, 32, 64), (5, 32, 32)], num_workers=1)
    status = {r.key: (r.status, r.problem) for r in rows}
    assert status["wide.png"] == (OK, "")
    assert status["small.jpg"] == (WARN, "16x16 is smaller than its 1x32x32 bucket; it is upscaled (x2.00)")
    assert status["broken.png"] == (BLOCK, "not a readable image (corrupt, or not an image despite its extension)")
    assert status["clip.mp4"] == (OK, "")
    # Each row holds its bucket (height, width) and the share cropped: the report's columns, counted as clips.
    buckets = {r.key: (r.bucket, r.cropped, r.noun) for r in rows}
    assert buckets["wide.png"] == ((32, 64), 0.0, "clip") and buckets["clip.mp4"] == ((32, 32), 0.0, "clip")
    assert {s.key: s.bucket for s in usable} == {"wide.png": (1, 32, 64), "small.jpg": (1, 32, 32),
                                                "clip.mp4": (5, 32, 32)}


def test_check_video_samples_blocks_an_image_that_fits_no_bucket(tmp_path):
    """An image with no one-frame bucket given (``image_buckets=[]``) is a blocking row, not a TypeError from
    unpacking the None that ``choose_bucket`` returns."""
    pytest.importorskip("av")
    from dit_lora.data.preflight import BLOCK, check_video_samples
    from dit_lora.data.video import VideoSample

    Image.new("RGB", (64, 32), (10, 200, 30)).save(tmp_path / "still.png")
    samples = [VideoSample(key="still.png", caption="c", path=str(tmp_path / "still.png"))]
    rows, usable = check_video_samples(samples, buckets=[(5, 32, 64)], image_buckets=[], num_workers=1)
    assert [(r.status, r.problem) for r in rows] == [(BLOCK, "1 frame(s) of 64x32 fit none of the buckets")]
    assert usable == []


def _mixed_folder(root):
    """A 200x50, a 50x200, a 3:1, a 3:2 and two squares, each with a caption."""
    sizes = {"wide.png": (200, 50), "tall.png": (50, 200), "three.png": (192, 64), "land.png": (96, 64),
             "sq0.png": (64, 64), "sq1.png": (80, 80)}
    root.mkdir(parents=True)
    for name, size in sizes.items():
        Image.new("RGB", size, (120, 30, 200)).save(root / name)
        (root / name).with_suffix(".txt").write_text(name)
    return sizes


def test_check_data_names_each_image_bucket_and_crop_and_warns_above_the_threshold(tmp_path, capsys):
    from dit_lora.data.aspect import CROP_WARNING, aspect_buckets, bucket_of, format_size

    sizes = _mixed_folder(tmp_path / "mixed")
    code, out = _run_cli(["check-data", "--family", "sana", "--train_data_dir", str(tmp_path / "mixed"),
                          "--resolution", "64", "--all"], capsys)
    assert code == 0, out  # a crop warns, it never blocks
    header = next(line for line in out.splitlines() if line.startswith("status"))
    assert header.split()[:6] == ["status", "sample", "check", "bucket", "cropped", "problem"]
    rows = {line.split()[1]: line for line in out.splitlines() if line.split()[:1] in (["ok"], ["WARN"])}
    buckets = aspect_buckets(64 * 64, 32)  # Sana's stride: DC-AE 32 x patch 1
    for name, (width, height) in sizes.items():
        bucket, share = bucket_of(width, height, buckets)
        assert rows[name].split()[3:5] == [format_size(bucket), f"{share:.0%}"]
        assert rows[name].startswith("WARN") == (share > CROP_WARNING), rows[name]
    assert "cuts" in rows["land.png"] and rows["sq0.png"].startswith("ok")
    summary = out[out.index("6 sample(s):"):]
    assert "images per bucket, as training would batch them:" in summary
    table = [line.split() for line in summary.splitlines()]
    counts = Counter(format_size(bucket_of(w, h, buckets)[0]) for w, h in sizes.values())
    for bucket, n in counts.items():
        assert [bucket, str(n), f"{n / len(sizes):.1%}"] in table
    assert len(counts) >= 3


def test_check_data_square_mode_crops_to_the_square(tmp_path, capsys):
    _mixed_folder(tmp_path / "mixed")
    code, out = _run_cli(["check-data", "--family", "sana", "--train_data_dir", str(tmp_path / "mixed"),
                          "--resolution", "64", "--aspect_buckets", "square"], capsys)
    assert code == 0 and "--aspect_buckets square: every image cropped to 64x64" in out
    assert [line.split() for line in out.splitlines() if line.strip().startswith("64x64")] == [["64x64", "6", "100.0%"]]
    assert "WARN" in out and "cuts 75% of its area" in out  # the 200 x 50 image in the square
    code, out = _run_cli(["check-data", "--family", "sana", "--train_data_dir", str(tmp_path / "mixed"),
                          "--resolution", "64", "--aspect_buckets", "100x64"], capsys)
    assert code == 2 and "--aspect_buckets 96x64" in out and "Traceback" not in out


def test_check_sample_bucket_is_trainings_choice(tmp_path):
    from dit_lora.data.aspect import aspect_buckets, sample_bucket
    from dit_lora.data.preflight import check_sample, format_table, summarize

    _mixed_folder(tmp_path / "mixed")
    buckets = aspect_buckets(64 * 64, 32)
    for sample in load_samples(train_data_dir=tmp_path / "mixed"):
        row = check_sample(sample, resolution=64, buckets=buckets)
        assert (row.bucket, row.cropped) == sample_bucket(sample, buckets)
    plain = check_sample(sample, resolution=64)  # without buckets: the square, no bucket columns
    assert plain.bucket is None and "bucket" not in format_table([plain], show_ok=True)
    assert summarize([plain]).count("\n") == 0


def test_check_video_samples_warns_about_a_clip_cropped_beyond_the_threshold(tmp_path):
    """The bucket is training's own choice; a clip losing over CROP_WARNING of its picture to it warns."""
    from dit_lora.data.aspect import CROP_WARNING
    from dit_lora.data.preflight import check_video_samples, format_table, summarize
    from dit_lora.data.video import VideoSample
    from dit_lora.data.preflight import OK, WARN

    Image.new("RGB", (128, 32), (10, 200, 30)).save(tmp_path / "pano.png")
    Image.new("RGB", (64, 32), (10, 200, 30)).save(tmp_path / "wide.png")
    samples = [VideoSample(key=n, caption="c", path=str(tmp_path / n)) for n in ("pano.png", "wide.png")]
    rows, usable = check_video_samples(samples, buckets=[(5, 32, 64)], num_workers=1)
    status = {r.key: (r.status, r.problem) for r in rows}
    assert CROP_WARNING < 0.5
    assert status["pano.png"] == (WARN, "the crop into its 1x32x64 bucket cuts 50% of its 128x32 picture")
    assert status["wide.png"] == (OK, "")
    assert [s.source_size for s in usable] == [(32, 128), (32, 64)]
    table = format_table(rows, show_ok=True)
    assert "bucket  cropped" in table and any(line.startswith("ok ") and "64x32" in line and " 0%" in line
                                              for line in table.splitlines())
    summary = summarize(rows)
    assert "clips per bucket, as training would batch them:" in summary
    assert "1 of 2 clip(s) lose more than 10% of their area to the crop" in summary


def test_check_data_decodes_a_kohya_repeated_image_once(tmp_path, monkeypatch):
    """A `4_sks/` folder lists its image 4 times: check-data decodes the file once and shows it in one row, with its
    4 repeats (not four identical rows)."""
    from dit_lora.data import preflight

    (tmp_path / "4_sks").mkdir()
    Image.new("RGB", (48, 40), (200, 30, 30)).save(tmp_path / "4_sks" / "a.png")
    Image.new("RGB", (40, 48), (30, 30, 200)).save(tmp_path / "b.png")
    (tmp_path / "b.txt").write_text("a blue square")
    samples = load_samples(train_data_dir=tmp_path, log=lambda _: None)
    assert len(samples) == 5
    checked: list[str] = []
    real = preflight.check_sample
    monkeypatch.setattr(preflight, "check_sample", lambda s, **kw: checked.append(s.key) or real(s, **kw))
    rows = preflight.check_samples(samples, resolution=32, num_workers=1)
    assert sorted(checked) == ["4_sks/a.png", "b.png"]
    assert [(r.key, r.repeats) for r in rows] == [("4_sks/a.png", 4), ("b.png", 1)]
    table = preflight.format_table(rows, show_ok=True).splitlines()
    assert "repeats" in table[0] and len(table) == 4  # header, rule, one row per file
    assert table[2].split() == ["ok", "4_sks/a.png", "sample", "4"] and table[3].split() == ["ok", "b.png", "sample", "1"]
    assert preflight.summarize(rows).startswith("2 file(s) (5 samples per epoch with repeats): 2 ok,")
