"""The option sections that say what a run trains: the model and how it loads (:class:`ModelOptions`), its data
(:class:`DataOptions`; clips: :class:`VideoOptions`) and the adapter (:class:`LoraOptions`). A resume keeps their
options fixed unless one says otherwise (``SECTION_RESUME``).

Each section is a frozen dataclass of fields declared with :func:`~dit_lora.config.option.opt`, carrying its help
text in ``metadata["help"]``; ``--help``, the documentation's options reference and unknown-key suggestions are all
generated from them (:mod:`dit_lora.config.sections` lists every section in order).
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.families import RegisteredFamilies
from dit_lora.config.option import (
    DIFFUSION_FAMILIES,
    IMAGE_DEMOS,
    IMAGE_FAMILIES,
    MASKED_IMAGES,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    SIDE,
    VIDEO_FAMILIES,
    VIDEO_SIZE,
    AdapterTypes,
    Range,
    opt,
)
from dit_lora.core.errors import UserError


@dataclass(frozen=True)
class ModelOptions:
    """The model to fine-tune and how it loads."""

    family: str = opt(
        "sana",
        "Model family (its registry entry: dit_lora/families/<package>/__init__.py). `dit-lora train` reads "
        "it from the model when neither this nor the config names it.",
        choices=RegisteredFamilies(),
        section="model",
    )
    pretrained_model_name_or_path: str | None = opt(
        None, "Hub id or local folder of the diffusers pipeline to fine-tune.", section="model"
    )
    revision: str | None = opt(None, "Hub revision (branch, tag or commit) of the pretrained model.", section="model")
    variant: str | None = opt(None, "Weight variant to load, e.g. `bf16` for repos that ship one.", section="model")
    transformer_file: str | None = opt(
        None,
        "A single .safetensors file holding the transformer (original or ComfyUI key names): loaded with diffusers' from_single_file, configured by the diffusers "
        "folder or Hub id of --pretrained_model_name_or_path, which still gives the VAE, text encoder and scheduler. "
        "For the transformer classes diffusers loads from one file (each family's page says whether it has one).",
        section="model",
        applies=DIFFUSION_FAMILIES,
    )
    quantize_base: str = opt(
        "none",
        "Load the model that gets LoRA (the diffusion transformer; a video LLM's language model) quantized through "
        "the libraries' own configs: `nf4` (bitsandbytes 4-bit, also on a CPU), `int8` (bitsandbytes LLM.int8) or "
        "`fp8` (torchao fp8 weights: CUDA GPUs of compute capability 8.9+); or `fp8_scaled` (dit-lora's own: fp8 "
        "weights with a scale per 64 inputs, computed in the run's precision: near-bf16 quality at about half the "
        "weight memory, on any GPU or CPU, no extra library; prefer it to nf4 when it fits). LoRA goes on the "
        "quantized linears and "
        "trains in fp32; the adapter loads into the ordinary unquantized pipeline. Quantized weights cannot be "
        "trained in full (--train_backbone).",
        choices=("none", "nf4", "int8", "fp8", "fp8_scaled"),
        section="model",
    )
    quantize_text_encoder: bool = opt(
        False,
        "Load the text encoder nf4-quantized through transformers' "
        "`BitsAndBytesConfig`, so the cache can be built on a small GPU (with --cache_latents, the default, the "
        "encoder is released after caching; without it, it stays loaded and encodes every step). The embeddings then "
        "carry its quantization error, and cached ones are kept apart from unquantized ones. Needs bitsandbytes; a model without a text encoder "
        "has nothing to quantize.",
        section="model",
    )
    demo: bool = opt(
        False,
        "Build a tiny randomly initialised pipeline at pretrained_model_name_or_path and a generated "
        "shapes dataset at train_data_dir when they are missing (offline demo and tests).",
        section="model",
    )
    demo_size: str = opt(
        "tiny",
        "Size of the demo model built by --demo.",
        choices=("tiny", "small"),
        section="model",
        applies=IMAGE_DEMOS,
    )
    demo_num_images: int = opt(
        32, "Number of generated images (or clips) in the demo dataset.", section="model", valid=POSITIVE
    )

    @property
    def path(self) -> str:
        """``--pretrained_model_name_or_path``, typed as a run has it: the config's checks (``validate_static``)
        refuse a run without one, so code that loads, plans or writes a card reads this instead of the Optional."""
        if self.pretrained_model_name_or_path is None:
            raise ValueError("no --pretrained_model_name_or_path: the config's checks refuse a run without one")
        return self.pretrained_model_name_or_path


@dataclass(frozen=True)
class DataOptions:
    """The training data: where it is, how it is read, cropped, captioned and cached."""

    train_data_dir: str | None = opt(
        None,
        "Folder of images with captions in metadata.jsonl/metadata.csv (`file_name` + caption column) "
        "or a .txt file beside each image.",
        section="data",
        resume="free",
    )
    instance_data_dir: str | None = opt(
        None,
        "Another name for --train_data_dir, as diffusers' DreamBooth scripts call it (give one of the two).",
        section="data",
        resume="free",
    )
    instance_prompt: str | None = opt(
        None,
        "One caption for every image (or clip) of the data, e.g. `a photo of sks dog`, as diffusers' DreamBooth "
        "scripts use it: per-image captions (caption files, metadata, the caption column) are then not read.",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    caption_extension: str = opt(
        ".txt",
        "Extension of the caption file beside each image or clip in --train_data_dir (`.txt`; kohya's sd-scripts "
        "use `.caption`).",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    dataset_name: str | None = opt(
        None,
        "A Hub dataset id, a local folder `datasets` opens (one written by `save_to_disk` too), or a single "
        ".parquet/.csv/.json/.jsonl file.",
        section="data",
        resume="free",
    )
    dataset_split: str = opt(
        "train", "The split of --dataset_name to train on.", section="data", resume="free", applies=DIFFUSION_FAMILIES
    )
    dataset_config_name: str | None = opt(
        None, "Config name passed to `datasets.load_dataset`.", section="data", resume="free"
    )
    dataset_config: str | None = opt(
        None,
        "A YAML or TOML file listing several data sets in one run (`datasets:`, a `[[datasets]]` table each in "
        "TOML, optional `general:` defaults): each set takes the data options under their own names "
        "(`train_data_dir` or `dataset_name`, `resolution`, `caption_extension`, `instance_prompt`, frame options) "
        "and `repeats`, `weight` (the probability a batch comes from it) and `loss_weight`. A `datasets:` list in "
        "the --config YAML does the same. Replaces --train_data_dir/--dataset_name: given on the command line, it "
        "takes the place of a --config file's `train_data_dir`/`dataset_name` (the run says so); both at one "
        "level are refused. A set's own `frame_buckets` take the place of the run's --max_num_frames/--height/--width "
        "for that set.",
        section="data",
        resume="free",
    )
    image_column: str = opt(
        "image", "Dataset column holding the images.", section="data", resume="free", applies=IMAGE_FAMILIES
    )
    caption_column: str = opt("text", "Dataset/metadata column holding the captions.", section="data", resume="free")
    max_train_samples: int | None = opt(
        None, "Use at most this many samples (deterministic prefix).", section="data", resume="free", valid=POSITIVE
    )
    validation_split: float | None = opt(
        None,
        "Hold out this fraction of the usable samples (files: a kohya repeat folder's copies stay together) for the "
        "validation loss, e.g. 0.1; never trained on. Which ones is decided by --seed and each sample's name alone, "
        "so every run with the same seed and data holds out the same ones, on any number of processes. The loss on "
        "them is computed every --validation_steps (and before the first step and at the last) at a fixed noise and "
        "timestep per sample. Or give --validation_data_dir.",
        section="data",
        resume="fixed",
        valid=Range(0, 0.5, low_open=True, why="the share of the samples held out; 0.05 to 0.2 is usual"),
    )
    validation_data_dir: str | None = opt(
        None,
        "A separate held-out data set for the validation loss (instead of --validation_split), read as the training "
        "data is: a folder like --train_data_dir's (metadata, caption files, kohya folders: each file once; a video "
        "LLM's annotation file) or, when the training data is a --dataset_name, a dataset or file `datasets` opens "
        "(its --dataset_split). Never trained on.",
        section="data",
        resume="free",
    )
    repeats: int = opt(
        1,
        "How many times each training image (or clip) is listed per epoch (diffusers' DreamBooth flag): encoded once, "
        "as a kohya `N_` folder's images are; a dataset config's sets give their own `repeats` instead.",
        section="data",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    with_prior_preservation: bool = opt(
        False,
        "Prior preservation (diffusers' DreamBooth flag): every micro-batch pairs its images with as many class "
        "images of --class_data_dir, and the loss adds --prior_loss_weight times the class images' loss (one "
        "backward), which keeps the model's idea of the class while it learns the instance. Missing class images "
        "(up to --num_class_images) are generated with the base model from --class_prompt before training. A dataset "
        "config's set with `is_reg: true` is the class data instead.",
        section="data",
        applies=DIFFUSION_FAMILIES,
    )
    class_data_dir: str | None = opt(
        None,
        "The class (regularization) images of --with_prior_preservation, read as --train_data_dir is; generated "
        "images are written here (`class_00000.png`, ...).",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    class_prompt: str | None = opt(
        None,
        "The caption of every class image (e.g. `a photo of dog`) and the prompt generated ones are made from; "
        "without it the class images need captions of their own and none can be generated.",
        section="data",
        applies=DIFFUSION_FAMILIES,
    )
    num_class_images: int = opt(
        100,
        "Class images of --with_prior_preservation: the first this many of --class_data_dir are used, and when it "
        "holds fewer the rest are generated (image families).",
        section="data",
        resume="free",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    prior_loss_weight: float = opt(
        1.0,
        "The weight of the class images' loss against the instance images' (--with_prior_preservation, or a "
        "dataset config's `is_reg` set).",
        section="data",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    sample_batch_size: int = opt(
        4,
        "Class images generated per call of the base model (--num_class_images).",
        section="data",
        resume="free",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    max_bad_samples_fraction: float = opt(
        0.05,
        "Stop when more than this fraction of samples cannot be read (they are skipped and named).",
        section="data",
        resume="free",
        valid=Range(0, 1, high_open=True),
    )
    resolution: int = opt(
        1024,
        "Training resolution in pixels (square); must be divisible by the model's latent stride.",
        section="data",
        valid=SIDE,
        applies=IMAGE_FAMILIES,
    )
    max_image_pixels: int | None = opt(
        None,
        "Images with more pixels than this are left out (quarantined, named) from their header, before decoding: "
        "a small file can hold a huge image. Default: 64 times the --resolution's pixels (8 times its size on "
        "each side), at least 8192x8192 (67 MP). Raise it to train on larger images; decoding threads are sized by it.",
        section="data",
        resume="free",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    aspect_buckets: str = opt(
        "auto",
        "Image sizes (image families): `auto` puts each image in the aspect-ratio bucket nearest its shape, "
        "about --resolution squared pixels in the model's stride (kohya's --enable_bucket); `square` crops every "
        "image to the --resolution square; `WIDTHxHEIGHT` (e.g. 768x512, multiples of the stride) crops every "
        "image to that one size. Images are resized to cover their size, then cropped.",
        section="data",
        applies=IMAGE_FAMILIES,
    )
    center_crop: bool = opt(
        False,
        "Center-crop after resizing; otherwise a random crop, fixed per image.",
        section="data",
        applies=IMAGE_FAMILIES,
    )
    random_flip: bool = opt(
        False,
        "Randomly flip images horizontally (reproducible per epoch and sample).",
        section="data",
        applies=DIFFUSION_FAMILIES,
    )
    caption_dropout_probability: float = opt(
        0.0,
        "Train this share of samples on the empty caption (decided per seed, epoch and sample, so a resume drops "
        "the same ones), which keeps the unconditional prediction of classifier-free guidance trained. The empty "
        "caption is encoded once, into the latent cache. 0 (the default) never drops; 0.05 to 0.1 is usual. "
        "A class-conditional family that drops its class labels itself refuses it (its page says so).",
        section="data",
        valid=Range(0, 1, high_open=True, why="the share of samples trained on the empty caption"),
        resume="fixed",
        applies=DIFFUSION_FAMILIES,
    )
    cache_latents: bool = opt(
        True,
        "Precompute latents and text embeddings once into a disk cache keyed by content, model and "
        "resolution; the VAE and text encoder leave memory afterwards.",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    cache_dir: str | None = opt(
        None,
        "Where the latent cache lives (default: $HF_HOME/dit-lora/cache or ~/.cache/dit-lora/cache).",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    masked_loss: bool = opt(
        False,
        "Weight each image's loss per latent pixel by its mask: white trains, black is ignored (--unmasked_weight), "
        "grey weights in between. The mask is `<name>_mask.png` beside the image (OneTrainer's `<name>-masklabel.png` "
        "too) or the file the --mask_column metadata (or dataset) column names; every image needs one (an all-white "
        "mask trains it whole). Any image mode: its luminance times its alpha. It is resized, cropped, flipped and "
        "bucketed with its image and averaged over each latent pixel (kohya's --masked_loss, OneTrainer's masked "
        "training). Mask files are never training images.",
        section="data",
        applies=MASKED_IMAGES,
    )
    mask_column: str = opt(
        "mask",
        "The metadata.jsonl/.csv (or --dataset_name) column naming each image's mask for --masked_loss: a path "
        "relative to the metadata file's folder, as `file_name` (a dataset's column: images or paths).",
        section="data",
        applies=MASKED_IMAGES,
    )
    unmasked_weight: float = opt(
        0.0,
        "--masked_loss: the weight of a mask's black area (OneTrainer's name); each latent pixel weighs "
        "max(mask, this). 0 ignores it; e.g. 0.1 keeps a little of the background learned.",
        section="data",
        valid=Range(0, 1, why="the loss weight of a mask's black area"),
        resume="free",
        applies=MASKED_IMAGES,
    )
    normalize_masked_area_loss: bool = opt(
        False,
        "--masked_loss: divide each sample's loss by its mask's mean weight, so a small masked area trains as "
        "strongly as a whole image does (OneTrainer's name); off, a sample's loss shrinks with its masked area.",
        section="data",
        resume="free",
        applies=MASKED_IMAGES,
    )
    dataloader_num_workers: int = opt(
        0,
        "Worker processes for data loading (0: load in the main process).",
        section="data",
        resume="free",
        valid=NON_NEGATIVE,
    )
    max_sequence_length: int | None = opt(
        None,
        "Maximum caption length in tokens. Default: the family's, from the model's configs (a family whose "
        "transformer has a fixed text length requires exactly that; its page and `dit-lora models` give the values).",
        section="data",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class VideoOptions:
    """Clips: frames per clip, their size and buckets, and the video column."""

    video_column: str | None = opt(
        None,
        "Videos: with --caption_column prompts.txt, the file listing one clip per line (e.g. videos.txt; the "
        "finetrainers layout); with --dataset_name, the column holding the videos (default `video`).",
        section="video",
        resume="free",
        applies=VIDEO_FAMILIES,
    )
    max_num_frames: int | None = opt(
        None,
        "Frames per training clip, of the form 4k+1. Default: the checkpoint's, as `dit-lora models` lists it "
        "(max_num_frames among its defaults, else the frame count it was trained at); latent frames are padded as "
        "the model's pipeline pads them.",
        section="video",
        valid=POSITIVE,
        applies=VIDEO_FAMILIES,
    )
    height: int | None = opt(
        None,
        "Video height in pixels (multiple of 16). Default: the checkpoint's, as `dit-lora models` lists it (height "
        "among its defaults, else the height it was trained at: Wan's 14B and A14B checkpoints, trained up to "
        "720 x 1280, default to their 480p size 480 x 832).",
        section="video",
        valid=SIDE,
        applies=VIDEO_SIZE,
    )
    width: int | None = opt(
        None,
        "Video width in pixels (multiple of 16). Default: the checkpoint's, as `dit-lora models` lists it (width "
        "among its defaults, else the width it was trained at; Wan 14B and A14B: 832).",
        section="video",
        valid=SIDE,
        applies=VIDEO_SIZE,
    )
    frame_buckets: str | None = opt(
        None,
        "Comma-separated FRAMESxHEIGHTxWIDTH buckets, e.g. `49x480x720,49x480x480,25x480x720`: each clip goes to "
        "the bucket with the most frames it can fill, then the nearest aspect ratio; a batch never mixes "
        "buckets. Replaces --max_num_frames/--height/--width.",
        section="video",
        applies=VIDEO_FAMILIES,
    )
    frame_sampling: str = opt(
        "uniform",
        "Which frames of a longer clip are used: `uniform` (evenly spread over the whole clip, like the diffusers "
        "video trainers) or `first` (consecutive frames from the start, keeping the clip's speed).",
        choices=("uniform", "first"),
        section="video",
        applies=VIDEO_FAMILIES,
    )


@dataclass(frozen=True)
class LoraOptions:
    """What trains: the LoRA adapters and any backbone weights unfrozen beside them."""

    lora_type: str = opt(
        "lora",
        "The adapter type, all PEFT's: `lora`; `dora` (LoRA with a trained magnitude per output channel, PEFT's "
        "LoraConfig(use_dora=True); diffusers' --use_dora is the same); `lokr` (a Kronecker product, PEFT's "
        "LoKrConfig; --lokr_factor, --lokr_decompose_both); `loha` (a Hadamard product of two low-rank products, "
        "PEFT's LoHaConfig). LoKr and LoHa (also --rank_dropout, --module_dropout, --use_effective_conv2d) are saved "
        "in PEFT's format (adapter_model.safetensors + adapter_config.json): diffusers' load_lora_weights does not "
        "read them; PEFT and `dit-lora export` (ComfyUI, where the family offers it) do.",
        choices=AdapterTypes(),
        section="lora",
    )
    use_dora: bool = opt(
        False,
        "diffusers' training examples' flag for --lora_type dora (a DoRA adapter); both given and disagreeing is "
        "refused.",
        section="lora",
    )
    rank: int = opt(
        16,
        "Adapter rank (LoRA/DoRA: of lora_A and lora_B; LoKr: of each Kronecker factor split into a low-rank "
        "product, a factor whose sides are at most twice the rank staying a whole matrix; LoHa: of each of its two "
        "products). LoRA, DoRA, LoHa: a rank above min(in_features, out_features) of every targeted layer is "
        "refused when the model loads (it adds weights and nothing to learn).",
        section="lora",
        valid=POSITIVE,
    )
    lora_alpha: float | None = opt(
        None,
        "Adapter alpha (scale = alpha / rank; LoKr/LoHa: PEFT's alpha). Default: equal to rank. The exported "
        "adapter has the scale folded into one factor (lora_B; LoKr lokr_w1, LoHa hada_w1_a) and stores alpha = "
        "rank, so diffusers' load_lora_weights, PEFT and a loader "
        "that reads no alpha (taking alpha = rank) all apply it at scale 1.0.",
        section="lora",
        valid=POSITIVE,
    )
    lora_dropout: float = opt(
        0.0,
        "Dropout probability on the LoRA input (--lora_type lora/dora; LoKr/LoHa: --rank_dropout, --module_dropout).",
        section="lora",
        valid=PROBABILITY,
        resume="free",
    )
    lora_layers: list[str] = opt(
        [],
        "Module names (or suffixes) that get LoRA, space- or comma-separated (`to_q to_k` or diffusers' "
        "`to_q,to_k`). Default: the family's attention projections. The video LLMs: the language model's "
        "projections by their last part (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj); `all` (the "
        "default, LLaMA-Factory's lora_target) is every one of them.",
        section="lora",
    )
    network_weights: str | None = opt(
        None,
        "Start the adapter from an existing one (sd-scripts' and musubi-tuner's --network_weights, ai-toolkit's "
        "pretrained_lora_path): a dit-lora or diffusers LoRA file or folder, a PEFT adapter folder, or a kohya/ComfyUI-"
        "named file (converted by the family's diffusers pipeline, where diffusers converts that naming). Loaded at "
        "the strength it was saved with before the first update (the run's --lora_alpha and --rank then only set how "
        "it is stored); its type and rank must be the run's (--lora_type, --rank) and every layer it adapts one the "
        "run adapts (--lora_layers). A resume takes the adapter from its checkpoint instead.",
        section="lora",
        resume="free",
    )
    init_lora_weights: str | None = opt(
        None,
        "A file or folder to start the adapter from: the same as --network_weights (PEFT's LoraConfig field name, "
        "which some trainers pass a LoRA file through). PEFT's initialisation schemes by name (gaussian, pissa, "
        "olora, loftq, ...) are not offered: a LoRA starts as PEFT's gaussian one, lora_B at zero.",
        section="lora",
        resume="free",
    )
    train_backbone: list[str] = opt(
        [],
        "Regex patterns of original parameters to unfreeze and train in full (e.g. `norm`, `time_embed`, "
        "`caption_projection`); saved to dit_lora_backbone.safetensors.",
        section="lora",
    )
    backbone_learning_rate: float = opt(
        1e-5,
        "Learning rate for the parameters unfrozen by --train_backbone.",
        section="lora",
        resume="free",
        valid=POSITIVE,
    )
    loraplus_lr_ratio: float | None = opt(
        None,
        "LoRA+ (PEFT): learning-rate ratio of lora_B to lora_A; e.g. 16. Off when unset. --lora_type lora/dora "
        "(DoRA: PEFT puts the magnitude vectors of linear layers in lora_B's group); LoKr/LoHa have no lora_A/B.",
        section="lora",
        resume="free",
        valid=Range(1, why="LoRA+ trains lora_B this many times faster than lora_A; typical: 4 to 16"),
    )
    lokr_factor: int | None = opt(
        None,
        "--lora_type lokr: the Kronecker factor (PEFT's decompose_factor; LyCORIS' and kohya's `factor`, "
        "ai-toolkit's lokr_factor): each weight's output and input sizes split as factor x rest where the factor "
        "divides them. Unset: the split nearest the square root (PEFT's -1).",
        section="lora",
        valid=Range(1, why="the size of LoKr's left Kronecker factor; 4 to 16 are common"),
    )
    lokr_decompose_both: bool = opt(
        False,
        "--lora_type lokr: also split the left Kronecker factor into two rank --rank matrices (PEFT's "
        "decompose_both; LyCORIS' decompose_both).",
        section="lora",
    )
    rank_dropout: float = opt(
        0.0,
        "--lora_type lokr/loha: the probability of dropping each output row of the update while training (PEFT's "
        "rank_dropout). PEFT draws the mask on the host and copies it to the device in every forward.",
        section="lora",
        valid=PROBABILITY,
        resume="free",
    )
    module_dropout: float = opt(
        0.0,
        "--lora_type lokr/loha: the probability of skipping a whole adapter layer in a training forward (PEFT's "
        "module_dropout).",
        section="lora",
        valid=PROBABILITY,
        resume="free",
    )
    use_effective_conv2d: bool = opt(
        False,
        "--lora_type lokr/loha: the Tucker form of a Conv2d/Conv1d update with a kernel larger than 1 (PEFT's "
        "use_effective_conv2d; LyCORIS' use_tucker). Only --lora_layers naming convolutions train one.",
        section="lora",
    )

    def __post_init__(self) -> None:
        # --use_dora is diffusers' spelling of --lora_type dora: from here on only lora_type is read (the parser
        # refuses the two disagreeing, config/adapter_types.resolve_dora_alias; here a section built in code)
        if self.use_dora:
            if self.lora_type not in ("lora", "dora"):
                raise UserError(
                    f"use_dora=True and lora_type={self.lora_type!r} disagree: use_dora is diffusers' name for "
                    "lora_type='dora'. Give one of them."
                )
            object.__setattr__(self, "lora_type", "dora")
            object.__setattr__(self, "use_dora", False)

    @property
    def effective_alpha(self) -> float:
        """LoRA alpha with the documented default (alpha = rank)."""
        return float(self.rank if self.lora_alpha is None else self.lora_alpha)
