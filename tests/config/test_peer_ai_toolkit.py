"""config/peer_ai_toolkit.py: ai-toolkit's nested job YAML given as --config is named as such, with its main keys'
dit-lora options."""

from __future__ import annotations

import pytest

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError


_AI_TOOLKIT_JOB = """\
job: extension
config:
  name: my_lora
  process:
    - type: sd_trainer
      training_folder: output
      network: {type: lora, linear: 16, linear_alpha: 16}
      datasets:
        - folder_path: /data/dogs
          caption_ext: txt
          resolution: [512, 768]
      train: {batch_size: 1, steps: 2000, lr: 1.0e-4}
      model: {name_or_path: Efficient-Large-Model/Sana_600M_512px_diffusers}
"""


@pytest.mark.parametrize("how", ["train", "load_yaml"])
def test_an_ai_toolkit_job_file_is_named_as_such_with_its_key_mapping(tmp_path, how):
    """ai-toolkit's nested job YAML: one paragraph saying what it is, that dit-lora's YAML is flat, the main keys'
    counterparts and the migration page (it said "Unknown option `job`")."""
    from dit_lora.config.config_file import load_yaml

    config = tmp_path / "aitk.yaml"
    config.write_text(_AI_TOOLKIT_JOB)
    with pytest.raises(UserError) as err:
        parse_config(["--config", str(config)]) if how == "train" else load_yaml(config)
    text = str(err.value)
    assert "ai-toolkit config" in text and "flat" in text and "docs/guides/migrating.md" in text
    for pair in ("network.linear -> `rank`", "train.lr -> `learning_rate`", "datasets[].folder_path -> "
                 "`train_data_dir`", "model.name_or_path -> `pretrained_model_name_or_path`"):
        assert pair in text, pair
    assert "Unknown option" not in text and "\n" not in text


def test_only_a_job_with_a_process_list_is_ai_toolkits():
    from dit_lora.config.peer_ai_toolkit import is_ai_toolkit

    assert is_ai_toolkit({"job": "extension", "config": {"process": []}})
    assert is_ai_toolkit({"config": {"name": "x", "process": [{"type": "sd_trainer"}]}})
    assert not is_ai_toolkit({"job": "extension"}) and not is_ai_toolkit({"config": {"process": {}}})
    assert not is_ai_toolkit({"rank": 8, "family": "sana"})
