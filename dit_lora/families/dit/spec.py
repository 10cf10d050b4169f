"""Class-conditional DiT (diffusers ``DiTTransformer2DModel`` / ``DiTPipeline``), OpenDiT-style: its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults,
square images, the trained class tables, demo), ``encoders.py`` (VAE latents, class ids; the label map built from
the samples), ``loss.py``, ``samples.py``, ``plan.py``, ``adapter.py`` (saving, fitting a pipeline, loading back,
the model card), ``embedding.py`` (resizing the class tables), ``classes.py`` (the pretrained class names),
``kernels.py`` (fused-kernel patch points); what a run decides is its ``DiTRun`` (``state.py``) in ``comps.state``.

Labels. The caption of a sample is its class name: the first-level sub-folder of an image in a
folder without metadata (``root/<class>/<image>``), the caption column of a metadata file, or a
``datasets`` ``ClassLabel`` column (``--caption_column label``) mapped to its names. The class list
is the sorted set of names; class i is the i-th name (so sorted ImageNet wnid folders get the
standard ImageNet indices). It is written to ``dit_lora_classes.json`` and is part of the cache key.

Class count. ImageNet DiTs embed 1000 classes plus one null class (the last row of each block's
``LabelEmbedding`` table, used for classifier-free guidance; ``DiTPipeline`` feeds it as id 1000).
A dataset with another class count stops with a message unless ``--num_classes N`` is given; then
every block's table is resized to N + 1 rows: the null row is copied to the end, the N class rows
are drawn from a normal with the per-dimension mean and std of the old class rows (each new class
starts as a "typical" class embedding; same seed for every block, so tables that were copies stay
copies), and the tables are trained in fp32 at ``--backbone_learning_rate`` through the backbone
machinery (``--train_backbone`` gets the table's pattern) and saved to
``dit_lora_backbone.safetensors``. Because ``DiTPipeline`` hard-codes 1000 as the null id, a resized
embedding maps id 1000 to its own null row (a forward pre-hook), so the stock pipeline's guidance works.

Loss. Epsilon-prediction DDPM as DiT trains it: t uniform in [0, num_train_timesteps), x_t from
``DDPMScheduler.add_noise`` with the checkpoint's betas (DiT: linear 1e-4..0.02, 1000 steps), class
labels dropped to the null class with DiT's probability (0.1) for guidance, MSE between the
predicted and the true noise. With a learned sigma (``out_channels == 2 * in_channels``) the output
is split as ``DiTPipeline`` does and only the epsilon half enters the loss: the variance half gets
no gradient (DiT's VLB term for it is not implemented), and inference discards it as diffusers does.

Precision. The transformer loads in the run's weight dtype (bf16 by default), LoRA and the class
tables train in fp32, the ``AutoencoderKL`` stays fp32; latents are the VAE posterior mean times
``scaling_factor`` (0.18215 for DiT), so the cache is deterministic.

Saving. ``DiTPipeline`` has no LoRA loader and ``DiTTransformer2DModel`` no PEFT mixin, so the adapter
is saved in PEFT's own format (``adapter_model.safetensors`` + ``adapter_config.json``), next to the
class tables and the label map; ``dit_lora.load_adapter(pipe, output_dir)`` restores all three.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.adapter import KitAdapter
from dit_lora.families.diffusion.builder import PatchPoints, diffusion_spec
from dit_lora.families.diffusion.components import DiffusionCaptions
from dit_lora.families.dit.adapter import DiTAdapterExtras, DiTCard, DiTFitting
from dit_lora.families.dit.encoders import DiTEncoders, DiTSetup
from dit_lora.families.dit.kernels import patch_points
from dit_lora.families.dit.loss import DiTLoss
from dit_lora.families.dit.model import GRID, PARTS, DiTDemo, DiTModel, DiTTrainables
from dit_lora.families.dit.plan import DiTPlan
from dit_lora.families.dit.samples import DiTSamples
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
    """A new DiT spec: class-conditional DiT (facebook/DiT-XL-2-256/512 and the tiny random variants of the tests)."""
    fitting = DiTFitting()
    return diffusion_spec(
        name,
        INFO,
        model=DiTModel(INFO),
        encoders=DiTEncoders(),
        loss=DiTLoss,
        samples=DiTSamples,
        plan=DiTPlan,
        adapter=KitAdapter(INFO, fp32_vae="AutoencoderKL", fitting=fitting),  # PEFT's format: INFO's file name
        captions=DiffusionCaptions(caption_source="class_folders"),
        image_buckets=GRID,
        kernels=PatchPoints(patch_points),
        card=DiTCard(INFO),
        defaults=GRID,
        notes=None,  # nothing to say before training: the spec declares no RunNotes capability, as before
        setup=DiTSetup(),
        trainables=DiTTrainables(),
        precision=PARTS.precision,
        demo=DiTDemo(),
        fitting=fitting,
        adapter_extras=DiTAdapterExtras(),
    )
