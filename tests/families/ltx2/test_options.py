"""families/ltx2/options.py: the sound's switch and its loss weight, refused in one paragraph when wrong."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig
from dit_lora.config.parser import parse_config
from dit_lora.core.errors import UserError


def test_defaults_train_the_sound_at_weight_one():
    options = TrainConfig.for_family("ltx2").family_options
    assert options.audio == "on" and options.audio_loss_weight == 1.0


@pytest.mark.parametrize("flags, says", [(["--audio", "maybe"], "--audio"), (["--audio_loss_weight", "-1"], "--audio_loss_weight")])
def test_a_wrong_value_names_its_flag(flags, says, tmp_path):
    base = ["--family", "ltx2", "--pretrained_model_name_or_path", "m", "--train_data_dir", str(tmp_path)]
    parse_config([*base, "--audio", "off", "--audio_loss_weight", "0"])  # both ends of what is taken
    with pytest.raises(UserError, match=says):
        parse_config([*base, *flags])
