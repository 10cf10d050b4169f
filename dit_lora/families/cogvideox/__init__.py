"""The cogvideox family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("cogvideox", "cogvideox_i2v"),
    options={"cogvideox": "CogVideoXOptions", "cogvideox_i2v": "CogVideoXI2VOptions"},
    pipelines={"cogvideox": ("CogVideoXPipeline",), "cogvideox_i2v": ("CogVideoXImageToVideoPipeline",)},
    demo_configs=("cogvideox/demo.yaml", "cogvideox/i2v_demo.yaml"),
)
