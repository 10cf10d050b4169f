"""Third-party messages a user cannot act on, silenced where they are emitted; the dtype keyword each library takes.

Every dit-lora command imports PEFT, which imports bitsandbytes when it is installed; on a CPU with AVX512-BF16
bitsandbytes then logs (its logger ``bitsandbytes.backends.cpu.ops``, at import) that it could not fetch an optional
4-bit kernel from the Hub. dit-lora never uses that kernel (an nf4 base on a CPU computes with bitsandbytes' own
code), so the line only alarms. ``dit-lora launch`` with no launch options got accelerate's list of defaulted
options, which says ``--mixed_precision`` is 'no' while the run trains in bf16 (:data:`ACCELERATE_DEFAULTS_NOTE`); diffusers says guiders are experimental each time one is made (:data:`GUIDER_NOTE`). PEFT imports torchao too when it
is installed (the ``quant`` extra: ``--optimizer adamw8bit|adamw4bit``), which logs a line for each of its C++/CUDA
extensions that this torch build cannot load (:data:`TORCHAO_EXTENSION_NOTE`; dit-lora uses none of them: its
optimizers are PyTorch code compiled by torch.compile, its fp8 weights torch's own matmul) and makes torch log that
registering its enums is deprecated (:data:`PYTREE_ENUM_NOTE`). :func:`install` drops exactly those records with a
filter on exactly that logger: every other message of those libraries, and every warning, still shows.

The ``torch_dtype`` deprecation warnings are not filtered: they are avoided, by passing the keyword the installed
library wants (:func:`dtype_kwarg`).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_KERNEL_NOTE = "Failed to load CPU gemm_4bit_forward"
#: accelerate's launcher lists the launch options it defaulted ("`--mixed_precision` was set to a value of 'no'"),
#: under `dit-lora launch` on every run of the README's own command; the defaults are right for dit-lora, which
#: sets the precision itself (the list's 'no' was read as the run's precision), so the list only misleads
ACCELERATE_LAUNCH_LOGGER = "accelerate.commands.launch"
ACCELERATE_DEFAULTS_NOTE = "The following values were not passed to `accelerate launch`"
#: diffusers warns on every guider it makes that guiders are experimental: HunyuanVideo 1.5's pipelines hold one as a
#: component (its classifier-free guidance), so each load and validation said it, with nothing for a user to do
GUIDER_LOGGER = "diffusers.guiders.guider_utils"
GUIDER_NOTE = "Guiders are currently an experimental feature"
#: torchao's import: "Failed to load .../torchao/_C_mxfp8...so: ..." for each extension this torch cannot load
TORCHAO_LOGGER = "torchao"
TORCHAO_EXTENSION_NOTE = "Failed to load "
#: torch, while torchao registers its enums for torch.compile: "<enum 'KernelPreference'> is an Enum subclass and is
#: now natively supported by torch.compile ... register_constant() on Enum subclasses is deprecated"
PYTREE_LOGGER = "torch.utils._pytree"
PYTREE_ENUM_NOTE = "<enum '"
#: (logger, message prefix) of every dropped record
DROPPED = (
    (BNB_CPU_LOGGER, BNB_KERNEL_NOTE),
    (ACCELERATE_LAUNCH_LOGGER, ACCELERATE_DEFAULTS_NOTE),
    (GUIDER_LOGGER, GUIDER_NOTE),
    (TORCHAO_LOGGER, TORCHAO_EXTENSION_NOTE),
    (PYTREE_LOGGER, PYTREE_ENUM_NOTE),
)


class DropMessage(logging.Filter):
    """Drops the records of one logger whose message starts with ``prefix``; lets every other record through."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def install() -> None:
    """Silence the third-party lines listed in this module's docstring (idempotent; call before PEFT is imported).

    A filter on a logger that does not exist yet still applies: ``logging.getLogger`` returns the same object to
    the library when it is imported later.
    """
    for name, prefix in DROPPED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessage) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(DropMessage(prefix))


@functools.cache
def _takes_dtype(library: str) -> bool:
    """Whether the installed ``library``'s ``from_pretrained`` takes ``dtype`` (and deprecates ``torch_dtype``)."""
    from importlib.metadata import version

    from packaging.version import Version

    if library == "transformers":  # `dtype` since 4.56; `torch_dtype` warns from then on
        return Version(version("transformers")) >= Version("4.56")
    if library == "diffusers":  # the release that added `dtype` also added the helper that resolves the old name
        try:
            from diffusers.utils import deprecation_utils
        except ImportError:
            return False
        return hasattr(deprecation_utils, "_resolve_dtype")
    raise ValueError(f"unknown library {library!r}")


def dtype_kwarg(library: str, dtype: Any) -> dict[str, Any]:
    """``{"dtype": dtype}`` or ``{"torch_dtype": dtype}``: the keyword the installed ``library`` ("transformers" or
    "diffusers") takes without a deprecation warning, for ``from_pretrained(..., **dtype_kwarg(...))``."""
    return {"dtype" if _takes_dtype(library) else "torch_dtype": dtype}


__all__ = ["DropMessage", "dtype_kwarg", "install"]
