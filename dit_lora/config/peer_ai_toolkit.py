"""ai-toolkit's job file given as a run config: recognised and refused with the counterparts of its main keys.

ai-toolkit nests a run in ``job:``/``config: {process: [...]}``; dit-lora's YAML is flat, one option per line. Its
``datasets:`` lists are read as they are by ``--dataset_config`` (:mod:`.peer_datasets`); the run's own keys map to
dit-lora's options through :data:`.peers.PEER_FLAGS`, which the refusal quotes.
"""

from __future__ import annotations

from pathlib import Path

from dit_lora.config.peers import PEER_FLAGS


def is_ai_toolkit(data: dict) -> bool:
    """An ai-toolkit job file: ``job:``/``config:`` at the top, ``config: {process: [...]}`` (no dit-lora option
    is called ``job``, ``config`` is a flag, never a YAML key)."""
    config = data.get("config")
    return ("job" in data or "config" in data) and isinstance(config, dict) and isinstance(config.get("process"), list)


#: ai-toolkit's main keys (their place in its nested file) and dit-lora's flat option, from :mod:`.peers`
_AI_TOOLKIT_KEYS = (
    "model.name_or_path",
    "datasets[].folder_path",
    "datasets[].caption_ext",
    "network.linear",
    "network.linear_alpha",
    "train.lr",
    "train.steps",
    "train.batch_size",
    "train.dtype",
    "save.save_every",
    "training_folder",
)


def ai_toolkit_message(path: Path) -> str:
    """The paragraph for an ai-toolkit job YAML given as a dit-lora ``--config``: the shape, the main keys'
    counterparts (:data:`.peers.PEER_FLAGS`), the migration page."""
    pairs = []
    for where in _AI_TOOLKIT_KEYS:
        peer = PEER_FLAGS.get(where.rsplit(".", 1)[-1])
        if peer is not None and peer.option:
            pairs.append(f"{where} -> `{peer.option}`")
    return (
        f"The config file `{path}` is an ai-toolkit config (top-level `job`/`config` with a `process` list): "
        "dit-lora's YAML is flat, one `option: value` per line at the top level, the same names as its --flags. "
        f"Rewrite it as such; its main keys map as {', '.join(pairs)}. Its `datasets:` are read as they are with "
        f"--dataset_config {path}. docs/guides/migrating.md lists every ai-toolkit key and its dit-lora option (or "
        "that there is none)."
    )
