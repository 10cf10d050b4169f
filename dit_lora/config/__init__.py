"""Typed training configuration: schema, YAML/CLI parsing and static validation."""

from dit_lora.config.parser import build_argparser, load_yaml, parse_config, validate_static
from dit_lora.config.schema import TrainConfig, config_fields

__all__ = ["TrainConfig", "build_argparser", "config_fields", "load_yaml", "parse_config", "validate_static"]
