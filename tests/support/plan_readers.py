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
