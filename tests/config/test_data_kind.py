"""config/data_kind.py: video-LLM data recognised from its first entry, and the paragraph a run without a family
gets for it."""

import json

import pytest

from dit_lora.config.data_kind import video_llm_data, video_llm_data_message


@pytest.mark.parametrize(
    "entry,kind",
    [
        ({"messages": [{"role": "user", "content": "<video>Hi"}], "videos": ["a.mp4"]}, "LLaMA-Factory entries"),
        ({"conversations": [{"from": "human", "value": "<video>Hi"}], "videos": ["a.mp4"]}, "LLaMA-Factory entries"),
        ({"instruction": "<video>What?", "output": "A cat.", "videos": ["a.mp4"]}, "LLaMA-Factory entries"),
        ({"video": "a.mp4", "QA": [{"q": "What?", "a": "A cat."}]}, "VideoChat2/chat annotations"),
        ({"file_name": "a.png", "text": "a cat"}, None),
    ],
)
def test_a_json_file_is_named_by_its_first_entry(tmp_path, entry, kind):
    for suffix, text in ((".json", json.dumps([entry, {"broken": True}])), (".jsonl", json.dumps(entry) + "\n")):
        path = tmp_path / f"data{suffix}"
        path.write_text(text)
        found = video_llm_data(str(path))
        assert (found is None) if kind is None else found.startswith(kind), (suffix, found)


def test_a_dataset_info_folder_or_file_is_llamafactory_s_and_an_image_folder_is_none(tmp_path):
    (tmp_path / "images").mkdir()
    assert video_llm_data(str(tmp_path / "images")) is None and video_llm_data(None) is None
    (tmp_path / "dataset_info.json").write_text("{}")
    assert video_llm_data(str(tmp_path)) == "LLaMA-Factory's dataset_info.json"
    assert video_llm_data(str(tmp_path / "dataset_info.json")) == "LLaMA-Factory's dataset_info.json"


def test_the_paragraph_names_the_data_the_flag_and_both_fixes(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"messages": [], "videos": ["a.mp4"]}]))
    text = video_llm_data_message(str(path), "--validation_data_dir")
    assert text is not None and "\n" not in text and text.startswith(f"--validation_data_dir {path} holds video-LLM")
    assert "--pretrained_model_name_or_path" in text and "--family NAME" in text
    assert video_llm_data_message(str(tmp_path / "missing.json")) is None
