"""Flags of other trainers that users bring along, and what dit-lora calls them.

:data:`PEER_FLAGS` maps a well-known option name of diffusers' training examples, kohya's sd-scripts and
musubi-tuner, SimpleTuner and ai-toolkit to the dit-lora option of the same meaning (or None: none) with a note.
The unknown-option message (:func:`peer_hint`) reads it before any "did you mean" guess, so a flag of another
trainer is never matched to a look-alike with another meaning (``--instance_prompt`` is not
``--validation_prompt``). ``docs/guides/migrating.md`` lists the same mappings with their sources; a test keeps
every dit-lora option both name a real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Peer:
    """Another trainer's option: who uses it, the dit-lora option of the same meaning (None: none), a note."""

    trainers: str
    option: str | None
    note: str = ""  #: what to know beside the counterpart, or why there is none
    fallback: str = ""  #: said while ``option`` is not (yet) an option of the run


_DATA = "one folder of images with captions (--train_data_dir) or a dataset (--dataset_name)"

#: another trainer's option name -> its dit-lora counterpart (only names that are not dit-lora options themselves)
PEER_FLAGS: dict[str, Peer] = {
    # diffusers' training examples (train_dreambooth_lora_sana.py, train_text_to_image_lora.py, ...)
    "class_data_dir": Peer("diffusers DreamBooth", None, "dit-lora has no prior preservation"),
    "class_prompt": Peer("diffusers DreamBooth", None, "dit-lora has no prior preservation"),
    "with_prior_preservation": Peer("diffusers DreamBooth", None, "dit-lora has no prior preservation"),
    "num_class_images": Peer("diffusers DreamBooth", None, "dit-lora has no prior preservation"),
    "prior_loss_weight": Peer("diffusers DreamBooth", None, "dit-lora has no prior preservation"),
    "validation_epochs": Peer("diffusers", "validation_steps", "dit-lora counts validation in updates, not epochs"),
    "train_text_encoder": Peer("diffusers", None, "the text encoder stays frozen; LoRA goes on the transformer"),
    "optimizer": Peer("diffusers, kohya", None, "dit-lora trains with AdamW (--use_8bit_adam for bitsandbytes')"),
    "repeats": Peer("diffusers DreamBooth", None, "each epoch sees every sample once; raise --num_train_epochs"),
    # kohya sd-scripts / musubi-tuner
    "network_dim": Peer("kohya sd-scripts, musubi-tuner", "rank"),
    "network_alpha": Peer("kohya sd-scripts, musubi-tuner", "lora_alpha"),
    "network_dropout": Peer("kohya sd-scripts, musubi-tuner", "lora_dropout"),
    "network_module": Peer("kohya sd-scripts, musubi-tuner", None, "dit-lora always trains a PEFT LoRA"),
    "dataset_config": Peer("kohya sd-scripts, musubi-tuner", None,
                           f"no TOML dataset config: {_DATA} per run (docs/guides/migrating.md)"),
    "enable_bucket": Peer("kohya sd-scripts", "aspect_buckets",
                          fallback="images are resized and cropped to the --resolution square"),
    "max_train_epochs": Peer("kohya sd-scripts, musubi-tuner", "num_train_epochs"),
    "output_name": Peer("kohya sd-scripts, musubi-tuner", None,
                        "the adapter is always pytorch_lora_weights.safetensors in --output_dir: name the folder"),
    "save_every_n_steps": Peer("kohya sd-scripts, musubi-tuner", "checkpointing_steps"),
    "save_every_n_epochs": Peer("kohya sd-scripts, musubi-tuner", None,
                                "checkpoints are counted in updates: --checkpointing_steps"),
    "save_last_n_steps": Peer("kohya sd-scripts", "checkpoints_total_limit", "dit-lora keeps the last N checkpoints"),
    "resume": Peer("kohya sd-scripts, musubi-tuner", "resume_from_checkpoint"),
    "max_data_loader_n_workers": Peer("kohya sd-scripts, musubi-tuner", "dataloader_num_workers"),
    "sample_every_n_steps": Peer("kohya sd-scripts, musubi-tuner", "validation_steps"),
    "sample_prompts": Peer("kohya sd-scripts, musubi-tuner", "validation_prompt", "one prompt, not a file"),
    "blocks_to_swap": Peer("musubi-tuner", None, "block swap is planned (issue 35); see dit-lora plan for memory"),
    "fp8_base": Peer("musubi-tuner", None, "fp8 base weights are planned (issue 35); --quantize_base nf4 or int8 "
                     "loads the transformer quantized today"),
    "discrete_flow_shift": Peer("musubi-tuner", "flow_shift"),
    "unet_lr": Peer("kohya sd-scripts", "learning_rate"),
    "save_model_as": Peer("kohya sd-scripts, musubi-tuner", None, "dit-lora writes safetensors only"),
    # SimpleTuner
    "lora_rank": Peer("SimpleTuner", "rank"),
    "model_family": Peer("SimpleTuner", "family"),
    "data_backend_config": Peer("SimpleTuner", None, f"no data backend JSON: {_DATA} per run"),
    "validation_num_inference_steps": Peer("SimpleTuner", "validation_inference_steps"),
    "validation_guidance": Peer("SimpleTuner", "validation_guidance_scale"),
    "lr": Peer("ai-toolkit", "learning_rate"),
}


def peer_hint(name: str, valid: Iterable[str]) -> str | None:
    """The sentence for ``name``, another trainer's option: dit-lora's counterpart (in ``valid``, the run's options;
    or another family's), or that there is none and what to do; None when ``name`` is no known peer option."""
    name = name.lstrip("-")
    peer = PEER_FLAGS.get(name)
    if peer is None:
        return None
    said = f" ({peer.note})" if peer.note else ""
    if peer.option is not None and peer.option in set(valid):
        return f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}{said}."
    from .owners import owners

    holders = owners(peer.option) if peer.option else []
    if holders:
        return (f"--{name} comes from {peer.trainers}; dit-lora's option is --{peer.option}, an option of "
                f"--family {' or '.join(holders)}{said}.")
    return f"--{name} ({peer.trainers}) has no dit-lora equivalent: {peer.fallback or peer.note}."
