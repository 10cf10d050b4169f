"""families/dit/options.py: DiT's own flag parses into cfg.family_options."""

import pytest

from dit_lora.config import parse_config
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data", "--family", "dit"]


def test_dit_flags():
    assert parse_config(MIN).family_options.num_classes is None
    assert parse_config(MIN + ["--num_classes", "10"]).family_options.num_classes == 10
    with pytest.raises(UserError, match="--num_classes is 0; it must be an integer > 0"):
        parse_config(MIN + ["--num_classes", "0"])
