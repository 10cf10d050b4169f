"""Typed training configuration: schema, YAML/CLI parsing and static validation."""

from dit_lora.config.checks import validate_static
from dit_lora.config.command_line import build_argparser
from dit_lora.config.config_file import load_yaml
from dit_lora.config.parser import parse_config
from dit_lora.config.schema import TrainConfig, config_fields

__all__ = ["TrainConfig", "build_argparser", "config_fields", "load_yaml", "parse_config", "validate_static"]
