"""families/zimage/__init__.py: the registry entry (name and alias, options, catalogue, demo, recipe, guide)."""

from dit_lora.config import parse_config
from dit_lora.families.zimage import ENTRY
from dit_lora.registry import available, canonical_name, recipe_script


def test_entry_and_factory():
    assert ENTRY.names == ("zimage",) and ENTRY.aliases == ("z-image",) and ENTRY.demo_configs == ("zimage/demo.yaml",)
    assert ENTRY.recipe_script == "recipes/zimage_lora.py" and recipe_script("zimage").endswith("zimage_lora.py")
    assert ENTRY.build("zimage").name == "zimage" and ENTRY.docs == "docs/guides/zimage.md"


def test_z_image_is_read_as_zimage(tmp_path):
    assert canonical_name("z-image") == "zimage" and "z-image" not in available()
    base = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]
    assert parse_config([*base, "--family", "z-image"]).model.family == "zimage"
    config = tmp_path / "run.yaml"
    config.write_text("family: z-image\ntimestep_sampling: logit_normal\n")
    cfg = parse_config([*base, "--config", str(config)])
    assert cfg.model.family == "zimage" and cfg.family_options.timestep_sampling == "logit_normal"
