"""A catalogued checkpoint's published configs read as the memory plan reads a model folder, its transformer's
config changed (narrowed) as a test asks: ``stand_in_configs(monkeypatch, HUB_ID, num_layers=2)``."""

from __future__ import annotations


def stand_in_configs(monkeypatch, hub_id: str, transformer: dict | None = None, asked: list | None = None) -> dict:
    """Make ``catalogue.defaults.config_reader`` read ``hub_id``'s published configs with ``transformer`` over its
    ``transformer/config.json`` (the dict is read at each call: edit it to change what the plan reads); each model
    asked for is appended to ``asked``. Returns ``transformer``."""
    from dit_lora.catalogue import by_hub_id, defaults

    configs, transformer = by_hub_id(hub_id).configs, transformer if transformer is not None else {}

    def reader(model):
        if asked is not None:
            asked.append(model.pretrained_model_name_or_path)

        def read(subfolder, filename):
            found = configs.get(f"{subfolder}/{filename}")
            return {**found, **transformer} if found is not None and subfolder == "transformer" else found

        return read

    monkeypatch.setattr(defaults, "config_reader", reader)
    return transformer


def dit_reader(num_layers: int, narrow: bool):
    """A plan's reader of DiT-XL-2-256's published configs with ``num_layers`` blocks (``narrow``: 2 heads of 16, for
    speed): ``plan_run(cfg, family, dit_reader(3, narrow=True))``."""
    from dit_lora.catalogue import by_hub_id

    configs = by_hub_id("facebook/DiT-XL-2-256").configs
    changes = {"num_layers": num_layers, **({"num_attention_heads": 2, "attention_head_dim": 16} if narrow else {})}

    def read(subfolder, filename):
        found = configs.get(f"{subfolder}/{filename}")
        if found is not None and subfolder == "transformer":
            found = {**found, **changes}
        return found

    return read
