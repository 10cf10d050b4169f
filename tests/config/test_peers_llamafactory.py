"""LLaMA-Factory's options a video-LLM user brings: each one a row of the peers' table (or a same-name option), its
hint naming dit-lora's option, and the migration page's LLaMA-Factory section and data paragraph."""

from pathlib import Path

from dit_lora.config import owners
from dit_lora.config.peers import PEER_FLAGS, SAME_NAMES, peer_hint, peer_names
from dit_lora.config.peers_llamafactory import FLAGS, SOURCES, TRAINER

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "migrating.md"

#: what a LLaMA-Factory video-LLM YAML (examples/train_lora/qwen3vl_lora_sft.yaml and the video options) holds
BROUGHT = ("model_name_or_path", "dataset", "dataset_dir", "media_dir", "template", "finetuning_type", "lora_rank",
           "lora_alpha", "lora_dropout", "lora_target", "learning_rate", "num_train_epochs",
           "per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "video_fps", "video_maxlen",
           "video_max_pixels", "freeze_vision_tower", "bf16", "output_dir", "max_samples", "lr_scheduler_type",
           "warmup_ratio", "save_steps", "val_size",
           # the rest of examples/train_lora/qwen3vl_lora_sft.yaml, qwen2_5vl_lora_sft.yaml, llava1_5_lora_sft.yaml
           "image_max_pixels", "trust_remote_code", "stage", "do_train", "preprocessing_num_workers",
           "dataloader_num_workers", "overwrite_cache", "logging_steps", "plot_loss", "overwrite_output_dir",
           "save_only_model", "report_to", "ddp_timeout", "resume_from_checkpoint", "per_device_eval_batch_size",
           "eval_strategy", "eval_steps")


def test_every_option_a_video_llm_user_brings_is_in_the_llamafactory_table():
    table, same = peer_names("llamafactory"), SAME_NAMES["llamafactory"]
    for name in BROUGHT:
        assert name in table or name in same, name
    assert set(FLAGS) <= set(table) and "lora_rank" in table  # SimpleTuner's row, LLaMA-Factory's too
    assert all(TRAINER in PEER_FLAGS[name].trainers for name in table)
    assert all(key in SOURCES for _, _, keys in FLAGS.values() for key in keys)


def test_hints_name_dit_lora_s_option_for_llamafactory_s():
    common = sorted(owners.common_names())
    video = sorted(owners.common_names() | {f.name for f in owners.family_fields("qwen3_vl")})
    assert "dit-lora's option is --dataset_info_name" in peer_hint("dataset", video)
    assert "--family llava_next_video or qwen2_5_vl" in peer_hint("media_dir", common)
    assert "dit-lora's option is --video_folder" in peer_hint("media_dir", video)
    assert "dit-lora's option is --max_sequence_length" in peer_hint("cutoff_len", common)
    assert "dit-lora's option is --num_frames" in peer_hint("video_maxlen", video)
    assert "inverted" in peer_hint("freeze_vision_tower", video)
    assert "no dit-lora equivalent" in peer_hint("template", common)
    # LLaMA-Factory's example keys: their meaning here, never an unrelated option's name guessed
    for key, guess in (("trust_remote_code", "first_frame_noise"), ("ddp_timeout", "noised_image_dropout"),
                       ("do_train", "max_train_steps"), ("plot_loss", "report_to"), ("logging_steps", "logging_dir"),
                       ("preprocessing_num_workers", "Did you mean"), ("save_only_model", "")):
        hint = peer_hint(key, video)
        assert hint and "Did you mean" not in hint and (not guess or f"`{guess}`" not in hint), (key, hint)


def test_the_migration_page_has_the_llamafactory_section_and_its_data_paragraph():
    text = PAGE.read_text(encoding="utf-8")
    assert "### LLaMA-Factory (YAML keys; the video LLMs)" in text
    assert "**LLaMA-Factory's video data.**" in text and "--dataset_info_name NAME" in text
