"""File names a finished run leaves in output_dir (import-light: the CLI reads them without torch)."""

ADAPTER_FILE = "pytorch_lora_weights.safetensors"
# PEFT-format adapter, for pipelines without a LoRA loader (DiTPipeline): weights + LoraConfig.
PEFT_ADAPTER_FILE = "adapter_model.safetensors"
PEFT_CONFIG_FILE = "adapter_config.json"
# Any of these marks a finished run's adapter.
ADAPTER_FILES = (ADAPTER_FILE, PEFT_ADAPTER_FILE)
# DiT: the trained class names and the class-embedding size (label map of the run).
CLASSES_FILE = "dit_lora_classes.json"
BACKBONE_FILE = "dit_lora_backbone.safetensors"
# Where a run writes several LoRA files (Wan 2.2 A14B: one per expert): each file and the keyword arguments of
# `pipe.load_lora_weights` that load it where it belongs (e.g. load_into_transformer_2).
ADAPTER_INDEX_FILE = "dit_lora_adapter_files.json"
SUMMARY_FILE = "train_summary.json"
# The image a card's snippet conditions on (an edit's image to edit, an image-to-video run's first frame): the one the
# run validated with (--validation_image, else its first sample's), written beside the adapter and pushed with it, so
# the card runs as printed from any folder, and from the Hub repo.
CARD_INPUT_FILE = "card_input.png"
LOSS_CURVE_FILE = "loss_curve.png"
MODEL_CARD_FILE = "README.md"
NONFINITE_REPORT_FILE = "nonfinite_report.json"
QUARANTINE_FILE = "quarantine.json"
PRECISION_AUDIT_FILE = "precision_audit.json"
# The file a checkpoint-<step>/ folder's save writes last: a folder without it is an incomplete (killed) save.
COMPLETE_MARKER = "dit_lora_checkpoint_complete.json"
# How messages and cards name the consumer of a `dit-lora export` format.
CONSUMER_NAMES = {"comfyui": "ComfyUI"}
