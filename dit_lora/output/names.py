"""File names a finished run leaves in output_dir (import-light: the CLI reads them without torch)."""

ADAPTER_FILE = "pytorch_lora_weights.safetensors"
BACKBONE_FILE = "dit_lora_backbone.safetensors"
SUMMARY_FILE = "train_summary.json"
LOSS_CURVE_FILE = "loss_curve.png"
MODEL_CARD_FILE = "README.md"
