"""A video LLM named by its Hub id works as a folder does (issue 45): train, check-data and plan read the Hub cache's
snapshot of it (offline here: a hand-made cache holding the tiny LLaVA-NeXT-Video), and an id that cannot be had
stops each command in one paragraph with exit 2, before a run prints its defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_lora.commands.cli import main
from hub_cache import put_in_cache, use_cache

REPO = "tiny-org/tiny-llava-next-video"


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    return make_qa_dataset(tmp_path_factory.mktemp("qa") / "chat", n=2, num_frames=4, size=32, layout="chat", seed=0)


@pytest.fixture
def hub(tiny_path, tmp_path, monkeypatch) -> Path:
    """Offline, with the tiny model in the Hub cache as ``REPO``; returns its snapshot folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    use_cache(monkeypatch, tmp_path / "hub")
    return put_in_cache(tmp_path / "hub", REPO, tiny_path)


def _run(argv, capsys) -> tuple[int, str, str]:
    from dit_lora.training import signals

    try:
        with pytest.raises(SystemExit) as caught:
            main(argv)
    finally:
        signals.release()  # `train` holds SIGTERM/SIGINT from its first line
    captured = capsys.readouterr()
    return caught.value.code, captured.out, " ".join(captured.err.split())


def _check_data(model: str, clips: Path, capsys, *extra: str):
    return _run(["check-data", "--pretrained_model_name_or_path", model, "--train_data_dir", str(clips),
                 "--num_frames", "2", *extra], capsys)


def test_check_data_reads_a_cached_hub_id_as_its_folder(hub, clips, capsys):
    code, out, err = _check_data(REPO, clips, capsys)
    assert code == 0, err
    assert "each conversation fitted to --max_sequence_length" in out and "2 sample(s): 2 ok" in out


def test_check_data_with_an_id_it_cannot_have_is_one_paragraph_and_exit_2(hub, clips, capsys):
    code, out, err = _check_data("tiny-org/not-downloaded", clips, capsys, "--family", "llava_next_video")
    assert code == 2, err
    assert "Traceback" not in err and "`tiny-org/not-downloaded`" in err and "HF_HUB_OFFLINE=1" in err
    assert "hf download tiny-org/not-downloaded" in err


def test_train_with_an_id_it_cannot_have_stops_before_the_defaults(hub, clips, tmp_path, capsys):
    code, out, err = _run(["train", "--family", "llava_next_video", "--pretrained_model_name_or_path",
                           "tiny-org/not-downloaded", "--train_data_dir", str(clips), "--output_dir",
                           str(tmp_path / "out"), "--num_frames", "2", "--skip_doctor", "true"], capsys)
    assert code == 2, err
    assert "`tiny-org/not-downloaded`" in err and "hf download tiny-org/not-downloaded" in err
    assert "defaults:" not in out + err and "memory plan" not in out + err and "Traceback" not in err


def test_plan_of_a_hub_id_reads_the_same_preprocessing_as_its_folder(hub):
    """Not the spec's defaults (224 px, what a Hub id was planned with before): the snapshot's own files."""
    from dit_lora.config import TrainConfig
    from dit_lora.families.videollm.plan import VideoLLMPlan
    from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec

    plan = VideoLLMPlan(LlavaNextVideoSpec())

    def preprocessing(model: str) -> dict:
        cfg = TrainConfig.for_family(family="llava_next_video", pretrained_model_name_or_path=model)
        return plan.preprocessing(cfg.model, None)

    by_folder = preprocessing(str(hub))
    assert preprocessing(REPO) == by_folder
    assert by_folder != plan.preprocessing(TrainConfig.for_family(family="llava_next_video").model, None)


@pytest.mark.slow
def test_a_hub_id_trains_and_the_adapter_names_the_id(hub, clips, tmp_path):
    from videollm_e2e import train_in_process

    out = tmp_path / "out"
    summary, _ = train_in_process(["--family", "llava_next_video", "--pretrained_model_name_or_path", REPO, "--train_data_dir", str(clips),
                                   "--output_dir", str(out), "--num_frames", "2", "--rank", "4",
                                   "--max_train_steps", "1", "--report_to", "none", "--skip_doctor", "true",
                                   "--attention_canary", "false"])
    assert summary is not None
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == REPO  # the id, not the cache's folder


def test_a_launch_s_other_ranks_take_the_main_process_s_download(tmp_path, monkeypatch):
    """Rank 1 of 2 does not download: it waits for rank 0's folder (shared through ``main_process_check``), then
    every later read of the id in that process is that folder."""
    import accelerate
    import huggingface_hub

    from dit_lora.config.schema import ModelOptions
    from dit_lora.core import collective
    from dit_lora.families.videollm.architecture import model_folder
    from dit_lora.modelfiles import hub_snapshot

    class Rank1:
        is_main_process, num_processes, process_index = False, 2, 1

        def __init__(self, **kwargs):
            pass

    def no_download(*args, **kwargs):
        raise AssertionError("a rank other than the main one downloaded")

    folder = tmp_path / "snapshot"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(accelerate, "PartialState", Rank1)
    monkeypatch.setattr(collective, "share", lambda state, value: (None, folder))  # rank 0's outcome
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    monkeypatch.setattr(hub_snapshot, "_RESOLVED", {})
    model = ModelOptions(family="llava_next_video", pretrained_model_name_or_path=REPO)
    assert model_folder(model, weights=True) == folder
    monkeypatch.setenv("WORLD_SIZE", "1")  # the model's later reads (the processing, the adapter's reload)
    assert model_folder(model, weights=False) == model_folder(model, weights=True) == folder
