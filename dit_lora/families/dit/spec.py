"""Class-conditional DiT (diffusers ``DiTTransformer2DModel`` / ``DiTPipeline``), OpenDiT-style: its
:class:`~dit_lora.contract.spec.FamilySpec`.

Beside the standard layout, ``embedding.py`` resizes the class tables and ``classes.py`` reads the pretrained class
names; what a run decides is its ``DiTRun`` (``state.py``) in ``comps.state``.

Labels. The caption of a sample is its class name: the first-level sub-folder of an image in a
folder without metadata (``root/<class>/<image>``), the caption column of a metadata file, or a
``datasets`` ``ClassLabel`` column (``--caption_column label``) mapped to its names. The class list
is the sorted set of names; class i is the i-th name (so sorted ImageNet wnid folders get the
standard ImageNet indices). It is written to ``dit_lora_classes.json`` and is part of the cache key.

Class count. ImageNet DiTs embed 1000 classes plus one null class (the last row of each block's
``LabelEmbedding`` table, fed as id 1000 by ``DiTPipeline``'s guidance). A dataset with another class count whose
names are not the model's own (``classes.py``) stops with a message unless ``--num_classes N`` is given; then
every block's table is resized to N + 1 rows (``embedding.py``) and trained through the backbone machinery
(``model.DiTTrainables``).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.dit.adapter import DiTAdapterExtras, DiTCard, DiTFitting
from dit_lora.families.dit.encoders import DiTEncoders, DiTSetup
from dit_lora.families.dit.kernels import patch_points
from dit_lora.families.dit.loss import DiTLoss
from dit_lora.families.dit.model import DEMO, GRID, PARTS, DiTModel, DiTTrainables
from dit_lora.families.dit.plan import DiTPlan
from dit_lora.families.dit.samples import DiTSamples
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import PatchPoints, diffusion_spec
from dit_lora.kit.components import DiffusionCaptions
from dit_lora.output.names import PEFT_ADAPTER_FILE

#: what the model card, the loader and ``--compile`` say about DiT
INFO = FamilyInfo(
    pipeline_class_name="DiTPipeline",
    card_tags=("class-conditional", "diffusers", "dit", "diffusers-training"),
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    adapter_weight_name=PEFT_ADAPTER_FILE,
    repeated_block_classes=("BasicTransformerBlock",),  # DiTTransformer2DModel declares neither list
    block_lists=("transformer_blocks",),
    # DiTTransformer2DModel.forward: `self.transformer_blocks[0].norm1.emb(timestep, class_labels, ...)` after the
    # blocks (the final layer's shift and scale)
    fsdp_shared_modules=("transformer_blocks.0.norm1.emb",),
)


def dit_spec(name: str = "dit") -> FamilySpec:
    """A new DiT spec: class-conditional DiT (facebook/DiT-XL-2-256/512 and the tiny random variants of the tests);
    its parts wired by the kit's :func:`~dit_lora.kit.builder.diffusion_spec`: the class tables
    fitted before the reload (PEFT's file format: INFO's file name), class-folder captions, the size grid (also its
    default), patch points, its setup and trainables, and no notes (nothing to say before training: the spec
    declares no RunNotes capability, as before)."""
    fitting = DiTFitting()
    return diffusion_spec(
        name,
        INFO,
        model=DiTModel(INFO, PARTS),
        encoders=DiTEncoders(),
        loss=DiTLoss,
        samples=DiTSamples,
        plan=DiTPlan,
        adapter=KitAdapter(INFO, fp32_vae="AutoencoderKL", fitting=fitting),
        captions=DiffusionCaptions(caption_source="class_folders"),
        image_buckets=GRID,
        kernels=PatchPoints(patch_points),
        card=DiTCard(INFO),
        defaults=GRID,
        notes=None,
        setup=DiTSetup(),
        trainables=DiTTrainables(),
        demo=DEMO,
        fitting=fitting,
        adapter_extras=DiTAdapterExtras(),
    )
