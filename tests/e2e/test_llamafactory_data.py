"""LLaMA-Factory's video data end to end on the tiny offline models: `dit-lora check-data` on its dataset_info.json
folder for InternVL (a bare traceback before) and a literal `<video>` refused for Qwen3-VL (called ok before), then
a short Qwen3-VL training run on LLaMA-Factory's sharegpt data (refused with 'has no "video"' before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("av")

from dit_lora.commands.cli import main as cli_main  # noqa: E402
from dit_lora.families.videollm.spec import build_demo_model  # noqa: E402
from dit_lora.families.videollm.demo_clips import make_qa_dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def lf_folder(tmp_path_factory) -> Path:
    """LLaMA-Factory's video demo layout: dataset_info.json naming a sharegpt file (role/content tags, `<video>` at
    the start of the question, the clip in `videos`) of four tiny clips."""
    root = tmp_path_factory.mktemp("lfdata")
    chat = make_qa_dataset(root, n=4, num_frames=4, size=32, layout="chat", seed=1)
    entries = []
    for line in chat.read_text().splitlines():
        row = json.loads(line)
        turns = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str) else
                  next(p["text"] for p in m["content"] if p.get("type") == "text")} for m in row["messages"]]
        turns[0]["content"] = "<video>" + turns[0]["content"]
        entries.append({"messages": turns, "videos": [row["video"]]})
    chat.unlink()  # LLaMA-Factory's folder: its data file and dataset_info.json
    (root / "mllm_video_demo.json").write_text(json.dumps(entries, indent=2))
    (root / "dataset_info.json").write_text(json.dumps({"mllm_video_demo": {
        "file_name": "mllm_video_demo.json", "formatting": "sharegpt",
        "columns": {"messages": "messages", "videos": "videos"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    return root


def _run_cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out + captured.err


def test_check_data_reads_the_dataset_info_folder_and_refuses_a_literal_placeholder(lf_folder, tmp_path, capsys):
    model = build_demo_model("internvl", tmp_path / "internvl")
    code, out = _run_cli(["check-data", "--family", "internvl", "--pretrained_model_name_or_path", str(model),
                          "--train_data_dir", str(lf_folder), "--dataset_info_name", "mllm_video_demo",
                          "--num_frames", "2"], capsys)
    assert code == 0 and "Traceback" not in out, out
    assert out.count("LLaMA-Factory entries of") == 1 and ": 4 read;" in out and "4 sample(s): 4 ok" in out, out
    assert "token budget: each conversation fitted to --max_sequence_length" in out  # the model's fit, still said

    # dit-lora's own chat format with LLaMA-Factory's placeholder left in the text: refused, by sample and token.
    entry = json.loads((lf_folder / "mllm_video_demo.json").read_text())[0]
    literal = tmp_path / "literal"
    literal.mkdir()
    (literal / "chat.jsonl").write_text(json.dumps({"video": str(lf_folder / entry["videos"][0]),
                                                    "messages": entry["messages"]}))
    code, out = _run_cli(["check-data", "--family", "qwen3_vl", "--train_data_dir", str(literal / "chat.jsonl"),
                          "--video_folder", str(lf_folder)], capsys)
    assert code != 0 and "Traceback" not in out, out
    assert "chat.jsonl:1" in out and "holds `<video>` as text" in out and "--family qwen3_vl places the clip" in out


@pytest.mark.slow
def test_qwen3_vl_trains_on_llamafactory_sharegpt(lf_folder, tmp_path):
    from videollm_e2e import train_in_process

    model = build_demo_model("qwen3_vl", tmp_path / "qwen3_vl")
    args = {"family": "qwen3_vl", "pretrained_model_name_or_path": model, "train_data_dir": lf_folder,
            "output_dir": tmp_path / "out", "num_frames": 2, "rank": 4, "train_batch_size": 2, "max_train_steps": 2,
            "report_to": "none", "skip_doctor": "true", "seed": 0, "attention_canary": "false"}
    summary, _ = train_in_process([x for k, v in args.items() for x in (f"--{k}", str(v))])
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()
